#!/usr/bin/env python3
"""bench/profile_table.py REMAT [REPS] [STEPS] — the per-op breakdown of a GPT training step
(issue 34's GPT: L=6 D=384 H=6 T=256 B=8, strategy none) in f32 and under bf16 autocast, on 1
and 2 threads, from `remat bench --profile`: per group of ops, ms a step, the bytes their
kernels were handed (MB a step), their floor (ms: the larger of bytes / the measured copy rate
and FLOPs / the measured GEMM rate, summed per kernel call group) and ms / floor. Then the
step: timed with the timer off, kernels, outside them, the sum of every floor, and the GEMM
floor (every matmul and attention FLOP at the measured GEMM rate). The four runs go one after
the other (median of REPS timed steps, default 3; STEPS profiled steps, default 3); the
floors are each run's own (a 2 x 64 MiB copy and an n = 1024 GEMM in the run's dtype).
Markdown on stdout, progress on stderr."""
import json
import os
import subprocess
import sys

GROUPS = [  # (name, [(op, kernel or None)]) in the order printed; the first match wins
    ('linear forward (GEMM, bias in it)', [('remat_linear', 'matmul')]),
    ('linear backward GEMMs (dx, dW)', [('LinearBackward', 'matmul')]),
    ('linear backward bias column sums', [('LinearBackward', 'column sum')]),
    ('attention forward', [('remat_attention', None)]),
    ('attention backward', [('AttentionBackward', None)]),
    ('GELU (+ bias) forward', [('remat_gelu', None), ('remat_bias_gelu', None)]),
    ('GELU (+ bias) backward', [('GeluBackward', None), ('BiasGeluBackward', None)]),
    ('layer norm (+ residual add) forward', [('remat_layer_norm', None), ('remat_add_layer_norm', None)]),
    ('layer norm backward (+ sum gradient)', [('LayerNormBackward', None), ('AddLayerNormBackward', None)]),
    ('residual add forward', [('remat_add', 'forward')]),
    ('gradient accumulation (adds in backward)', [('remat_add', 'backward')]),
    ('casts (remat_to_dtype)', [('remat_to_dtype', None), ('ToCopyBackward', None)]),
    ('embedding, loss, seed', [('remat_embedding', None), ('EmbeddingBackward', None),
                               ('remat_cross_entropy', None), ('CrossEntropyBackward', None),
                               ('remat_sum', None), ('backward', None)]),
]
GEMM_KERNELS = ('matmul', 'attention', 'attention backward')


def group_of(row):
    for name, keys in GROUPS:
        for op, k in keys:
            if row['op'] != op:
                continue
            if k is None or row['kernel'] == k or row['phase'] == k:
                return name
    return 'other'


def run(remat, dtype, threads, reps, steps):
    env = dict(os.environ, OMP_WAIT_POLICY='passive')
    cmd = [remat, 'bench', '--layers', '6', '--width', '384', '--heads', '6', '--context', '256',
           '--batch', '8', '--threads', str(threads), '--strategies', 'none', '--reps', str(reps),
           '--profile=%d' % steps, '--autocast', 'bf16' if dtype == 'bf16' else 'off', '--json',
           '--quiet']
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    j = json.loads(out)
    return j, j['strategies'][0]


def main():
    remat = sys.argv[1]
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    configs = [('f32', 1), ('f32', 2), ('bf16', 1), ('bf16', 2)]
    res = {}
    for dt, th in configs:
        print('running %s, %d thread(s)...' % (dt, th), file=sys.stderr, flush=True)
        j, s = run(remat, dt, th, reps, steps)
        fl = j['profile_floors']
        g = {}
        gemm_floor = 0.0
        for row in s['profile']['rows']:
            n = group_of(row)
            a = g.setdefault(n, [0.0, 0, 0.0])
            a[0] += row['ms']
            a[1] += row['bytes']
            a[2] += row['floor_ms']
            if row['kernel'] in GEMM_KERNELS:
                gemm_floor += row['flops'] / (fl['gemm_tflop_per_s'] * 1e12) * 1e3
        p = s['profile']
        res[(dt, th)] = (g, fl, s['step_ms'], p, gemm_floor)
    names = [n for n, _ in GROUPS] + ['other']
    cols = ['%s %dT' % c for c in configs]
    print('ms a step / MB a step / floor ms / ms ÷ floor, GPT L=6 D=384 H=6 T=256 B=8, '
          'strategy none, %d profiled steps\n' % steps)
    print('| ops | ' + ' | '.join(cols) + ' |')
    print('|---|' + '---|' * len(cols))
    for n in names:
        if not any(n in res[c][0] for c in configs):
            continue
        cells = []
        for c in configs:
            a = res[c][0].get(n)
            cells.append('—' if not a else '%.1f / %.0f / %.1f / %.1f' %
                         (a[0], a[1] / 1e6, a[2], a[0] / a[2] if a[2] > 0 else float('nan')))
        print('| %s | %s |' % (n, ' | '.join(cells)))
    rows = [
        ('step, timer off (ms)', lambda r: '%.1f' % r[2]),
        ('step, timer on: kernels / outside them (ms)',
         lambda r: '%.1f / %.1f' % (r[3]['kernel_ms'], r[3]['step_ms_timer_on'] - r[3]['kernel_ms'])),
        ('sum of the kernels\' floors (ms)',
         lambda r: '%.1f' % sum(a[2] for a in r[0].values())),
        ('GEMM floor: matmul + attention FLOPs at the GEMM rate (ms)', lambda r: '%.1f' % r[4]),
        ('step / GEMM floor', lambda r: '%.2f' % (r[2] / r[4])),
        ('floors measured: copy GB/s, GEMM TFLOP/s',
         lambda r: '%.1f, %.3f (%s)' % (r[1]['copy_gb_per_s'], r[1]['gemm_tflop_per_s'],
                                        r[1]['gemm_dtype'])),
    ]
    for label, f in rows:
        print('| %s | %s |' % (label, ' | '.join(f(res[c]) for c in configs)))


if __name__ == '__main__':
    main()

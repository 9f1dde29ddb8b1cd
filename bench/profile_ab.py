#!/usr/bin/env python3
"""bench/profile_ab.py NAME=REMAT,NAME=REMAT off|bf16 ROUNDS [THREADS] — interleaved A/B of
`remat bench --profile` (GPT L=6 D=384 H=6 T=256 B=8, THREADS threads (default 1), strategy
none): per round
every binary once, the order alternating; the profile's rows summed per group (the fused
ops' rows and the unfused ones they replace: docs/cli.md "Fused ops, measured with the
profile"); prints median [min-max] ms per step per group. Progress on stderr."""
import json, subprocess, sys, statistics, os
bins = sys.argv[1].split(',')      # name=path,...
ac = sys.argv[2]                    # off|bf16
rounds = int(sys.argv[3])
threads = sys.argv[4] if len(sys.argv) > 4 else '1' 
groups = {
  'gelu fwd (+bias fill in fc GEMM)': [('remat_gelu','forward'),('remat_bias_gelu','forward')],
  'gelu bwd + fc bias colsum': [('GeluBackward','backward'),('BiasGeluBackward','backward'),('LinearBackward/column sum','backward')],
  'layer_norm + residual add fwd': [('remat_layer_norm','forward'),('remat_add','forward'),('remat_add_layer_norm','forward')],
  'layer_norm bwd + grad accumulation': [('LayerNormBackward','backward'),('AddLayerNormBackward','backward'),('remat_add','backward')],
  'casts fwd (remat_to_dtype)': [('remat_to_dtype','forward')],
  'linear fwd (matmul)': [('remat_linear','forward')],
  'LinearBackward (all)': [('LinearBackward/*','backward')],
}
def run(path):
    env = dict(os.environ, OMP_WAIT_POLICY='passive')
    out = subprocess.run([path,'bench','--layers','6','--width','384','--heads','6','--context','256','--batch','8',
        '--threads',threads,'--strategies','none','--reps','2','--profile=2','--autocast',ac,'--json','--quiet'],
        capture_output=True, text=True, env=env, check=True).stdout
    j = json.loads(out)
    s = [x for x in j['strategies'] if x['strategy']=='none'][0] if 'strategies' in j else j['results'][0]
    return s, j
res = {b.split('=')[0]: [] for b in bins}
for r in range(rounds):
    order = bins if r % 2 == 0 else bins[::-1]
    for b in order:
        name, path = b.split('=')
        s, j = run(path)
        rows = s['profile']['rows']
        g = {}
        for gname, keys in groups.items():
            tot = 0.0
            for op, ph in keys:
                for row in rows:
                    if row['phase'] != ph: continue
                    if '/' in op:
                        o, k = op.split('/')
                        if row['op'] == o and (k == '*' or row['kernel'] == k): tot += row['ms']
                    elif row['op'] == op: tot += row['ms']
            g[gname] = tot
        g['outside kernels (timer on)'] = s['profile']['step_ms_timer_on'] - s['profile']['kernel_ms']
        g['step ms (timer off)'] = s['step_ms']
        g['step CPU ms (timer off)'] = s['step_cpu_ms']
        g['step ms (timer on)'] = s['profile']['step_ms_timer_on']
        res[name].append(g)
        print(f"round {r} {name}: " + ", ".join(f"{k.split(' ')[0]}={v:.1f}" for k, v in g.items()), file=sys.stderr, flush=True)
names = list(res)
print(f"autocast {ac}, {threads} thread(s), {rounds} rounds; median [min-max] ms per step")
for k in res[names[0]][0]:
    cells = []
    for n in names:
        v = [g[k] for g in res[n]]
        cells.append(f"{n} {statistics.median(v):8.2f} [{min(v):.2f}-{max(v):.2f}]")
    print(f"{k:38s} " + "  ".join(cells))

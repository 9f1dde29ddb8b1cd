#!/usr/bin/env python3
"""bench/attention_ab.py A=DIR,B=DIR ROUNDS [REPS] — interleaved A/B of the cpu attention
kernels and the GPT step they sit in, for two builds (DIR: a build folder holding
bench_attention and remat). Per round, each build once, the order alternating:
`bench_attention REPS` at 1 thread (forward and backward, f32 and bf16, CPU ms per call and
x their floor; OMP_WAIT_POLICY=passive), then `remat bench` (GPT L=6 D=384 H=6 T=256 B=8,
1 thread, strategy none, f32 and bf16 autocast) for its step_cpu_ms. Prints the load
before and after, and median [min-max] over the rounds of every figure, with B/A.
Progress on stderr."""
import json, os, re, statistics, subprocess, sys

builds = [b.split('=', 1) for b in sys.argv[1].split(',')]
rounds = int(sys.argv[2])
reps = sys.argv[3] if len(sys.argv) > 3 else '7'
env = dict(os.environ, OMP_WAIT_POLICY='passive', BENCH_THREADS='1')
row = re.compile(r'^1\s+(forward|backward)\s+([\d.]+) \[[^\]]*\]\s+([\d.]+)\s+([\d.]+) \[[^\]]*\]\s+([\d.]+)')


def attention(d):
    out = subprocess.run([os.path.join(d, 'bench_attention'), reps], capture_output=True,
                         text=True, env=env, check=True).stdout
    r = {}
    for line in out.splitlines():
        m = row.match(line)
        if m:
            p = 'fwd' if m.group(1) == 'forward' else 'bwd'
            r[f'attention {p} f32 ms'] = float(m.group(2))
            r[f'attention {p} f32 x floor'] = float(m.group(3))
            r[f'attention {p} bf16 ms'] = float(m.group(4))
            r[f'attention {p} bf16 x floor'] = float(m.group(5))
    return r


def step(d, ac):
    out = subprocess.run([os.path.join(d, 'remat'), 'bench', '--layers', '6', '--width', '384',
                          '--heads', '6', '--context', '256', '--batch', '8', '--threads', '1',
                          '--strategies', 'none', '--reps', '3', '--autocast', ac, '--json',
                          '--quiet'], capture_output=True, text=True, env=env, check=True).stdout
    j = json.loads(out)
    s = [x for x in j['strategies'] if x['strategy'] == 'none'][0] if 'strategies' in j else j['results'][0]
    return {f'GPT step {ac} CPU ms': s['step_cpu_ms']}


def load():
    return open('/proc/loadavg').read().split()[:3]


print(f'load before: {" ".join(load())}')
res = {name: [] for name, _ in builds}
for r in range(rounds):
    for name, d in (builds if r % 2 == 0 else builds[::-1]):
        g = attention(d)
        for ac in ('off', 'bf16'):
            g.update(step(d, ac))
        res[name].append(g)
        print(f'round {r} {name} (load {load()[0]}): ' +
              ', '.join(f'{k}={v:.2f}' for k, v in g.items()), file=sys.stderr, flush=True)
print(f'load after: {" ".join(load())}')
names = list(res)
print(f'{rounds} rounds, bench_attention {reps} reps a round (1 thread); median [min-max] over rounds')
for k in res[names[0]][0]:
    cells, med = [], []
    for n in names:
        v = [g[k] for g in res[n]]
        med.append(statistics.median(v))
        cells.append(f'{n} {med[-1]:8.2f} [{min(v):.2f}-{max(v):.2f}]')
    ratio = f'  {names[1]}/{names[0]} {med[1] / med[0]:.3f}' if len(med) > 1 and med[0] else ''
    print(f'{k:28s} ' + '  '.join(cells) + ratio)

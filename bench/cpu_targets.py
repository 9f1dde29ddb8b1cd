#!/usr/bin/env python3
"""bench/cpu_targets.py — issue 34's targets on the CPU at hand, in one command.

Measures, for the issue's GPT (L=6 D=384 H=6 T=256 B=8), in f32 and under bf16 autocast, at
1 and 2 threads, and again with the GEMMs' ISA capped (ONEDNN_MAX_CPU_ISA, and
MKL_ENABLE_INSTRUCTIONS for PyTorch's MKL) to AVX-512 and to AVX2 where the CPU has more:

  - the GEMM floor (wall time): every matmul and attention FLOP of a step at the rate of an n = 1024
    GEMM in the run's dtype, measured in the same run (`remat bench --profile`; bf16 on an
    AMX CPU: oneDNN's AMX GEMM), and the step against it;
  - remat against PyTorch (bench/pytorch/bench_torch.py: eager, torch.autocast for bf16),
    strategies none and block, ROUNDS interleaved rounds (the side that goes first
    alternates), both sides pinned to the same cores; the ratios are per round, of CPU time
    a step (other jobs stretch it far less than wall time), then their median [min-max];
  - block against none, remat's own, from the same rounds.

Then a verdict per target (issue 34, "Targets"): f32 step <= 1.15x the GEMM floor and <=
0.80x PyTorch; bf16 step <= 1.5x the GEMM floor and <= 0.60x PyTorch autocast; block <= 1.15x
none. The bf16 floor is the issue's "AMX GEMM floor" only on a CPU with AMX (the summary says
which GEMM it is); PyTorch's bf16 autocast is skipped on a CPU without bf16 instructions
(its step there takes ~30x remat's; --torch-bf16 on forces it).

Every run's JSON and the console go to OUT (default bench/results/<date>-cpu-targets-<host>);
summary.txt there is the table. Pass --quick for a smoke test (1 round, 2 reps, 1 thread).

    make build && bench/pytorch/setup_venv.sh        # remat, and a PyTorch 2.x venv
    python3 bench/cpu_targets.py --python /path/to/venv/bin/python
    python3 bench/cpu_targets.py --threads 1 --isa native --rounds 3 --reps 3

Timings mean something only on an otherwise idle machine (--quiet-load waits for one);
about 25 minutes on a 2-core AVX2 machine with the defaults, less where GEMMs are faster.
"""
import argparse
import datetime
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "pytorch"))
from compare import wait_quiet  # noqa: E402  (bench/pytorch/compare.py)

MODEL = ["--model", "gpt", "--layers", "6", "--width", "384", "--heads", "6", "--context", "256",
         "--batch", "8"]
GEMM_KERNELS = ("matmul", "attention", "attention backward")  # as bench/profile_table.py
# (target name, dtype, limit) — issue 34's numbers
LIMITS = {"floor": {"f32": 1.15, "bf16": 1.5}, "torch": {"f32": 0.80, "bf16": 0.60},
          "block": {"f32": 1.15, "bf16": 1.15}}
# ONEDNN_MAX_CPU_ISA cap -> (the /proc/cpuinfo flag the cap is below, MKL's name for it)
CAPS = {"AVX512_CORE": ("avx512_bf16", "AVX512"), "AVX2": ("avx512f", "AVX2")}


def cpu_info():
    model, flags = "unknown", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    return model, flags


def run(cmd, env, log):
    """Runs cmd, appends its stderr to log and returns its stdout parsed as JSON (None when
    it failed: the failure is logged and the target reads 'not measured')."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    log.write("$ %s\n%s" % (" ".join(cmd), p.stderr))
    log.flush()
    if p.returncode != 0:
        log.write("(exit %d)\n" % p.returncode)
        return None
    return json.loads(p.stdout)


def gemm_floor_ms(j):
    """The GEMM floor of the profiled strategy of `remat bench --profile --json` j (ms)."""
    rate = j["profile_floors"]["gemm_tflop_per_s"] * 1e12
    rows = j["strategies"][0]["profile"]["rows"]
    return sum(r["flops"] for r in rows if r["kernel"] in GEMM_KERNELS) / rate * 1e3


def ratio_text(xs):
    return "%.3f [%.3f-%.3f]" % (statistics.median(xs), min(xs), max(xs)) if xs else "-"


def verdict(xs, limit):
    if not xs:
        return "not measured"
    return "met" if statistics.median(xs) <= limit else "missed"


def measure(a, dtype, threads, isa, flags, out, log):
    """One configuration: its floor run and its interleaved rounds. Returns a dict of lists of
    ratios (floor, torch, block) and the facts the summary prints."""
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    if isa != "native":
        env["ONEDNN_MAX_CPU_ISA"] = isa
        env["MKL_ENABLE_INSTRUCTIONS"] = CAPS[isa][1]
    cores = a.cores or "0-%d" % (threads - 1)
    pin = ["taskset", "-c", cores] if shutil.which("taskset") else []
    ac = ["--autocast", "bf16" if dtype == "bf16" else "off"]
    common = MODEL + ["--threads", str(threads), "--reps", str(a.reps)] + ac
    tag = "%s-%dT-%s" % (dtype, threads, isa)
    res = {"floor": [], "torch": [], "block": [], "gemm": "", "step_ms": None, "floor_ms": None}

    wait_quiet(a.quiet_load, a.quiet_wait)
    prof = run(pin + [a.remat, "bench", "--json", "--quiet", "--strategies", "none",
                      "--profile=2"] + common, env, log)
    if prof:
        json.dump(prof, open(os.path.join(out, "profile-%s.json" % tag), "w"))
        res["floor_ms"] = gemm_floor_ms(prof)
        fl = prof["profile_floors"]
        res["gemm"] = "%s GEMM at %.3f TFLOP/s" % (fl["gemm_dtype"], fl["gemm_tflop_per_s"])

    torch_ok = dtype == "f32" or a.torch_bf16 == "on" or (
        a.torch_bf16 == "auto" and isa == "native" and ("avx512_bf16" in flags or
                                                        "amx_bf16" in flags))
    if dtype == "bf16" and not torch_ok:
        res["torch_skipped"] = "PyTorch bf16 skipped: no bf16 instructions under this ISA"
    sides = [("remat", pin + [a.remat, "bench", "--json", "--quiet", "--strategies",
                              "none,block"] + common)]
    if torch_ok:
        sides.append(("torch", pin + [a.python, os.path.join(HERE, "pytorch", "bench_torch.py"),
                                      "--json", "--strategies", "none,block"] + common))
    rounds = {"remat": [], "torch": []}
    for r in range(a.rounds):
        for side, cmd in (sides if r % 2 == 0 else sides[::-1]):
            wait_quiet(a.quiet_load, a.quiet_wait)
            print("  %s: round %d/%d: %s (load %.2f)" % (tag, r + 1, a.rounds, side,
                                                         os.getloadavg()[0]), file=sys.stderr)
            j = run(cmd, env, log)
            if j:
                json.dump(j, open(os.path.join(out, "%s-%s-r%d.json" % (side, tag, r + 1)), "w"))
            rounds[side].append(j)

    def cpu(j, s, key="step_cpu_ms"):
        return {x["strategy"]: x for x in j["strategies"]}[s][key]

    for i, rj in enumerate(rounds["remat"]):
        if not rj:
            continue
        res["block"].append(cpu(rj, "block") / cpu(rj, "none"))
        if res["floor_ms"]:
            res["floor"].append(cpu(rj, "none", "step_ms") / res["floor_ms"])
        tj = rounds["torch"][i] if i < len(rounds["torch"]) else None
        if tj:
            res["torch"].append(cpu(rj, "none") / cpu(tj, "none"))
            res.setdefault("torch_block", []).append(cpu(rj, "block") / cpu(tj, "block"))
    ok = [j for j in rounds["remat"] if j]
    if ok:
        res["step_ms"] = statistics.median(cpu(j, "none", "step_ms") for j in ok)
    okt = [j for j in rounds["torch"] if j]
    if okt:
        res["torch_ms"] = statistics.median(cpu(j, "none", "step_ms") for j in okt)
        res["torch_version"] = okt[0].get("torch", "?")
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--remat", default=os.path.join(ROOT, "build", "remat"))
    ap.add_argument("--python", default=sys.executable, help="a Python with PyTorch 2.x")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--isa", default="all",
                    help="native, AVX512_CORE, AVX2 (comma-separated) or all: native and "
                         "every cap below what the CPU has")
    ap.add_argument("--cores", default="", help="taskset cores (default 0..threads-1)")
    ap.add_argument("--torch-bf16", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--quiet-load", type=float, default=0.0)
    ap.add_argument("--quiet-wait", type=float, default=300.0)
    ap.add_argument("--quick", action="store_true", help="1 round of 2 reps, 1 thread, native")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.reps, a.threads, a.isa = 1, 2, "1", "native"
    if not os.access(a.remat, os.X_OK):
        sys.exit("%s not found: run `make build` first (or pass --remat PATH)" % a.remat)
    model, flags = cpu_info()
    isas = ["native"] + [c for c, (flag, _) in CAPS.items() if flag in flags] \
        if a.isa == "all" else a.isa.split(",")
    host = socket.gethostname().split(".")[0]
    out = a.out or os.path.join(ROOT, "bench", "results", "%s-cpu-targets-%s" % (
        datetime.date.today().isoformat(), host))
    os.makedirs(out, exist_ok=True)
    log = open(os.path.join(out, "console.log"), "a")
    isa_flags = [f for f in ("amx_bf16", "avx512_bf16", "avx512f", "avx2", "fma") if f in flags]
    head = ["CPU: %s; flags: %s; %d online CPUs" % (model, " ".join(isa_flags) or "none of "
                                                   "amx_bf16 avx512_bf16 avx512f avx2",
                                                   os.cpu_count()),
            "remat: %s; rounds %d x reps %d; %s" % (a.remat, a.rounds, a.reps,
                                                  datetime.datetime.now(datetime.timezone.utc).strftime(
                                                      "%Y-%m-%d %H:%M UTC")),
            "ratios per round, median [min-max] over the rounds: step / floor of wall time "
            "(remat's none, median of its reps); remat / PyTorch and block / none of CPU time "
            "a step", ""]
    print("\n".join(head), file=sys.stderr)
    rows = []
    for isa in isas:
        for dtype in a.dtypes.split(","):
            for t in (int(x) for x in a.threads.split(",")):
                r = measure(a, dtype, t, isa, flags, out, log)
                rows.append((isa, dtype, t, r))
    lines = head + ["| ISA | dtype | threads | step ms | PyTorch ms | GEMM floor ms | step / floor | "
                    "remat / PyTorch (none) | (block) | block / none | verdicts |",
                    "|---|---|---|---|---|---|---|---|---|---|---|"]
    for isa, dtype, t, r in rows:
        amx = "amx_bf16" in flags and isa == "native"
        v = ["floor %s%s" % (verdict(r["floor"], LIMITS["floor"][dtype]),
                             " (not the AMX floor)" if dtype == "bf16" and not amx else ""),
             "PyTorch %s" % (verdict(r["torch"], LIMITS["torch"][dtype])
                             if "torch_skipped" not in r else "not measured"),
             "block %s" % verdict(r["block"], LIMITS["block"][dtype])]
        lines.append("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            isa, dtype, t, "%.1f" % r["step_ms"] if r["step_ms"] else "-",
            "%.1f" % r["torch_ms"] if r.get("torch_ms") else "-",
            "%.1f (%s)" % (r["floor_ms"], r["gemm"]) if r["floor_ms"] else "-",
            ratio_text(r["floor"]), ratio_text(r["torch"]), ratio_text(r.get("torch_block", [])),
            ratio_text(r["block"]), "; ".join(v)))
    lines += ["", "limits (issue 34): f32 step <= 1.15x the GEMM floor and <= 0.80x PyTorch; "
              "bf16 <= 1.5x the (AMX) GEMM floor and <= 0.60x PyTorch autocast; block <= "
              "1.15x none."]
    lines += ["PyTorch: %s" % next((r["torch_version"] for *_, r in rows if "torch_version" in r),
                                   "not run")]
    lines += [r["torch_skipped"] + " (%s %s %dT)" % (isa, dtype, t)
              for isa, dtype, t, r in rows if "torch_skipped" in r]
    text = "\n".join(lines) + "\n"
    open(os.path.join(out, "summary.txt"), "w").write(text)
    print(text)
    print("logs and JSON: %s" % out, file=sys.stderr)


if __name__ == "__main__":
    main()

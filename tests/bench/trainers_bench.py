#!/usr/bin/python3
"""The two trainers side by side on the CPU (docs/trainers.md): the built-in
`scalesweep train` and the reference PyTorch trainer (trainers/torch), on the
same resolved run config, at two shapes, run in turn (built-in, PyTorch,
built-in, ...) so that a drift in the machine's speed hits both.

For each run it reads the trainer's own lines:
- tokens/s: the median of the step lines' tok_per_s after the first WARMUP
  steps (steady state; start-up excluded);
- spawn to first step: from starting the process the worker would start
  (`scalesweep train --config ...` for the built-in, `scalesweep launch -- python3
  train.py` with the contract's environment for PyTorch) to its first step line:
  what a worker adds to a run before it trains, per run.
It prints each side's medians over the repeats and the median of the pair
ratios (PyTorch / built-in). Figures, never a test.

Usage (from the repository root, after a build):
  /usr/bin/python3 tests/bench/trainers_bench.py [--bin build/scalesweep] [--repeats 5]
                                                 [--shapes small,medium] [--threads 1]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAPES = {
    # the quick start's sizes: a 2-layer d=64 model (~100k parameters), T=64
    "small": {"model": {"n_layer": 2, "d_model": 64, "n_head": 4, "seq_len": 64},
              "train": {"batch_size": 16, "tokens": 16 * 64 * 60}},
    # a larger one: 4 layers, d=256 (~3.2M parameters), T=128
    "medium": {"model": {"n_layer": 4, "d_model": 256, "n_head": 4, "seq_len": 128},
               "train": {"batch_size": 8, "tokens": 8 * 128 * 30}},
}


def resolve(binary, partial, threads):
    p = json.loads(json.dumps(partial))
    p["data"] = {"synthetic": {"words": 1024, "zipf": 1.4}}
    p["threads"] = threads
    p["train"].update({"lr": 1e-3, "schedule": "constant", "warmup_tokens": 0})
    p["eval"] = {"every_tokens": 0, "tokens": p["model"]["seq_len"] * 8}
    out = subprocess.run([binary, "train", "--config", "-", "--print-config"],
                         input=json.dumps(p), capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def run(cmd, env, warmup):
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                         text=True)
    first, rates = None, []
    for line in p.stdout:
        ev = json.loads(line)
        if ev.get("event") == "step":
            if first is None:
                first = time.monotonic() - t0
            if ev["step"] > warmup:
                rates.append(ev["tok_per_s"])
    if p.wait() != 0:
        sys.exit(f"{cmd[0]} exited with {p.returncode}")
    return statistics.median(rates), first


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "scalesweep"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated: small,medium")
    a = ap.parse_args()
    binary = os.path.abspath(a.bin)
    tmp = tempfile.mkdtemp(prefix="ss-trainers-bench-")
    print(f"{'shape':8} {'built-in tok/s':>15} {'PyTorch tok/s':>14} {'ratio':>7}"
          f" {'built-in spawn->step':>21} {'PyTorch spawn->step':>20}")
    for name in a.shapes.split(","):
        partial = SHAPES[name]
        cfg = resolve(binary, partial, a.threads)
        path = os.path.join(tmp, name + ".json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SCALESWEEP_")}
        env["OMP_WAIT_POLICY"] = "PASSIVE"
        tenv = dict(env, SCALESWEEP_CONFIG=path, SCALESWEEP_DATA_DIRS="")
        ours, theirs, ratios = [], [], []
        for _ in range(a.repeats):
            b = run([binary, "train", "--config", path], env, a.warmup)
            t = run([binary, "launch", "--world-size", "1", "--", "/usr/bin/python3",
                     os.path.join(ROOT, "trainers", "torch", "train.py")], tenv, a.warmup)
            ours.append(b)
            theirs.append(t)
            ratios.append(t[0] / b[0])
        med = statistics.median
        print(f"{name:8} {med(r for r, _ in ours):15.0f} {med(r for r, _ in theirs):14.0f}"
              f" {med(ratios):7.3f} {med(s for _, s in ours) * 1000:18.0f} ms"
              f" {med(s for _, s in theirs) * 1000:17.0f} ms")
        sys.stdout.flush()
    print(f"(medians of {a.repeats} runs each, {a.threads} thread(s), fp32; ratio: the median "
          "of the pairs' PyTorch / built-in tokens/s)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The GPU benchmark's arithmetic without a GPU (ctest bench_table, label
unit): tests/gpu/bench_table.py on a fixture of trainer and torch_bench.py
outputs (tests/gpu/fixtures/bench), every MFU, ratio and verdict checked
against figures worked out by hand. Then, where an interpreter with PyTorch
is found (SS_TORCH_PYTHON, this one, /usr/bin/python3), torch_bench.py at a
tiny shape on the CPU in both modes, and its lines through the table: eager
must measure, compile must measure or say "unavailable: ..." and exit 0.
Without PyTorch that part says so and is left out (CI has no PyTorch)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_table  # noqa: E402

FIXTURE = os.path.join(HERE, "fixtures", "bench")
PEAK = 989e12
FPT_124M = 798031872  # runcfg/flops.c at L12 d768 T1024 V50304
FPT_350M_T2048 = 2422996992  # at L24 d1024 T2048 V50304
failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)


def close(a, b, rel=1e-9):
    return a is not None and b is not None and abs(a - b) <= rel * abs(b)


def fixture_part(tmp):
    md, js = os.path.join(tmp, "bench.md"), os.path.join(tmp, "bench.json")
    out = subprocess.run([sys.executable, os.path.join(HERE, "bench_table.py"), "table", FIXTURE,
                          "--gpu", "NVIDIA H200", "--peak", "989e12", "--md", md, "--json", js],
                         capture_output=True, text=True, check=True).stdout
    res = json.load(open(js))
    shapes = {s["name"]: s for s in res["shapes"]}
    g = shapes["gpt2-124M"]
    ss, ea, co = (g["rows"][k] for k in ("ss-bf16", "torch-eager", "torch-compile"))
    check(g["flops_per_token"] == FPT_124M and g["flops_per_token_from"] == "trainer",
          "124M: flops_per_token from the config event")
    # the first 3 step lines (100k, 200k, 300k) are warm-up; the median of the rest
    check(close(ss["tok_per_s"], 500000) and ss["steps_timed"] == 5, "124M: scalesweep 500,000 tokens/s")
    check(close(ss["mfu"], 500000 * FPT_124M / PEAK), "124M: scalesweep MFU 40.35%")
    check(close(ea["mfu"], 400000 * FPT_124M / PEAK), "124M: eager MFU with the same flops_per_token")
    check(close(co["mfu"], 625000 * FPT_124M / PEAK), "124M: compile MFU")
    check(close(g["ratios"]["scalesweep/eager"], 1.25), "124M: scalesweep/eager x1.25")
    check(close(g["ratios"]["scalesweep/compile"], 0.8), "124M: scalesweep/compile x0.80")
    check(ss["peak_memory_bytes"] == 10 << 30 and ea["peak_memory_bytes"] == 20 << 30,
          "124M: peak memory of both sides")
    check(close(co["compile_s"], 61.2), "124M: compile time reported")
    ex = {x["what"].split()[1]: x for x in res["extras"]}
    check(close(ex["fp16"]["ratio"], 0.9), "fp16/bf16 tokens/s x0.90")
    # step time: 16384/400000 against 16384/500000 s
    check(close(ex["8-bit"]["ratio"], 1.25) and close(ex["8-bit"]["a"], 16384 / 400000),
          "8-bit AdamW / AdamW step time x1.25")

    t = shapes["tiny"]["rows"]
    check(t["ss-bf16"]["note"].startswith("exit 1: scalesweep train: backend cuda: no CUDA device")
          and not t["ss-bf16"]["oom"], "tiny: the trainer's error shown once")
    check(t["torch-eager"]["mfu"] is None and "cpu" in t["torch-eager"]["note"],
          "tiny: a CPU torch row has no MFU")
    check(t["torch-compile"]["note"].startswith("torch.compile unavailable: "),
          "tiny: compile unavailable shown")
    check(shapes["tiny"]["ratios"]["scalesweep/eager"] is None, "tiny: no ratio without scalesweep")

    c = shapes["L4-d256"]["rows"]["ss-bf16"]  # timed out after 6 steps: 3 are figures
    check(close(c["tok_per_s"], 5e6) and c["steps_timed"] == 3 and c["peak_memory_bytes"] is None
          and c["note"] == "timed out after 150 s", "L4: a run cut short keeps its figures")

    b = shapes["350M-T2048"]
    check(close(b["rows"]["ss-bf16"]["mfu"], 100000 * FPT_350M_T2048 / PEAK), "350M T2048: MFU")
    check(b["rows"]["torch-eager"]["note"].startswith("out of memory"), "350M T2048: torch OOM shown")
    check("budget" in b["rows"]["torch-compile"]["note"], "350M T2048: skipped compile shown")

    verdicts = [(x["goal"].split(":")[0].split(" at ")[0], x["met"]) for x in res["goals"]]
    check(verdicts == [("MFU >= 45%", False), ("scalesweep / PyTorch eager >= 1.2", True),
                       ("scalesweep trains 350M-T2048", True),
                       ("scalesweep trains huge-T8192", False)],
          "goals: missed, met, met (fits), missed (out of memory)")
    h = shapes["huge-T8192"]["rows"]
    check(h["ss-bf16"]["note"] == "out of memory (exit 1: cuda: out of device memory allocating "
          "a tensor: asked 858993459200 bytes, 140000000000 free of 150000000000)"
          and h["ss-bf16"]["oom"], "huge: the trainer's error without its HINT, and stderr's")
    check(h["torch-compile"]["note"] == "not run", "huge: a run with neither output nor note")
    lines = out.splitlines()
    check(len(lines) == 21 and all(x.startswith("BENCH ") for x in lines),
          "21 BENCH lines: 5 shapes x 3, 2 extras, 4 goals")
    check("BENCH goal MFU >= 45%: scalesweep bf16 at gpt2-124M: 40.3%, missed" in lines,
          "the MFU goal's line")
    text = open(md).read()
    check("| | | PyTorch eager bf16 | 400,000 | 32.3% | 20.00 GiB | x1.25 (goal >= 1.2: met) |"
          in text, "the Markdown row of PyTorch eager, its goal beside it")
    check("| scalesweep bf16 | 500,000 | 40.3% (goal >= 45%: missed) | 10.00 GiB |  |" in text,
          "the Markdown row of scalesweep, its goal beside it")
    check("| scalesweep bf16 | 100,000 | 24.5% | 30.00 GiB (goal: fits, met) |  |" in text,
          "the fit goal beside the memory")
    check("| scalesweep / PyTorch eager >= 1.2 at gpt2-124M bf16 | x1.25 | met |" in text,
          "the Markdown goal row")

    fpt = lambda *a: float(subprocess.run(  # noqa: E731
        [sys.executable, os.path.join(HERE, "bench_table.py"), "fpt"] + [str(x) for x in a],
        capture_output=True, text=True, check=True).stdout)
    check(fpt(os.path.join(FIXTURE, "gpt2-124M.ss-bf16.out"), 1, 1, 1, 1) == FPT_124M,
          "fpt: the config event's figure")
    check(fpt(os.path.join(tmp, "absent"), 24, 1024, 2048, 50304) == FPT_350M_T2048,
          "fpt: SCIENCE.md's formula without a trainer output")


def find_torch_python():
    for p in (os.environ.get("SS_TORCH_PYTHON"), sys.executable, "/usr/bin/python3"):
        if p and shutil.which(p):
            try:
                r = subprocess.run([p, "-c", "import torch.nn"], capture_output=True, timeout=300)
            except subprocess.TimeoutExpired:
                continue
            if r.returncode == 0:
                return p
    return None


def torch_part(tmp):
    py = find_torch_python()
    if py is None:
        print("skip  torch_bench.py: no Python with PyTorch here (SS_TORCH_PYTHON)")
        return
    d = os.path.join(tmp, "torch")
    os.makedirs(d)
    with open(os.path.join(d, "plan"), "w") as f:
        f.write("tiny 2 64 4 64 512 4 5 -\n")
    recs = {}
    for mode in ("eager", "compile"):
        r = subprocess.run([py, os.path.join(HERE, "torch_bench.py"), "--layers", "2", "--d-model",
                            "64", "--heads", "4", "--seq-len", "64", "--vocab", "512",
                            "--micro-batch", "4", "--steps", "3", "--warmup", "1", "--mode", mode,
                            "--device", "cpu", "--json"], capture_output=True, text=True,
                           timeout=600)
        with open(os.path.join(d, "tiny.torch-%s.out" % mode), "w") as f:
            f.write(r.stdout)
        rec = json.loads(r.stdout.splitlines()[-1])
        recs[mode] = rec
        print("      %s: exit %d, %s" % (mode, r.returncode, r.stdout.strip()))
        check(r.returncode == 0, "torch_bench.py %s exits 0" % mode)
    e, c = recs["eager"], recs["compile"]
    check(e.get("device") == "cpu" and e.get("tok_per_s", 0) > 0 and e.get("mfu") is None,
          "torch_bench.py eager measures on the CPU (no MFU)")
    # rcfg_params: L(12d^2 + 13d) + 2d + Vd + Td: the same model, parameter for parameter
    check(e.get("params") == 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64 + 512 * 64 + 64 * 64,
          "torch_bench.py: scalesweep's parameter count")
    check(e.get("flops_per_token") == bench_table.flops_per_token(2, 64, 64, 512),
          "torch_bench.py: SCIENCE.md's flops_per_token without the argument")
    check(c.get("compile") == "ok" and c.get("tok_per_s", 0) > 0
          or str(c.get("compile", "")).startswith("unavailable: "),
          "torch_bench.py compile: measured or unavailable (%s)" % c.get("compile"))
    res = bench_table.build(d, "cpu", PEAK)
    rows = res["shapes"][0]["rows"]
    check(close(rows["torch-eager"]["tok_per_s"], e["tok_per_s"]) and rows["torch-eager"]["mfu"] is None,
          "torch_bench.py's line through the table")


def main():
    tmp = tempfile.mkdtemp(prefix="bench_table.")
    try:
        fixture_part(tmp)
        torch_part(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

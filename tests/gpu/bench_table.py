#!/usr/bin/env python3
"""The GPU benchmark's table (tests/gpu/run.sh, section 3), from the raw
outputs it leaves in one folder; the Python standard library only, so that it
runs, and is tested (tests/gpu/test_bench_table.py), without a GPU or PyTorch.

  bench_table.py table DIR --gpu NAME [--peak FLOPS] [--md FILE] [--json FILE]
      prints the BENCH lines (summary.txt's), writes the Markdown table and
      its machine-readable twin
  bench_table.py fpt TRAINER_OUT L D T V
      the flops_per_token to hand torch_bench.py: the trainer's config event's,
      else SCIENCE.md's formula (the same number, runcfg/flops.c)

DIR holds:
  plan            one line per shape: NAME L D H T V MICRO_BATCH STEPS ROLE;
                  ROLE "goal" (the shape the MFU and ratio goals are read
                  at), "fit" (its goal is to fit in memory) or "-"
  NAME.KIND.out   the run's stdout, KIND one of ss-bf16, ss-fp16,
                  ss-adamw8bit (the trainer's JSON lines), torch-eager,
                  torch-compile (torch_bench.py's JSON line)
  NAME.KIND.note  one line when the run failed, timed out or was skipped

Figures: tokens/s is micro-batch x T over the median step time after the
warm-up (the trainer's first WARMUP step lines are dropped; torch_bench.py
drops its own); MFU = tokens/s x flops_per_token / peak, one flops_per_token
per shape (the trainer's config event's, else the formula) for every row;
memory is the trainer's peak_device_bytes and PyTorch's
max_memory_allocated. A trainer run cut short (timed out) past its warm-up
keeps its figures, without peak memory, and its note. Ratios are scalesweep's tokens/s over the other's
(above 1: scalesweep is faster); the optimizer's is 8-bit AdamW's median
step time over AdamW's.
"""
import argparse
import json
import os
import re
import statistics
import sys

WARMUP = 3  # step lines dropped before the median (cuBLASLt heuristics, caches)
GOAL_MFU = 0.45
GOAL_EAGER = 1.2
OOM = re.compile(r"out of (device )?memory", re.I)
KINDS = (("ss-bf16", "scalesweep bf16"), ("torch-eager", "PyTorch eager bf16"),
         ("torch-compile", "torch.compile bf16"))


def flops_per_token(layers, d, T, V):
    """SCIENCE.md: 6(12 L d^2 + d V) + 6 L T d."""
    return 6.0 * (12.0 * layers * d * d + d * V) + 6.0 * layers * T * d


def read_json_lines(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


def read_note(path):
    try:
        with open(path) as f:
            return " ".join(f.read().split())
    except OSError:
        return None


def trainer_row(base):
    """Figures of one trainer run, or {"note": why there are none}."""
    ev = read_json_lines(base + ".out")
    cfg = next((e for e in ev if e.get("event") == "config"), None)
    steps = [e for e in ev if e.get("event") == "step" and e.get("tok_per_s")]
    done = next((e for e in ev if e.get("event") == "done"), None)
    err = next((e for e in ev if e.get("event") == "error"), None)
    row = {"flops_per_token": cfg.get("flops_per_token") if cfg else None}
    note = read_note(base + ".note")
    why = err.get("message", "").split("\nHINT")[0] if err else None
    row["oom"] = bool(OOM.search("%s %s" % (why, note)))
    # a run cut short (timed out) past its warm-up still has figures
    if not steps or (not done and len(steps) <= WARMUP):
        why = " ".join(why.split()) if why else None
        if why and note and why not in note:  # the stderr line may say more
            why = "%s (%s)" % (why, note)
        row["note"] = note if note and (not why or why in note) else why or "not run"
        return row
    timed = steps[WARMUP:] or steps[1:] or steps
    per_step = steps[0]["tokens"] / steps[0]["step"]  # tokens of one step
    rates = [e["tok_per_s"] for e in timed]
    times = [per_step / r for r in rates]
    row.update(tok_per_s=per_step / statistics.median(times), step_s_median=statistics.median(times),
               steps_timed=len(timed),
               peak_memory_bytes=done.get("peak_device_bytes") if done else None)
    if note:  # e.g. a run that printed its lines, then failed
        row["note"] = note
    return row


def torch_row(base):
    ev = read_json_lines(base + ".out")
    r = ev[-1] if ev else None
    if r is None:
        return {"note": read_note(base + ".note") or "not run"}
    row = {"device": r.get("device"), "torch": r.get("torch"),
           "flops_per_token": r.get("flops_per_token")}
    if r.get("error"):
        row["note"] = r["error"]
    elif str(r.get("compile", "")).startswith("unavailable"):
        row["note"] = "torch.compile " + r["compile"]
    elif r.get("tok_per_s"):
        row.update(tok_per_s=r["tok_per_s"], step_s_median=r.get("step_s_median"),
                   steps_timed=r.get("steps"), peak_memory_bytes=r.get("peak_memory_bytes"))
        if r.get("compile") == "ok":
            row["compile_s"] = r.get("first_step_s")
        if r.get("device") != "cuda":
            row["note"] = "ran on %s, not a GPU" % r.get("device")
    else:
        row["note"] = read_note(base + ".note") or "no figures"
    return row


def ratio(a, b):
    if a and b and a.get("tok_per_s") and b.get("tok_per_s"):
        return a["tok_per_s"] / b["tok_per_s"]
    return None


def read_plan(path):
    plan = []
    with open(path) as f:
        for line in f:
            w = line.split()
            if not w or w[0].startswith("#"):
                continue
            if len(w) != 9:
                raise SystemExit("%s: expected NAME L D H T V MICRO_BATCH STEPS ROLE, got %r"
                                 % (path, line.strip()))
            name, role = w[0], w[8]
            L, D, H, T, V, B, S = (int(x) for x in w[1:8])
            plan.append(dict(name=name, layers=L, d_model=D, heads=H, seq_len=T, vocab=V,
                             micro_batch=B, steps=S, role=role))
    return plan


def build(d, gpu, peak):
    """Everything the table shows, as one dict (bench.json)."""
    res = {"gpu": gpu, "peak_flops": peak, "warmup_steps": WARMUP, "shapes": [],
           "extras": [], "goals": []}
    for s in read_plan(os.path.join(d, "plan")):
        base = os.path.join(d, s["name"])
        rows = {"ss-bf16": trainer_row(base + ".ss-bf16"),
                "torch-eager": torch_row(base + ".torch-eager"),
                "torch-compile": torch_row(base + ".torch-compile")}
        fpt = rows["ss-bf16"].get("flops_per_token")
        s["flops_per_token_from"] = "trainer" if fpt else "formula"
        s["flops_per_token"] = fpt or flops_per_token(s["layers"], s["d_model"], s["seq_len"],
                                                      s["vocab"])
        for r in rows.values():
            r.pop("flops_per_token", None)
            on_gpu = r.get("device", "cuda") == "cuda"  # a CPU run has no GPU peak
            r["mfu"] = (r["tok_per_s"] * s["flops_per_token"] / peak
                        if peak and on_gpu and r.get("tok_per_s") else None)
        s["rows"] = rows
        s["ratios"] = {"scalesweep/eager": ratio(rows["ss-bf16"], rows["torch-eager"]),
                       "scalesweep/compile": ratio(rows["ss-bf16"], rows["torch-compile"])}
        res["shapes"].append(s)

        fp16 = trainer_row(base + ".ss-fp16")
        if "tok_per_s" in fp16 or fp16.get("note") != "not run":
            res["extras"].append({
                "shape": s["name"], "what": "scalesweep fp16 (dynamic loss scaling) / bf16, tokens/s",
                "a": fp16.get("tok_per_s"), "b": rows["ss-bf16"].get("tok_per_s"), "unit": "tokens/s",
                "ratio": ratio(fp16, rows["ss-bf16"]), "note": fp16.get("note")})
        o8 = trainer_row(base + ".ss-adamw8bit")
        if "tok_per_s" in o8 or o8.get("note") != "not run":
            ta, tb = o8.get("step_s_median"), rows["ss-bf16"].get("step_s_median")
            res["extras"].append({
                "shape": s["name"], "what": "scalesweep 8-bit AdamW / AdamW, step time (bf16)",
                "a": ta, "b": tb, "unit": "s", "ratio": ta / tb if ta and tb else None,
                "note": o8.get("note")})

        ss = rows["ss-bf16"]
        if s["role"] == "goal":
            res["goals"].append({
                "goal": "MFU >= %.0f%%: scalesweep bf16 at %s" % (100 * GOAL_MFU, s["name"]),
                "value": ss["mfu"], "target": GOAL_MFU,
                "met": None if ss["mfu"] is None else ss["mfu"] >= GOAL_MFU})
            r = s["ratios"]["scalesweep/eager"]
            res["goals"].append({
                "goal": "scalesweep / PyTorch eager >= %.1f at %s bf16" % (GOAL_EAGER, s["name"]),
                "value": r, "target": GOAL_EAGER, "met": None if r is None else r >= GOAL_EAGER})
        elif s["role"] == "fit":
            # missed: out of memory; a run that failed otherwise, or was
            # skipped, says nothing about fitting
            res["goals"].append({
                "goal": "scalesweep trains %s at T=%d (B=%d) in the GPU's memory"
                        % (s["name"], s["seq_len"], s["micro_batch"]),
                "value": ss.get("peak_memory_bytes"), "target": None,
                "met": True if "tok_per_s" in ss else False if ss.get("oom") else None})
    return res


def gib(b):
    return "%.2f GiB" % (b / 2**30) if b else "n/a"


def fmt_rate(r):
    return "{:,.0f}".format(r) if r else "n/a"


def fmt_mfu(m):
    return "%.1f%%" % (100 * m) if m is not None else "n/a"


def fmt_ratio(x):
    return "x%.2f" % x if x else "n/a"


def verdict(met):
    return {True: "met", False: "missed", None: "not measured"}[met]


def goal_value(g):
    v = g["value"]
    if v is None:
        return "n/a"
    if "MFU" in g["goal"]:
        return fmt_mfu(v)
    if "in the GPU" in g["goal"]:
        return "peak " + gib(v)
    return fmt_ratio(v)


def cell(text):
    return str(text).replace("|", "\\|")


def shape_label(s):
    return "%s (L%d d%d H%d, V%d)" % (s["name"], s["layers"], s["d_model"], s["heads"], s["vocab"])


def lines_of(res):
    """summary.txt's BENCH lines."""
    out = []
    for s in res["shapes"]:
        head = "%s %dx%d" % (s["name"], s["micro_batch"], s["seq_len"])
        for kind, label in KINDS:
            r = s["rows"][kind]
            if r.get("tok_per_s"):
                msg = "%s tokens/s, MFU %s, peak %s" % (fmt_rate(r["tok_per_s"]), fmt_mfu(r["mfu"]),
                                                       gib(r.get("peak_memory_bytes")))
                if kind != "ss-bf16":
                    key = "scalesweep/" + kind.split("-")[1]
                    msg += ", %s %s" % (key, fmt_ratio(s["ratios"][key]))
                if r.get("compile_s"):
                    msg += ", first step (compiling) %.0f s" % r["compile_s"]
                if r.get("note"):
                    msg += " (%s)" % r["note"]
            else:
                msg = r.get("note", "not run")
            out.append("BENCH %s %s: %s" % (head, label, msg))
    for x in res["extras"]:
        if x["ratio"]:
            a, b = ((fmt_rate(x["a"]), fmt_rate(x["b"])) if x["unit"] == "tokens/s" else
                    ("%.1f ms" % (1e3 * x["a"]), "%.1f ms" % (1e3 * x["b"])))
            msg = "%s (%s vs %s)" % (fmt_ratio(x["ratio"]), a, b)
        else:
            msg = x["note"] or "n/a"
        out.append("BENCH %s %s: %s" % (x["shape"], x["what"], msg))
    for g in res["goals"]:
        out.append("BENCH goal %s: %s, %s" % (g["goal"], goal_value(g), verdict(g["met"])))
    return out


def markdown(res):
    peak = res["peak_flops"]
    md = ["# GPU benchmark: %s, bf16" % (res["gpu"] or "unknown GPU"), "",
          "tokens/s: micro-batch x T over the median step time after %d warm-up steps "
          "(scalesweep: its step lines; PyTorch: CUDA events around each step). "
          "MFU: tokens/s x flops_per_token (scalesweep's config event, for every row of a "
          "shape) / %s. Peak memory: scalesweep's peak_device_bytes, PyTorch's "
          "max_memory_allocated. Ratios: scalesweep's tokens/s over the row's." % (
              res["warmup_steps"], "%.0f TFLOP/s (peak dense bf16)" % (peak / 1e12) if peak
              else "the peak of an unknown GPU (no MFU)"), "",
          "| shape | B x T | implementation | tokens/s | MFU | peak GPU memory | scalesweep / it |",
          "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for s in res["shapes"]:
        first = True
        for kind, label in KINDS:
            r = s["rows"][kind]
            lead = ("| %s | %d x %d | " % (shape_label(s), s["micro_batch"], s["seq_len"]) if first
                    else "| | | ")
            first = False
            if r.get("tok_per_s"):
                rt = "" if kind == "ss-bf16" else fmt_ratio(
                    s["ratios"]["scalesweep/" + kind.split("-")[1]])
                extra = []
                if r.get("compile_s"):
                    extra.append("first step, compiling: %.0f s" % r["compile_s"])
                if r.get("note"):
                    extra.append(r["note"])
                name = label + (" (%s)" % "; ".join(extra) if extra else "")
                mfu, mem = fmt_mfu(r["mfu"]), gib(r.get("peak_memory_bytes"))
                # the goals beside their figures
                if s["role"] == "goal" and kind == "ss-bf16":
                    mfu += " (goal >= %.0f%%: %s)" % (100 * GOAL_MFU, verdict(
                        None if r["mfu"] is None else r["mfu"] >= GOAL_MFU))
                if s["role"] == "goal" and kind == "torch-eager" and rt != "n/a":
                    rt += " (goal >= %.1f: %s)" % (GOAL_EAGER, verdict(
                        s["ratios"]["scalesweep/eager"] >= GOAL_EAGER))
                if s["role"] == "fit" and kind == "ss-bf16":
                    mem += " (goal: fits, met)"
                md.append(lead + "%s | %s | %s | %s | %s |" % (
                    cell(name), fmt_rate(r["tok_per_s"]), mfu, mem, rt))
            else:
                md.append(lead + "%s: %s | | | | |" % (label, cell(r.get("note", "not run"))))
    if res["extras"]:
        md += ["", "## scalesweep against itself", "",
               "| shape | comparison | figures | ratio |", "| --- | --- | ---: | ---: |"]
        for x in res["extras"]:
            if x["ratio"]:
                figs = ("%s vs %s tokens/s" % (fmt_rate(x["a"]), fmt_rate(x["b"]))
                        if x["unit"] == "tokens/s" else
                        "%.1f vs %.1f ms" % (1e3 * x["a"], 1e3 * x["b"]))
            else:
                figs = cell(x["note"] or "n/a")
            md.append("| %s | %s | %s | %s |" % (x["shape"], x["what"], figs, fmt_ratio(x["ratio"])))
    md += ["", "## Goals", "", "| goal | figure | verdict |", "| --- | ---: | --- |"]
    for g in res["goals"]:
        md.append("| %s | %s | %s |" % (g["goal"], goal_value(g), verdict(g["met"])))
    return "\n".join(md) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("table")
    t.add_argument("dir")
    t.add_argument("--gpu", default="")
    t.add_argument("--peak", type=float, default=None, help="peak dense bf16 FLOP/s")
    t.add_argument("--md")
    t.add_argument("--json")
    f = sub.add_parser("fpt")
    f.add_argument("trainer_out")
    f.add_argument("dims", type=int, nargs=4, metavar="L D T V")
    a = ap.parse_args(argv)
    if a.cmd == "fpt":
        cfg = next((e for e in read_json_lines(a.trainer_out) if e.get("event") == "config"), {})
        print("%.17g" % (cfg.get("flops_per_token") or flops_per_token(*a.dims)))
        return 0
    res = build(a.dir, a.gpu, a.peak)
    if a.md:
        with open(a.md, "w") as fh:
            fh.write(markdown(res))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(res, fh, indent=1)
            fh.write("\n")
    print("\n".join(lines_of(res)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

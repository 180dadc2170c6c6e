#!/usr/bin/python3
"""Summarise tests/bench/run.sh: read the raw logs listed in build/bench/runs.jsonl
and the sgemm figures, print the comparison table and the issue's bars, and
write the same as JSON."""
import argparse
import json
import os
import statistics
import subprocess
import sys

# the GPU benchmark's table reads the same JSON lines and counts the same FLOPs
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
import bench_table  # noqa: E402

VOCAB = 256
SHAPES = {  # name: (L, d, heads, T, B)
    "a": (2, 128, 4, 128, 16),
    "b": (4, 256, 4, 256, 8),
    "c": (6, 384, 6, 256, 8),
}
# The issue's bars: ours/torch tok/s per shape, fraction of sgemm on (c) fp32,
# ours bf16 step time / fp32 step time.
BAR_RATIO = {"a": 2.0, "b": 1.3, "c": 1.2}
BAR_SGEMM_C = 0.70
BAR_BF16_TIME = 1.3


def flops_per_token(L, d, T, V=VOCAB):
    """SCIENCE.md section 1: 6*(12*L*d^2 + d*V) + 6*L*T*d, as the integer it is."""
    return int(bench_table.flops_per_token(L, d, T, V))


read_jsonl = bench_table.read_json_lines


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None


def med(xs):
    return statistics.median(xs) if xs else None


def parse_ours(log, warmup):
    """Step rates after the first `warmup` step lines, the done line, the config line."""
    lines = read_jsonl(log)
    steps = [j for j in lines if j.get("event") == "step"]
    rates = [float(j["tok_per_s"]) for j in steps[warmup:] if j.get("tok_per_s")]
    done = next((j for j in lines if j.get("event") == "done"), None)
    config = next((j for j in lines if j.get("event") == "config"), None)
    error = next((j.get("message") for j in lines if j.get("event") == "error"), None)
    return {
        "rates": rates,
        "n_steps": len(steps),
        "peak_rss_bytes": done.get("peak_rss_bytes") if done else None,
        "wall_s": done.get("wall_s") if done else None,
        "flops_per_token_reported": config.get("flops_per_token") if config else None,
        "ok": done is not None and bool(rates),
        "error": error,
    }


def parse_torch(log):
    lines = [j for j in read_jsonl(log) if j.get("side") == "pytorch"]
    if not lines:
        return {"rates": [], "ok": False}
    j = lines[-1]
    return {
        "rates": j.get("tok_per_s_steps") or [j["tok_per_s_median"]],
        "peak_rss_bytes": j.get("peak_rss_bytes"),
        "baseline_rss_bytes": j.get("baseline_rss_bytes"),
        "blas": j.get("blas"),
        "ok": True,
    }


def ours_blas(bin_path):
    if not bin_path or not os.path.exists(bin_path):
        return None
    try:
        out = subprocess.run(["ldd", bin_path], capture_output=True, text=True).stdout
    except OSError:
        return None
    libs = []
    for line in out.splitlines():
        if any(k in line for k in ("blas", "lapack", "gomp")):
            parts = line.split("=>")
            if len(parts) == 2:
                path = parts[1].split("(")[0].strip()
                libs.append(os.path.realpath(path))
    return "; ".join(libs)


def pct(other, steal):
    if other is None:
        return "?"
    return f"{other:.0%}/{steal:.0%}"


def fmt(x, spec, width):
    if x is None:
        return "n/a".rjust(width)
    return format(x, spec).rjust(width)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--build-type", default="unknown")
    ap.add_argument("--bin", default="")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    raw = os.path.join(a.dir, "raw")
    sgemm = read_json(os.path.join(raw, "sgemm.json")) or {}
    sgemm_skx = read_json(os.path.join(raw, "sgemm_skylakex.json"))
    # The sgemm rate: the full measurement at the start plus the quick samples
    # taken between training runs. Contention only ever slows a run down, so
    # the best sample is the machine's rate (and, likewise, each side's figure
    # is its best run).
    sq_samples = [sgemm["square1024_gflops"]] if sgemm.get("square1024_gflops") else []
    mix_samples = {}
    for m in sgemm.get("mix", []):
        mix_samples.setdefault(m["d"], []).append(m["gflops"])
    for name in sorted(os.listdir(raw)):
        if name.startswith("sgemm_quick_") and name.endswith(".json"):
            j = read_json(os.path.join(raw, name)) or {}
            if j.get("square1024_gflops"):
                sq_samples.append(j["square1024_gflops"])
            for m in j.get("mix", []):
                mix_samples.setdefault(m["d"], []).append(m["gflops"])
    sq = max(sq_samples) if sq_samples else None
    mix = {d: max(v) for d, v in mix_samples.items()}
    sgemm["square1024_gflops_samples"] = sq_samples
    sgemm["square1024_gflops_used"] = sq
    sgemm["mix_gflops_samples"] = mix_samples
    sgemm["mix_gflops_used"] = mix

    runs = read_jsonl(os.path.join(a.dir, "runs.jsonl"))
    groups = {}
    for r in runs:
        key = (r["shape"], r["precision"], r["side"])
        parsed = parse_ours(r["log"], a.warmup) if r["side"] == "ours" else parse_torch(r["log"])
        tm = read_json(r["time"]) or {}
        parsed["time_max_rss_bytes"] = tm.get("max_rss_kb", 0) * 1024 or None
        parsed["repeat"] = r["repeat"]
        # share of the machine's CPU used by other processes during the run
        # (busy ticks minus the run's own user+sys time), and stolen by the host
        wall, hz, ncpu = tm.get("wall_s"), r.get("hz"), r.get("ncpu")
        if wall and hz and ncpu and "busy_ticks" in r:
            own = tm.get("user_s", 0) + tm.get("sys_s", 0)
            parsed["other_cpu_frac"] = max(0.0, (r["busy_ticks"] / hz - own) / (wall * ncpu))
            parsed["steal_frac"] = r["steal_ticks"] / hz / (wall * ncpu)
        groups.setdefault(key, []).append(parsed)

    rows = []
    torch_blas = None
    for s in ("a", "b", "c"):
        for p in ("fp32", "bf16"):
            if not any(k[:2] == (s, p) for k in groups):
                continue
            L, d, h, T, B = SHAPES[s]
            fpt = flops_per_token(L, d, T)
            row = {"shape": s, "precision": p, "n_layer": L, "d_model": d, "n_head": h,
                   "seq_len": T, "batch_size": B, "vocab_size": VOCAB,
                   "flops_per_token": fpt}
            for side in ("ours", "pytorch"):
                g = groups.get((s, p, side), [])
                pooled = [x for run in g for x in run["rates"]]
                per_run = [med(run["rates"]) for run in g if run["rates"]]
                rss = [run.get("peak_rss_bytes") for run in g if run.get("peak_rss_bytes")]
                trss = [run.get("time_max_rss_bytes") for run in g if run.get("time_max_rss_bytes")]
                tps = max(per_run) if per_run else None
                row[side] = {
                    "tok_per_s_median": tps,  # best run's median step rate
                    "tok_per_s_median_pooled": med(pooled),
                    "other_cpu_frac_per_run": [run.get("other_cpu_frac") for run in g],
                    "steal_frac_per_run": [run.get("steal_frac") for run in g],
                    "tok_per_s_per_run": per_run,
                    "steps_timed": len(pooled),
                    "runs": len(g),
                    "runs_ok": sum(1 for run in g if run.get("ok")),
                    "gflops": tps * fpt / 1e9 if tps else None,
                    "peak_rss_bytes": max(rss) if rss else None,
                    "time_max_rss_bytes": max(trss) if trss else None,
                }
                if side == "ours":
                    rep = [run.get("flops_per_token_reported") for run in g
                           if run.get("flops_per_token_reported") is not None]
                    row[side]["flops_per_token_reported"] = rep[0] if rep else None
                    errs = [run["error"] for run in g if run.get("error")]
                    if errs:
                        row[side]["errors"] = errs
                else:
                    base = [run.get("baseline_rss_bytes") for run in g if run.get("baseline_rss_bytes")]
                    row[side]["baseline_rss_bytes"] = max(base) if base else None
                    for run in g:
                        torch_blas = torch_blas or run.get("blas")
            o, t = row["ours"]["tok_per_s_median"], row["pytorch"]["tok_per_s_median"]
            row["ratio_ours_over_torch"] = o / t if o and t else None
            og = row["ours"]["gflops"]
            row["ours_frac_sgemm_square1024"] = og / sq if og and sq else None
            row["ours_frac_sgemm_mix"] = og / mix[d] if og and mix.get(d) else None
            tg = row["pytorch"]["gflops"]
            row["torch_frac_sgemm_square1024"] = tg / sq if tg and sq else None
            rows.append(row)

    # bf16 step time / fp32 step time, per shape and side
    by = {(r["shape"], r["precision"]): r for r in rows}
    for r in rows:
        f32 = by.get((r["shape"], "fp32"))
        for side in ("ours", "pytorch"):
            x32 = f32[side]["tok_per_s_median"] if f32 else None
            x = r[side]["tok_per_s_median"]
            r[side]["time_vs_fp32"] = x32 / x if x and x32 else None

    # ---- table
    mib = lambda b: b / 2**20 if b else None  # noqa: E731
    hdr = (f"{'shape':<22}{'prec':<6}{'ours tok/s':>11}{'torch tok/s':>12}{'ratio':>7}"
           f"{'ours GF/s':>10}{'torch GF/s':>11}{'ours/sgemm':>11}{'ours/mix':>9}"
           f"{'RSS ours':>9}{'RSS torch':>10}{'bf16/fp32 t':>12}{'torch bf16/fp32 t':>18}")
    print()
    print(f"CPU training benchmark: {a.threads} threads, vocab {VOCAB}, "
          f"tok/s = median over a run's timed steps (first {a.warmup} discarded), best of "
          f"{max((max(r['ours']['runs'], r['pytorch']['runs']) for r in rows), default=0)} runs per side")
    print(f"sgemm rate (OpenBLAS {sgemm.get('openblas_corename', '?')} kernels): "
          f"square 1024 = {fmt(sq, '.1f', 0)} GFLOP/s (best of {len(sq_samples)} samples, "
          f"{min(sq_samples, default=0):.0f}..{max(sq_samples, default=0):.0f}); "
          "training-step GEMM mix (B*T=2048, best sample) "
          + ", ".join(f"d={d}: {g:.1f}" for d, g in sorted(mix.items())) + " GFLOP/s")
    if sgemm_skx:
        print(f"  (information: forcing OPENBLAS_CORETYPE=SkylakeX gives square 1024 = "
              f"{sgemm_skx.get('square1024_gflops', 0):.1f} GFLOP/s, mix "
              + ", ".join(f"d={m['d']}: {m['gflops']:.1f}" for m in sgemm_skx.get("mix", []))
              + ")")
    print("RSS in MiB (peak_rss_bytes each side reports); 'ours/sgemm' = ours GFLOP/s / square-1024 "
          "sgemm rate; 'ours/mix' = / that shape's GEMM-mix rate; 'bf16/fp32 t' = bf16 step time / fp32 step time")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        L, d, h, T, B = SHAPES[r["shape"]]
        name = f"{r['shape']} L{L} d{d} h{h} T{T} B{B}"
        o, t = r["ours"], r["pytorch"]
        print(f"{name:<22}{r['precision']:<6}{fmt(o['tok_per_s_median'], '.0f', 11)}"
              f"{fmt(t['tok_per_s_median'], '.0f', 12)}{fmt(r['ratio_ours_over_torch'], '.2f', 7)}"
              f"{fmt(o['gflops'], '.1f', 10)}{fmt(t['gflops'], '.1f', 11)}"
              f"{fmt(r['ours_frac_sgemm_square1024'], '.0%', 11)}{fmt(r['ours_frac_sgemm_mix'], '.0%', 9)}"
              f"{fmt(mib(o['peak_rss_bytes']), '.0f', 9)}{fmt(mib(t['peak_rss_bytes']), '.0f', 10)}"
              f"{fmt(o['time_vs_fp32'] if r['precision'] == 'bf16' else None, '.2f', 12)}"
              f"{fmt(t['time_vs_fp32'] if r['precision'] == 'bf16' else None, '.2f', 18)}")
    print()
    print("per-run medians (tok/s), and the CPU share other processes used / the host stole during "
          "each run, to judge the noise:")
    for r in rows:
        print(f"  {r['shape']} {r['precision']:<5} ours "
              + " ".join(f"{x:.0f}" for x in r["ours"]["tok_per_s_per_run"]).ljust(24)
              + " torch " + " ".join(f"{x:.0f}" for x in r["pytorch"]["tok_per_s_per_run"]).ljust(24)
              + " other/steal ours " + " ".join(pct(x, y) for x, y in zip(
                  r["ours"]["other_cpu_frac_per_run"], r["ours"]["steal_frac_per_run"]))
              + " torch " + " ".join(pct(x, y) for x, y in zip(
                  r["pytorch"]["other_cpu_frac_per_run"], r["pytorch"]["steal_frac_per_run"])))
    base = [r["pytorch"].get("baseline_rss_bytes") for r in rows if r["pytorch"].get("baseline_rss_bytes")]
    if base:
        print(f"  (PyTorch RSS includes ~{max(base) / 2**20:.0f} MiB of interpreter + libtorch "
              f"before any model exists)")
    for r in rows:
        rep = r["ours"].get("flops_per_token_reported")
        if rep is not None and int(rep) != r["flops_per_token"]:
            print(f"  NOTE: trainer reports flops_per_token {rep} for {r['shape']}, "
                  f"SCIENCE.md's count gives {r['flops_per_token']}")
        for e in r["ours"].get("errors", []):
            print(f"  ERROR ours {r['shape']} {r['precision']}: {e}")

    # ---- bars (printed, never asserted)
    bars = []

    def bar(name, value, target, ok_if_ge=True):
        if value is None:
            status = "n/a"
        else:
            status = "PASS" if (value >= target if ok_if_ge else value <= target) else "FAIL"
        bars.append({"bar": name, "value": value, "target": target, "status": status})
        v = "n/a" if value is None else f"{value:.2f}"
        print(f"  [{status:>4}] {name}: {v} ({'>=' if ok_if_ge else '<='} {target})")

    print()
    print("bars from the issue (information, not a test):")
    for s, target in BAR_RATIO.items():
        for p in ("fp32", "bf16"):
            if (s, p) in by:
                bar(f"({s}) {p} ours/torch tok/s", by[(s, p)]["ratio_ours_over_torch"], target)
    if ("c", "fp32") in by:
        bar("(c) fp32 ours GFLOP/s / sgemm square-1024 rate",
            by[("c", "fp32")]["ours_frac_sgemm_square1024"], BAR_SGEMM_C)
        bar("(c) fp32 ours GFLOP/s / sgemm training-mix rate",
            by[("c", "fp32")]["ours_frac_sgemm_mix"], BAR_SGEMM_C)
    for s in ("a", "b", "c"):
        if (s, "bf16") in by:
            bar(f"({s}) ours bf16 step time / fp32 step time", by[(s, "bf16")]["ours"]["time_vs_fp32"],
                BAR_BF16_TIME, ok_if_ge=False)

    ob = ours_blas(a.bin)
    print()
    print("BLAS:")
    print(f"  ours:    {ob or 'n/a'}  [{sgemm.get('openblas_config', '?')}; "
          f"core {sgemm.get('openblas_corename', '?')}]  build type {a.build_type}")
    print(f"  pytorch: {torch_blas or 'n/a'}")

    result = {
        "threads": a.threads, "vocab_size": VOCAB, "warmup_steps_discarded": a.warmup,
        "build_type": a.build_type, "trainer": a.bin,
        "sgemm": sgemm, "sgemm_openblas_coretype_skylakex": sgemm_skx,
        "blas": {"ours": ob, "ours_openblas_config": sgemm.get("openblas_config"),
                 "ours_openblas_corename": sgemm.get("openblas_corename"),
                 "pytorch": torch_blas},
        "rows": rows, "bars": bars,
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"\nwrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

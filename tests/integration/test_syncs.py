"""One host synchronisation per training step, counted through the backend's
interface (kernels/kern.h): with SCALESWEEP_COUNT_SYNCS=1 the trainer counts
every call that waits for the backend (to_host, sync, and sumsq and
accumulate, which hand a sum back to the host) and each step line carries the
step's count as "host_syncs".

A step keeps its loss, the micro-batch and whole-gradient sums of squares
and the update's clip / loss-scale factor (or the fp16 skip) on the backend
(mean_into, sumsq_into, step_scale) and reads them once, for its log line. On
a GPU a read is a stream synchronisation that idles the device; the CPU
backend runs the same calls, so the count here is the GPU's.

Checked, on fp32, bf16 (8-bit AdamW) and fp16 (loss scaling, and a run whose
first loss scale overflows: the update skipped on the device), with and
without gradient accumulation (the noise-scale path) and with clipping that
bites:
- every step line of a one-rank run says host_syncs 1;
- counting changes nothing: the counted run's lines equal the uncounted
  run's, bit for bit (timings aside);
- a 2-rank run (the host collectives need the sums on the host) stays at a
  small fixed count per step, printed for the record.

Usage: test_syncs.py SCALESWEEP_BINARY
"""
import json
import os
import subprocess
import sys
import tempfile

BIN = sys.argv[1]
tmp = tempfile.mkdtemp(prefix="ss-syncs-")
failures = []
TIMINGS = ("tok_per_s", "wall_s", "peak_rss_bytes", "host_syncs", "world_size",
           "optimizer_state_bytes", "grad_buckets")


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def run(name, cfg, count):
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    env = dict(os.environ)
    env.pop("SCALESWEEP_COUNT_SYNCS", None)
    if count:
        env["SCALESWEEP_COUNT_SYNCS"] = "1"
    p = subprocess.run([BIN, "train", "--config", path], capture_output=True, text=True,
                       env=env, timeout=300)
    if p.returncode != 0:
        check(False, "%s: exit %d: %s" % (name, p.returncode, p.stderr[-500:]))
        return []
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def strip(lines):
    out = []
    for e in lines:
        e = dict(e)
        for t in TIMINGS:
            e.pop(t, None)
        out.append(e)
    return out


def config(prec, mb, optimizer="adamw", world=1, clip=None):
    c = {"model": {"n_layer": 2, "d_model": 32, "n_head": 2, "seq_len": 32},
         "data": {"synthetic": {"seed": 5}},
         "train": {"batch_size": 8, "micro_batch_size": mb, "tokens": 8 * 32 * 40,
                   "lr": 0.01},
         "eval": {"every_tokens": 8 * 32 * 10, "tokens": 256},
         "optimizer": {"name": optimizer}, "precision": prec, "threads": 1}
    if clip is not None:
        c["train"]["grad_clip"] = clip
    if world > 1:
        c["world_size"] = world
    return c


# fp16 whose loss scale (65536 at first) overflows the gradient: the update
# is skipped on the device, the scale halves. At lr 0.01 whether a step
# overflows depended on the CPU's summation order (an AMD EPYC had none); at
# lr 0.3 the weights grow fast enough that some step overflows anywhere
overflow = config("fp16", 1)
overflow["model"].update({"d_model": 64, "seq_len": 16})
overflow["train"].update({"batch_size": 2, "tokens": 2 * 16 * 40, "lr": 0.3})
overflow["eval"].update({"every_tokens": 320, "tokens": 16})

cases = [
    ("fp16-overflow", overflow),
    ("fp32-accum", config("fp32", 2)),
    ("fp32-whole", config("fp32", 8)),
    ("fp32-clip", config("fp32", 4, clip=0.05)),
    ("bf16-q8", config("bf16", 2, optimizer="adamw8bit")),
    ("fp16-accum", config("fp16", 2)),
    ("fp16-whole", config("fp16", 8, clip=0.05)),
]
for name, cfg in cases:
    counted = run(name + "-counted", cfg, True)
    plain = run(name, cfg, False)
    steps = [e for e in counted if e.get("event") == "step"]
    check(len(steps) == 40, "%s: %d step lines, expected 40" % (name, len(steps)))
    counts = sorted({e.get("host_syncs") for e in steps}, key=str)
    check(counts == [1], "%s: host syncs per step %s, expected 1 on every step" % (name, counts))
    check(all("host_syncs" not in e for e in plain),
          "%s: host_syncs printed without SCALESWEEP_COUNT_SYNCS" % name)
    check(strip(counted) == strip(plain),
          "%s: counting the syncs changed the run's lines" % name)
    clipped = sum(1 for e in steps if e.get("grad_norm") and
                  cfg["train"].get("grad_clip", 1.0) < e["grad_norm"])
    skipped = sum(1 for e in steps if e.get("skipped"))
    print("%-11s %d steps, host syncs per step %s, %d clipped, %d skipped (fp16 overflow)"
          % (name, len(steps), counts, clipped, skipped))
    if name == "fp16-overflow":
        check(skipped > 0, "%s: no step was skipped; the case does not test the skip" % name)
        for a, b in zip(steps, steps[1:]):
            if a.get("skipped"):
                check(a.get("grad_norm", 0) is None and b["loss_scale"] == a["loss_scale"],
                      "%s: skipped step %d: %s, then %s" % (name, a["step"], a, b))
    if name.endswith("clip"):
        check(clipped > 0, "%s: no step was clipped; the case does not test clipping" % name)

# two ranks: the sums cross the host to be reduced over the ranks
two = run("fp32-world2", config("fp32", 2, world=2), True)
steps2 = [e for e in two if e.get("event") == "step"]
check(len(steps2) == 40, "world 2: %d step lines" % len(steps2))
print("world_size 2: host syncs per step %s (the sums are reduced on the host)"
      % sorted({e.get("host_syncs") for e in steps2}, key=str))

if failures:
    print("%d failure(s)" % len(failures))
    sys.exit(1)
print("ok: one host sync per step")

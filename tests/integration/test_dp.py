"""Data parallelism on the CPU (trainer/dist.h, trainer/dp.c, cli/launch.c),
with real processes: `scalesweep train` of a config with world_size N runs
N ranks on this host.

- world_size 2 and 4 with global batch B reach world_size 1's loss curve bit
  for bit (every step and eval line, grad_norm and b_noise too) when each
  rank holds one micro-batch of a step; with two per rank the ranks' sums are
  folded in another order: the validation losses stay within 1e-6
  (relative) of world_size 1's over this run;
- ZeRO-1 (optimizer.zero 1, AdamW and 8-bit AdamW) trains to the same losses
  as the unsharded optimizer, each rank holding about 1/N of the state;
- kill -9 of one rank ends the run at once (no rank waits), and --resume
  continues it exactly as if never stopped; so does SIGTERM, which stops
  every rank at the same step after a checkpoint (exit 143); a launcher
  killed with SIGKILL leaves no rank behind;
- a ZeRO-1 checkpoint of 2 ranks resumes on 1;
- bad settings are refused with exit 2 and the JSON path;
- the llama family (QK-norm, untied head) under muP: world_size 2 and 4 as
  world_size 1 bit for bit (one micro-batch a rank) or within 1e-6 (two),
  buckets during backward as one reduction after it, ZeRO-1 (AdamW and 8-bit
  AdamW, muP's per-tensor rates across the shards' bounds) as unsharded,
  SIGTERM and --resume on 2 ranks as uninterrupted and the ZeRO-1 checkpoint
  resumed on 1 rank; every step line of a run that accumulates micro-batches
  carries a finite, positive gradient noise scale b_noise, one without none.

Usage: test_dp.py SCALESWEEP_BINARY
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BIN = sys.argv[1]
tmp = tempfile.mkdtemp(prefix="ss-dp-")
failures = []

BASE = {"model": {"n_layer": 2, "d_model": 32, "n_head": 2, "seq_len": 32},
        "data": {"synthetic": {"seed": 3}},
        "train": {"batch_size": 8, "micro_batch_size": 2, "tokens": 40960, "lr": 0.003},
        "eval": {"every_tokens": 8192, "tokens": 512}, "threads": 1}
TIMINGS = ("tok_per_s", "wall_s", "peak_rss_bytes", "world_size", "optimizer_state_bytes",
           "grad_buckets")


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def config(name, world=1, mb=2, **over):
    c = json.loads(json.dumps(BASE))
    c["world_size"] = world
    c["train"]["micro_batch_size"] = mb
    for k, v in over.items():
        sec, key = k.split("__")
        c.setdefault(sec, {})[key] = v
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(c, f)
    return path


def train(cfg, *args, expect=0, env=None):
    p = subprocess.run([BIN, "train", "--config", cfg, *args], capture_output=True, text=True,
                       timeout=300, env=env)
    if expect is not None and p.returncode != expect:
        check(False, "%s %s: exit %d, expected %d: %s" % (cfg, args, p.returncode, expect,
                                                        p.stderr[-800:]))
    return p


def lines(out, keep=("step", "eval", "done")):
    """step/eval/done events by (event, step), timings dropped."""
    res = {}
    for line in out.splitlines():
        d = json.loads(line)
        if d["event"] in keep:
            extra = {k: d.pop(k) for k in TIMINGS if k in d}
            res[(d["event"], d.get("step", d.get("steps")))] = d
            d["_extra"] = extra
    return res


def same(a, b, what, keys=None):
    if a.keys() != b.keys():
        check(False, "%s: different lines: %s" % (what, sorted(set(a) ^ set(b))[:5]))
        return
    for k in a:
        x = {q: v for q, v in a[k].items() if q != "_extra" and (keys is None or q in keys)}
        y = {q: v for q, v in b[k].items() if q != "_extra" and (keys is None or q in keys)}
        if x != y:
            check(False, "%s: %s differs: %s vs %s" % (what, k, x, y))
            return
    print("ok: %s: %d lines identical" % (what, len(a)))


def check_worlds(tag, make, ref2):
    """world 1, 2, 4 of make's configs: one micro-batch per rank, bit for bit
    against ref2 (world_size 1, micro-batch 2) and world_size 1 with
    micro-batch 4; two micro-batches per rank, another order of the sum,
    within 1e-6. tag names the model in the messages ("" or "llama: ")."""
    ref4 = lines(train(make("w1mb4", mb=4)).stdout)
    same(ref2, lines(train(make("w4mb2", world=4)).stdout),
         "%sworld_size 4 (1 micro-batch of 2 each) vs world_size 1 (micro-batch 2)" % tag)
    same(ref4, lines(train(make("w2mb4", world=2, mb=4)).stdout),
         "%sworld_size 2 (1 micro-batch of 4 each) vs world_size 1 (micro-batch 4)" % tag)
    w2 = lines(train(make("w2mb2", world=2)).stdout)
    worst = max(abs(w2[k]["val_loss"] - ref2[k]["val_loss"]) / ref2[k]["val_loss"]
                for k in ref2 if k[0] == "eval")
    check(worst <= 1e-6, "%sworld_size 2 with 2 micro-batches a rank: val loss off by %.3g"
          % (tag, worst))
    print("ok: %sworld_size 2 with 2 micro-batches a rank: val loss within %.2g (relative) of "
          "world_size 1" % (tag, worst))


def check_buckets(tag, make):
    """gradient buckets overlapped with backward change no bit: each step
    reduces a bucket per block and one for the embeddings while backward
    runs; SCALESWEEP_DP_OVERLAP=0 reduces once after it"""
    off = dict(os.environ, SCALESWEEP_DP_OVERLAP="0")
    for name, cfg in (("world_size 2, 2 micro-batches a rank", make("w2mb2b", world=2)),
                      ("world_size 4, ZeRO-1", make("w4z", world=4, optimizer__zero=1))):
        on = lines(train(cfg).stdout)
        plain = lines(train(cfg, env=off).stdout)
        same(on, plain, "%s%s: buckets during backward vs one reduction after it" % (tag, name))
        steps = on[("done", 160)]["steps"]
        got = (on[("done", 160)]["_extra"]["grad_buckets"],
               plain[("done", 160)]["_extra"]["grad_buckets"])
        check(got == (steps * (BASE["model"]["n_layer"] + 1), 0),
              "%s%s: grad_buckets %s over %d steps; expected %d and 0"
              % (tag, name, got, steps, steps * (BASE["model"]["n_layer"] + 1)))
        print("ok: %s%s: %d buckets (%d a step) reduced during backward"
              % (tag, name, got[0], got[0] // steps))


def check_zero(tag, make):
    """ZeRO-1 against the unsharded optimizer: the same losses, and rank 0
    holds about 1/world of the optimizer's state"""
    for world in (2, 4):
        for opt in ("adamw", "adamw8bit"):
            mb = 8 // world
            a = lines(train(make("p%d%s" % (world, opt), world=world, mb=mb,
                                 optimizer__name=opt)).stdout)
            b = lines(train(make("z%d%s" % (world, opt), world=world, mb=mb,
                                 optimizer__name=opt, optimizer__zero=1)).stdout)
            same(a, b, "%sZeRO-1 %s on %d ranks vs unsharded (losses)" % (tag, opt, world),
                 keys=("train_loss", "val_loss", "final_val_loss", "lr"))
            full = a[("done", 160)]["_extra"]["optimizer_state_bytes"]
            mine = b[("done", 160)]["_extra"]["optimizer_state_bytes"]
            check(mine <= full / world * 1.1 + 4096,
                  "%sZeRO-1 %s x%d: rank 0 holds %d optimizer bytes of %d"
                  % (tag, opt, world, mine, full))
            print("ok: %sZeRO-1 %s on %d ranks: rank 0 holds %d of %d optimizer state bytes"
                  % (tag, opt, world, mine, full))



def zero1_on_one(tag, make, long_over, full, first, ck):
    """A ZeRO-1 checkpoint of 2 ranks (in ck, from step first) resumed on 1
    rank: the same losses as full, the uninterrupted run's (whose grad_norm
    is summed from 2 shards: its last bits differ)"""
    one = make("long1", world=1, mb=4, **{k: v for k, v in long_over.items()
                                          if k != "optimizer__zero"})
    res = lines(train(one, "--checkpoint-dir", ck, "--resume", ck).stdout)
    same({k: v for k, v in full.items() if k[1] >= first}, res,
         "%sa 2-rank ZeRO-1 checkpoint resumed on 1 rank vs uninterrupted (losses)" % tag,
         keys=("train_loss", "val_loss", "final_val_loss", "lr"))


def sigterm_at_checkpoint(tag, cfg, ck):
    """Trains cfg into the checkpoint directory ck and sends SIGTERM once
    it reports its first checkpoint; checks it exits 143 (tag names the
    model in the message): the rest of its stdout, its stderr."""
    p = subprocess.Popen([BIN, "train", "--config", cfg, "--checkpoint-dir", ck],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in p.stdout:
        if '"event":"checkpoint"' in line:
            break
    p.send_signal(signal.SIGTERM)
    rest, err = p.communicate(timeout=60)
    check(p.returncode == 143, "%sSIGTERM: exit %d, expected 143: %s"
          % (tag, p.returncode, err[-400:]))
    return rest, err

def ranks_alive(cfg):
    p = subprocess.run(["pgrep", "-f", cfg + " .*--rank"], capture_output=True, text=True)
    return [int(x) for x in p.stdout.split()]


try:
    # ---- 1. world 1, 2, 4: one micro-batch per rank, bit for bit ---------------
    ref2 = lines(train(config("w1mb2")).stdout)
    check_worlds("", config, ref2)

    # ---- 1b. gradient buckets overlapped with backward change no bit -----------------
    check_buckets("", config)

    # ---- 2. ZeRO-1 against the unsharded optimizer ---------------------------------
    check_zero("", config)

    # ---- 3. kill -9 of one rank; resume ----------------------------------------------
    long_over = dict(train__tokens=409600, checkpoint__every_tokens=40960,
                     optimizer__name="adamw8bit", optimizer__zero=1)
    long2 = config("long2", world=2, mb=4, **long_over)
    full = lines(train(long2, "--checkpoint-dir", os.path.join(tmp, "ck-full")).stdout)
    ck = os.path.join(tmp, "ck-kill")
    p = subprocess.Popen([BIN, "train", "--config", long2, "--checkpoint-dir", ck],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # past the second checkpoint
    seen = 0
    out = []
    for line in p.stdout:
        out.append(line)
        seen += '"event":"checkpoint"' in line
        if seen == 2:
            break
    victims = [pid for pid in ranks_alive(long2) if "--rank 1" in open(
        "/proc/%d/cmdline" % pid).read().replace("\0", " ")]
    check(len(victims) == 1, "rank 1's process not found: %s" % victims)
    t0 = time.monotonic()
    os.kill(victims[0], signal.SIGKILL)
    rest, err = p.communicate(timeout=60)
    took = time.monotonic() - t0
    check(p.returncode != 0, "the run went on after rank 1 died")
    check(took < 10, "the run took %.1f s to end after rank 1 died" % took)
    check("rank 1 was killed by signal 9" in err and "rank 1 closed its connection" in err,
          "the launcher does not say what happened: %s" % err[-600:])
    check(not ranks_alive(long2), "ranks left after the run ended")
    print("ok: kill -9 of rank 1: the run ended in %.2f s (exit %d)" % (took, p.returncode))
    res = lines(train(long2, "--checkpoint-dir", ck, "--resume", ck).stdout)
    first = min(k[1] for k in res if k[0] == "step")
    same({k: v for k, v in full.items() if k[1] >= first}, res,
         "resumed after kill -9 (from step %d) vs uninterrupted" % (first - 1))

    # ---- 4. SIGTERM: every rank stops at the same step, after a checkpoint ----------
    ck = os.path.join(tmp, "ck-term")
    rest, err = sigterm_at_checkpoint("", long2, ck)
    last = [json.loads(x) for x in rest.splitlines() if '"checkpoint"' in x]
    check(last and "stopped by signal 15" in err, "SIGTERM: no final checkpoint: %s" % err[-400:])
    ck_one = os.path.join(tmp, "ck-one")
    shutil.copytree(ck, ck_one)  # for section 6
    res = lines(train(long2, "--checkpoint-dir", ck, "--resume", ck).stdout)
    first = min(k[1] for k in res if k[0] == "step")
    same({k: v for k, v in full.items() if k[1] >= first}, res,
         "resumed after SIGTERM (from step %d) vs uninterrupted" % (first - 1))

    # ---- 5. the launcher killed: no rank outlives it ------------------------------------
    p = subprocess.Popen([BIN, "train", "--config", long2, "--checkpoint-dir",
                          os.path.join(tmp, "ck-orphan")], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    p.stdout.readline()
    p.kill()
    p.wait()
    deadline = time.monotonic() + 5
    while ranks_alive(long2) and time.monotonic() < deadline:
        time.sleep(0.05)
    check(not ranks_alive(long2), "ranks outlived their launcher")
    print("ok: the launcher killed with SIGKILL: its ranks died with it")

    # ---- 6. a ZeRO-1 checkpoint of 2 ranks resumes on 1 ----------------------------------
    zero1_on_one("", config, long_over, full, first, ck_one)

    # ---- 7. refused settings -------------------------------------------------------------
    for over, path in ((dict(world=3), "$.world_size"),
                       (dict(world=1, optimizer__zero=1), "$.optimizer.zero")):
        p = train(config("bad", **over), expect=2)
        check(path in p.stderr, "%s: the error does not name %s: %s" % (over, path, p.stderr))
    p = train(config("w2", world=2), "--rank", "5", "--dist", "127.0.0.1:1", expect=2)
    print("ok: world_size 3 with batch 8, zero with 1 rank and --rank 5 of 2 refused (exit 2)")

    # ---- 8. the llama family (QK-norm, untied head) under muP ----------------------------
    # (not in the sanitized build, where the whole test took 449 s of a CI run near its hour: the
    # collectives, buckets and ZeRO paths it takes are gpt2's, sanitized above, and the
    # llama model's own code is sanitized by test_model, test_kernels and cli_train)
    if os.environ.get("SCALESWEEP_TEST_SANITIZED") == "1":
        print("skipped: section 8 (llama) in the sanitized build")
    else:
        # what sections 1, 1b, 2, 4 and 6 assert for gpt2, and the noise scale
        LL = dict(model__family="llama", model__qk_norm=True, model__tie_embeddings=False,
                  model__parametrization="mup", model__base_width=16)

        def lconfig(name, **over):
            return config("llama-" + name, **dict(LL, **over))

        p = train(lconfig("w1mb2"))
        ev = [json.loads(x) for x in p.stdout.splitlines()]
        m = ev[0]["config"]["model"]
        check((m.get("family"), m.get("qk_norm"), m.get("tie_embeddings"), m.get("parametrization"))
              == ("llama", True, False, "mup"), "the llama config did not go in: %s" % m)
        lref2 = lines(p.stdout)
        check(lref2[("done", 160)]["final_val_loss"] != ref2[("done", 160)]["final_val_loss"],
              "the llama run ends at gpt2's loss")
        # the gradient noise scale: micro-batches accumulated (4 a step) give it on
        # every step line, finite and positive; no accumulation gives none
        st = [e for e in ev if e["event"] == "step"]
        bn = [e.get("b_noise") for e in st]
        check(len(st) == 160 and all(isinstance(b, float) and 0 < b < float("inf") for b in bn),
              "llama: b_noise missing or not finite and positive on step lines: %s"
              % [b for b in bn if not (isinstance(b, float) and 0 < b < float("inf"))][:5])
        whole = [json.loads(x) for x in train(lconfig("w1mb8", mb=8)).stdout.splitlines()]
        check(not [e for e in whole if e["event"] == "step" and "b_noise" in e],
              "llama: b_noise on a step line without accumulation")
        print("ok: llama: b_noise on every one of %d step lines (from %.3g to %.3g sequences), "
              "none without accumulation" % (len(bn), min(bn), max(bn)))

        check_worlds("llama: ", lconfig, lref2)
        check_buckets("llama: ", lconfig)
        check_zero("llama: ", lconfig)

        # SIGTERM on 2 ranks (ZeRO-1, 8-bit AdamW), --resume on 2 and on 1
        llong2 = lconfig("long2", world=2, mb=4, **long_over)
        lfull = lines(train(llong2, "--checkpoint-dir", os.path.join(tmp, "lck-full")).stdout)
        ck = os.path.join(tmp, "lck-term")
        rest, err = sigterm_at_checkpoint("llama: ", llong2, ck)
        ck_one = os.path.join(tmp, "lck-one")
        shutil.copytree(ck, ck_one)
        res = lines(train(llong2, "--checkpoint-dir", ck, "--resume", ck).stdout)
        first = min(k[1] for k in res if k[0] == "step")
        check(first > 1, "llama: the resumed run started at step %d" % first)
        same({k: v for k, v in lfull.items() if k[1] >= first}, res,
             "llama: resumed after SIGTERM (from step %d) vs uninterrupted" % (first - 1))
        zero1_on_one("llama: ", lconfig, long_over, lfull, first, ck_one)
finally:
    shutil.rmtree(tmp, ignore_errors=True)

if failures:
    print("%d check(s) failed" % len(failures))
    sys.exit(1)
print("dp: all checks passed")

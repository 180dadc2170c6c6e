#!/usr/bin/python3
"""Data parallelism of the torch trainer: two processes started with
torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT), gloo on CPU, threads 1 each.

- world_size 2 with two micro-batches per rank gives world_size 1's curve
  within 1e-5 relative (train_loss at every step, final_val_loss). Why not
  exactly: as in the built-in (trainer/dp.c), each rank folds its own
  micro-batch gradients, then the ranks' sums are added, so the four
  micro-batch gradients of a step are summed as (g0 + g1) + (g2 + g3)
  instead of ((g0 + g1) + g2) + g3; fp32 rounding of that reassociation is
  ~1e-7 relative per step and AdamW carries it on (measured: ~1e-8).
- with one micro-batch per rank the sums are the same additions (gloo adds
  two ranks' values, a + b == b + a), so world_size 2 is world_size 1 bit for
  bit;
- optimizer.zero 1 (ZeroRedundancyOptimizer over the same AdamW) is
  world_size 2 without it, bit for bit (AdamW is elementwise);
- SIGTERM to one rank stops both after the same step (143), rank 0 writes
  the checkpoint (gathering ZeRO's shards); both started again resume and
  end as the uninterrupted run, bit for bit. Only rank 0 prints JSON lines.
Usage: test_ddp.py SCALESWEEP_BINARY
"""
import os
import signal
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sstest as t  # noqa: E402

TOL = 1e-5
STEPS = 40


def config(binary, tmp, world, mb, zero=0):
    p = t.small(STEPS, train={"micro_batch_size": mb}, world_size=world)
    if zero:
        p["optimizer"] = {"zero": 1}
        p["checkpoint"] = {"dir": "", "every_tokens": 10 * 256}
    return dict(t.resolve(binary, p, tmp), trainer="torch")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_ranks(cfg, tmp, name, extra=None):
    path = t.write_json(os.path.join(tmp, name + ".json"), cfg)
    port = str(free_port())
    procs = []
    for r in range(2):
        env = t.torch_env(extra)
        env.update({"SCALESWEEP_CONFIG": path, "RANK": str(r), "WORLD_SIZE": "2",
                    "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": port})
        procs.append(subprocess.Popen([t.PY, t.TRAIN_PY], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, env=env))
    return procs


def finish(procs, what, lines0=None):
    outs = [p.communicate(timeout=600) for p in procs]
    rcs = [p.returncode for p in procs]
    evs = (lines0 or []) + t.events(outs[0][0].decode())
    t.check(outs[1][0] == b"", "%s: rank 1 printed on stdout: %r" % (what, outs[1][0][:200]))
    return rcs, evs, [o[1].decode() for o in outs]


def run_ranks(cfg, tmp, name, extra=None):
    rcs, evs, errs = finish(start_ranks(cfg, tmp, name, extra), name)
    if rcs != [0, 0]:
        print(errs[0][-2000:], errs[1][-2000:])
    t.check(rcs == [0, 0], "%s: exit codes %s" % (name, rcs))
    return evs


def main():
    t.need_torch()
    binary = t.binary()
    with t.Tmp("ss_torch_ddp_") as tmp:
        rc, w1, err = t.run_torch(config(binary, tmp, 1, 2), tmp, "w1")
        t.ok(rc, w1, err, "world_size 1")
        w2 = run_ranks(config(binary, tmp, 2, 2), tmp, "w2")
        a, b = t.losses(w1), t.losses(w2)
        t.check(len(a) == len(b) == STEPS, "steps %d and %d" % (len(a), len(b)))
        worst = max(t.rel(x, y) for x, y in zip(a, b))
        fv = t.rel(t.finals(w1), t.finals(w2))
        t.check(worst <= TOL and fv <= TOL, "world_size 2 vs 1: train_loss rel %.3g, "
                "final_val_loss rel %.3g (tolerance %g)" % (worst, fv, TOL))
        t.check(t.one(w2, "done").get("world_size") == 2, "done line without world_size 2")
        print("world_size 2 vs 1 (2 micro-batches per rank): max rel diff train_loss %.3g, "
              "final_val_loss %.3g" % (worst, fv))

        rc, w1b, err = t.run_torch(config(binary, tmp, 1, 4), tmp, "w1b")
        t.ok(rc, w1b, err, "world_size 1, micro-batch 4")
        w2b = run_ranks(config(binary, tmp, 2, 4), tmp, "w2b")
        t.check(t.losses(w1b) == t.losses(w2b) and t.finals(w1b) == t.finals(w2b),
                "world_size 2 with one micro-batch per rank is not world_size 1 bit for bit")
        print("world_size 2 vs 1 (1 micro-batch per rank): identical")

        zc = config(binary, tmp, 2, 2, zero=1)
        z = run_ranks(zc, tmp, "zero", {"SCALESWEEP_CHECKPOINT_DIR": os.path.join(tmp, "ckz")})
        t.check(t.losses(z) == b and t.finals(z) == t.finals(w2),
                "ZeRO-1 changes the world_size 2 run")
        t.check(len(t.by(z, "checkpoint")) == STEPS // 10, "ZeRO run: checkpoint lines")
        print("optimizer.zero 1: identical to world_size 2 without it")

        ck = os.path.join(tmp, "ckz_stop")
        procs = start_ranks(zc, tmp, "zero_stop", {"SCALESWEEP_CHECKPOINT_DIR": ck})
        lines = []
        t.wait_for_step(procs[0], 15, lines)
        procs[1].send_signal(signal.SIGTERM)
        rcs, evs, errs = finish(procs, "zero_stop", lines)
        t.check(rcs == [143, 143], "SIGTERM to rank 1: exit codes %s" % rcs)
        last = t.by(evs, "step")[-1]["step"]
        cks = t.by(evs, "checkpoint")
        t.check(cks and cks[-1]["step"] == last, "no checkpoint at the stop")
        again = run_ranks(zc, tmp, "zero_again", {"SCALESWEEP_CHECKPOINT_DIR": ck})
        got = t.by(again, "step")
        t.check(got[0]["step"] == last + 1, "resumed at step %d, expected %d"
                % (got[0]["step"], last + 1))
        ref = {e["step"]: e["train_loss"] for e in t.by(z, "step")}
        t.check(all(e["train_loss"] == ref[e["step"]] for e in got) and
                t.finals(again) == t.finals(z), "the resumed ZeRO run differs")
        print("SIGTERM to rank 1 after step >= 15: both stopped at step %d (143), resumed "
              "identically" % last)
    print("ok")


if __name__ == "__main__":
    main()

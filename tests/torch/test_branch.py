#!/usr/bin/python3
"""WSD branches of the torch trainer (docs/sweeps.md "WSD branches"): a
trunk (schedule wsd, 100 steps) keeps a checkpoint after step 40
(SCALESWEEP_KEEP_STEPS) in CKDIR/branch-40/, reported with "branch": true;
a 50-step run of the same config (its stable phase ends at step 40) started
from that checkpoint (SCALESWEEP_BRANCH_FROM) is, bit for bit, the same run
trained from scratch: the same losses, gradient norms, noise scale, evals
and final_val_loss from step 41 on. Also: a branch point after a run's
stable phase is refused (exit 2), and a branch whose own checkpoint
directory holds a checkpoint resumes from that instead.

A batch-ladder rung (schedule constant: a run of another batch size and
learning rate starting from a constant-rate trunk's checkpoint, counting its
steps in its own batches) follows the built-in's --branch-from: the torch
trunk and rung against the built-in's, train_loss and final_val_loss within
the agreement test's 1e-4 relative.
Usage: test_branch.py SCALESWEEP_BINARY
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sstest as t  # noqa: E402


def config(binary, tmp, steps):
    p = t.small(steps, train={"schedule": "wsd", "decay_frac": 0.2, "warmup_tokens": 1280})
    return dict(t.resolve(binary, p, tmp), trainer="torch")


def main():
    t.need_torch()
    binary = t.binary()
    with t.Tmp("ss_torch_branch_") as tmp:
        trunk = config(binary, tmp, 100)
        ck = os.path.join(tmp, "trunk")
        rc, tr, err = t.run_torch(trunk, tmp, "trunk", env={"SCALESWEEP_CHECKPOINT_DIR": ck,
                                                            "SCALESWEEP_KEEP_STEPS": "40,90"})
        t.ok(rc, tr, err, "trunk")
        kept = [e for e in t.by(tr, "checkpoint") if e.get("branch")]
        t.check([e["step"] for e in kept] == [40, 90], "trunk: branch checkpoints %s" % kept)
        point = os.path.join(ck, "branch-40", "checkpoint.pt")
        t.check(kept[0]["path"] == point and os.path.exists(point), "branch-40 checkpoint path")

        short = config(binary, tmp, 50)
        rc, scratch, err = t.run_torch(short, tmp, "scratch")
        t.ok(rc, scratch, err, "branch config from scratch")
        ts = {e["step"]: e["train_loss"] for e in t.by(tr, "step")}
        for e in t.by(scratch, "step")[:40]:
            t.check(e["train_loss"] == ts[e["step"]], "scratch and trunk differ at step %d "
                    "(stable phase)" % e["step"])
        bck = os.path.join(tmp, "branch_ck")
        short_ck = dict(short, checkpoint={"dir": "", "every_tokens": 2560})
        rc, br, err = t.run_torch(short_ck, tmp, "branch",
                                  env={"SCALESWEEP_BRANCH_FROM": point,
                                       "SCALESWEEP_CHECKPOINT_DIR": bck})
        t.ok(rc, br, err, "branch")
        bs = t.by(br, "step")
        t.check(bs[0]["step"] == 41 and bs[-1]["step"] == 50, "branch steps %d..%d"
                % (bs[0]["step"], bs[-1]["step"]))
        ss = {e["step"]: e for e in t.by(scratch, "step")}
        for e in bs:
            for k in ("train_loss", "grad_norm", "b_noise", "lr"):
                t.check(e.get(k) == ss[e["step"]].get(k), "branch step %d %s %r, scratch %r"
                        % (e["step"], k, e.get(k), ss[e["step"]].get(k)))
        se = {e["step"]: e["val_loss"] for e in t.by(scratch, "eval")}
        for e in t.by(br, "eval"):
            t.check(e["val_loss"] == se[e["step"]], "branch eval at step %d" % e["step"])
        t.check(t.finals(br) == t.finals(scratch), "branch final_val_loss %r, scratch %r"
                % (t.finals(br), t.finals(scratch)))
        print("wsd branch from step 40 of a 100-step trunk: steps 41..50 and final_val_loss "
              "%r identical to the 50-step run from scratch" % t.finals(br))

        # the branch's own checkpoint (its last step) wins over the branch point
        rc, again, err = t.run_torch(short_ck, tmp, "branch_again",
                                     env={"SCALESWEEP_BRANCH_FROM": point,
                                          "SCALESWEEP_CHECKPOINT_DIR": bck,
                                          "SCALESWEEP_KEEP_STEPS": ""})
        t.ok(rc, again, err, "branch rerun")
        t.check(not t.by(again, "step") and t.finals(again) == t.finals(br),
                "a rerun of the finished branch trained again instead of resuming")

        # a branch point past the branch's stable phase (40 steps): refused
        late = os.path.join(ck, "branch-90", "checkpoint.pt")
        rc, evs, err = t.run_torch(short, tmp, "late", env={"SCALESWEEP_BRANCH_FROM": late})
        msg = t.by(evs, "error")[0]["message"] if t.by(evs, "error") else ""
        t.check(rc == 2 and "stable phase" in msg and late in msg,
                "a branch point at step 90: exit %d, %r" % (rc, msg))
        ladder(binary, tmp)
    print("ok")


def ladder(binary, tmp):
    base = t.small(40, train={"schedule": "constant", "warmup_tokens": 1280})
    trunk = t.resolve(binary, base, tmp)
    base["train"].update({"batch_size": 16, "lr": 2e-3, "tokens": 20 * 512})
    rung = t.resolve(binary, base, tmp)
    cb, ct = os.path.join(tmp, "ladder_builtin"), os.path.join(tmp, "ladder_torch")
    rc, evs, err = t.run_builtin(binary, trunk, tmp, "lt_b", ["--checkpoint-dir", cb,
                                                             "--keep-steps", "20"])
    t.ok(rc, evs, err, "built-in constant trunk")
    rc, a, err = t.run_builtin(binary, rung, tmp, "lr_b",
                               ["--branch-from", os.path.join(cb, "branch-20", "checkpoint.bin")])
    t.ok(rc, a, err, "built-in rung")
    rc, evs, err = t.run_torch(trunk, tmp, "lt_t", ["--checkpoint-dir", ct, "--keep-steps", "20"])
    t.ok(rc, evs, err, "torch constant trunk")
    rc, b, err = t.run_torch(rung, tmp, "lr_t",
                             ["--branch-from", os.path.join(ct, "branch-20", "checkpoint.pt")])
    t.ok(rc, b, err, "torch rung")
    sa, sb = t.by(a, "step"), t.by(b, "step")
    t.check([e["step"] for e in sa] == [e["step"] for e in sb] == list(range(11, 21)),
            "rung steps: %s and %s" % ([e["step"] for e in sa], [e["step"] for e in sb]))
    worst = max(t.rel(x["train_loss"], y["train_loss"]) for x, y in zip(sa, sb))
    fv = t.rel(t.finals(a), t.finals(b))
    t.check(worst <= 1e-4 and fv <= 1e-4, "rung: train_loss rel %.3g, final rel %.3g" % (worst, fv))
    print("batch-ladder rung (batch 16 from a batch-8 trunk's step 20) against the built-in's: "
          "max rel train_loss %.3g, final_val_loss %.3g" % (worst, fv))


if __name__ == "__main__":
    main()

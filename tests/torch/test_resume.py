#!/usr/bin/python3
"""The torch trainer stops and resumes bit for bit (CPU, fp32, threads 1):
- SIGTERM mid-run: it finishes the step, writes a checkpoint, prints its
  checkpoint line and an error line, exits 143 (128 + SIGTERM); started again on the same
  checkpoint directory it resumes there, and every later step's loss, every
  eval and final_val_loss are those of an uninterrupted run, exactly;
- kill -9 mid-run: started again it resumes from the newest checkpoint
  (checkpoint.every_tokens) and ends identical too;
- SCALESWEEP_RESUME_MAX_STEP picks the older kept checkpoint
  (checkpoint.prev.pt) when the newest is past it;
- SIGINT stops it the same way, with exit 130 (128 + the signal, as the
  built-in and docs/trainers.md).
Usage: test_resume.py SCALESWEEP_BINARY
"""
import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sstest as t  # noqa: E402

STEPS = 60
EVERY = 10  # steps between checkpoints


def config(binary, tmp):
    p = t.small(STEPS, checkpoint={"dir": "", "every_tokens": EVERY * 256})
    return dict(t.resolve(binary, p, tmp), trainer="torch")


def same_tail(ref, got, from_step, what):
    """got's steps after from_step (and evals, final) equal ref's, exactly."""
    rs = {e["step"]: e for e in t.by(ref, "step")}
    gs = t.by(got, "step")
    t.check(gs and gs[0]["step"] == from_step + 1,
            "%s: resumed at step %s, expected %d" % (what, gs[0]["step"] if gs else None,
                                                     from_step + 1))
    for e in gs:
        r = rs[e["step"]]
        for k in ("train_loss", "grad_norm", "b_noise", "lr", "tokens"):
            t.check(e.get(k) == r.get(k), "%s: step %d %s %r, uninterrupted %r"
                    % (what, e["step"], k, e.get(k), r.get(k)))
    re = {e["step"]: e["val_loss"] for e in t.by(ref, "eval")}
    for e in t.by(got, "eval"):
        t.check(e["val_loss"] == re[e["step"]], "%s: eval at step %d differs" % (what, e["step"]))
    t.check(t.finals(got) == t.finals(ref), "%s: final_val_loss %r, uninterrupted %r"
            % (what, t.finals(got), t.finals(ref)))


def stop_with(cfg, tmp, name, sig, at):
    ck = os.path.join(tmp, name)
    p = t.start_torch(cfg, tmp, name, env={"SCALESWEEP_CHECKPOINT_DIR": ck})
    lines = []
    t.wait_for_step(p, at, lines)
    p.send_signal(sig)
    for raw in p.stdout:
        lines.append(json.loads(raw))
    rc = p.wait()
    return rc, lines, ck


def main():
    t.need_torch()
    binary = t.binary()
    with t.Tmp("ss_torch_resume_") as tmp:
        cfg = config(binary, tmp)
        rc, ref, err = t.run_torch(cfg, tmp, "ref",
                                   env={"SCALESWEEP_CHECKPOINT_DIR": os.path.join(tmp, "ck_ref")})
        t.ok(rc, ref, err, "uninterrupted run")
        t.check(len(t.by(ref, "checkpoint")) == STEPS // EVERY, "checkpoint cadence")

        for sig, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
            name = "sig%d" % sig
            rc, lines, ck = stop_with(cfg, tmp, name, sig, 15)
            t.check(rc == code, "%s: exit %d, expected %d" % (name, rc, code))
            last = t.by(lines, "step")[-1]["step"]
            t.check(last < STEPS, "%s: ran to the end" % name)
            cks = t.by(lines, "checkpoint")
            t.check(cks and cks[-1]["step"] == last and os.path.exists(cks[-1]["path"]),
                    "%s: no checkpoint line at the stop (step %d)" % (name, last))
            errs = t.by(lines, "error")
            t.check(len(errs) == 1 and "signal" in errs[0]["message"], "%s: error line" % name)
            stop_rc = rc
            rc, got, err = t.run_torch(cfg, tmp, name + "_again",
                                       env={"SCALESWEEP_CHECKPOINT_DIR": ck})
            t.ok(rc, got, err, name + " resumed")
            same_tail(ref, got, last, name)
            print("%s: stopped after step %d (exit %d), resumed: identical to the uninterrupted "
                  "run" % (signal.Signals(sig).name, last, stop_rc))

        # kill -9: from the newest checkpoint
        ck = os.path.join(tmp, "ck_kill")
        p = t.start_torch(cfg, tmp, "kill", env={"SCALESWEEP_CHECKPOINT_DIR": ck})
        lines = []
        t.wait_for_step(p, 35, lines)
        p.kill()
        p.wait()
        newest = t.by(lines, "checkpoint")[-1]["step"]
        rc, got, err = t.run_torch(cfg, tmp, "kill_again", env={"SCALESWEEP_CHECKPOINT_DIR": ck})
        t.ok(rc, got, err, "resumed after kill -9")
        first = t.by(got, "step")[0]["step"] - 1
        t.check(first >= newest, "kill -9: resumed at step %d, the newest checkpoint is at %d"
                % (first, newest))
        same_tail(ref, got, first, "kill -9")
        print("kill -9 after step >= 35: resumed from step %d, identical" % first)

        # the newest checkpoint past SCALESWEEP_RESUME_MAX_STEP: the one before it
        ck = os.path.join(tmp, "ck_max")
        rc, lines, ck = stop_with(cfg, tmp, "ck_max", signal.SIGTERM, 25)
        t.check(rc == 143, "max-step run: exit %d" % rc)
        steps = sorted(e["step"] for e in t.by(lines, "checkpoint"))
        newest, older = steps[-1], steps[-2]
        rc, got, err = t.run_torch(cfg, tmp, "max_again",
                                   env={"SCALESWEEP_CHECKPOINT_DIR": ck,
                                        "SCALESWEEP_RESUME_MAX_STEP": str(newest - 1)})
        t.ok(rc, got, err, "resume with a max step")
        same_tail(ref, got, older, "resume max step")
        print("resume max step %d: from step %d (checkpoint.prev.pt), identical"
              % (newest - 1, older))
    print("ok")


if __name__ == "__main__":
    main()

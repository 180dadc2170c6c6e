#!/usr/bin/env python3
"""A stand-in for `scalesweep train` for the status page's browser test:
called as  fake_trainer.py train --config FILE [--resume DIR]  it reads the
run config and prints the trainer's JSON-lines events
(docs/design.md#output-events) for a loss that follows a known Chinchilla law
in N = 12 L d^2 and
the tokens seen, slowly (FAKE_RUN_S seconds per run, default 5), so that the
page can be watched while curves grow and the fits can find the law.
A config whose train.seed is 99 fails half-way (for the failure views)."""
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from harness import trainer_config  # noqa: E402

E, A, ALPHA, B, BETA = 1.7, 400.0, 0.34, 410.0, 0.28


def main():
    args = trainer_config("fake_trainer.py")
    if args is None:
        return 2
    cfg, m, t, n = args
    per_step = t["batch_size"] * m["seq_len"]
    steps = max(1, math.ceil(t["tokens"] / per_step))
    run_s = float(__import__("os").environ.get("FAKE_RUN_S", "5"))
    emit = min(steps, 150)
    fail = t.get("seed") == 99

    def loss(tokens):
        return E + A / n ** ALPHA + B / max(tokens, 1) ** BETA

    def out(o):
        sys.stdout.write(json.dumps(o) + "\n")
        sys.stdout.flush()

    out({"event": "config", "config": cfg, "params": n + m["d_model"] * 300,
         "nonembedding_params": n, "flops_per_token": 6 * n})
    evals = {round(emit * k / 4) for k in range(1, 5)}
    for i in range(1, emit + 1):
        step = max(1, round(steps * i / emit))
        tokens = step * per_step
        out({"event": "step", "step": step, "tokens": tokens, "train_loss": loss(tokens) + 0.01,
             "lr": t.get("lr", 0.001), "grad_norm": 1.0, "tok_per_s": 1e5})
        if i in evals:
            out({"event": "eval", "step": step, "tokens": tokens, "val_loss": loss(tokens)})
        if fail and i > emit // 2:
            print("fake_trainer: simulated failure <b>half-way</b>", file=sys.stderr)
            out({"event": "error", "message": "simulated failure <img src=x onerror=alert(2)>"})
            return 1
        time.sleep(run_s / emit)
    d = steps * per_step
    out({"event": "done", "final_val_loss": loss(d), "params": n + m["d_model"] * 300,
         "nonembedding_params": n, "flops": 6 * n * d, "flops_6nd": 6 * n * d, "tokens": d,
         "steps": steps, "wall_s": run_s, "peak_rss_bytes": 1 << 20})
    return 0


if __name__ == "__main__":
    sys.exit(main())

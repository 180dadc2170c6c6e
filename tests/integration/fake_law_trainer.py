#!/usr/bin/env python3
"""A stand-in for `scalesweep train` whose curves follow known laws, for the
scheduler's refits (tests/integration/test_refit.py): called as
  fake_law_trainer.py train --config FILE [--resume DIR]
it prints the trainer's JSON-lines events (docs/design.md#output-events) at
once, with no training.

The validation loss after s optimizer steps at batch size B (sequences) is
  L(s) = 2 + (s / (S0 + E0 / B))^-0.5,  S0 = 100, E0 = 3200,
so the steps to reach a target loss L_t are S = g (S0 + E0 / B) with
g = (L_t - 2)^-2: the empirical model S = S_min + E_min / B with
B_crit = E_min / S_min = E0 / S0 = 32 sequences at every target. Every
step line carries b_noise = 20 sequences. A config whose train.seed is 7
instead ends at the Chinchilla law's loss for its N (the trainer's count,
12 L d^2 + 13 L d + 2 d) and D (train.tokens), L = 1.5 + 400 / N^0.34 +
4000 / D^0.28, approached as L + 0.3 ((steps / s)^0.5 - 1); with train.seed
8, the same law times a run's own noise, exp(0.01 z) with z ~ N(0, 1) fixed
by its shape and D. A config whose train.seed is 99, or whose model.d_model
is FAKE_LAW_FAIL_DMODEL (an adaptive design's failed runs:
tests/integration/test_adaptive.py), writes a line to stderr and fails
half-way. A muP config (model.parametrization
"mup", an lr tune's: tests/integration/test_lr_tune.py) ends at
L = 2 + (ln(lr / 0.003))^2 / 4 + 50 / d_model: its best learning rate is 0.003
at every width, as muP promises. FAKE_LAW_SECONDS (default 0)
spreads the lines over that many seconds, so a run can be seen running."""
import hashlib
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time

from harness import trainer_config

S0, E0, BNOISE = 100.0, 3200.0, 20.0
MUP_LR = 0.003  # a muP run's best learning rate, at every width


def corpus_figures(cfg):
    """The synthetic corpus's entropy rate and window floor, which the real
    trainer reports in its config event, from `scalesweep data synth` (the
    worker that started us is that binary); {} for real text."""
    syn = (cfg.get("data") or {}).get("synthetic")
    if not isinstance(syn, dict):
        return {}
    exe = os.readlink(f"/proc/{os.getppid()}/exe")
    with tempfile.TemporaryDirectory() as d:
        args = [exe, "data", "synth", "--out", d, "--tokens", "100", "--val-tokens", "10",
                "--seq-len", str(cfg["model"]["seq_len"])]
        for k in ("letters", "words", "min_len", "max_len", "zipf", "seed"):
            if k in syn:
                args += ["--" + k.replace("_", "-"), str(syn[k])]
        j = json.loads(subprocess.run(args, check=True, capture_output=True,
                                      text=True).stdout.strip().splitlines()[-1])
    return {"entropy_rate": j["entropy_rate"], "window_floor": j["window_floor"]}


def main():
    args = trainer_config("fake_law_trainer.py")
    if args is None:
        return 2
    cfg, m, t, n = args
    # N as the real trainer counts it (rcfg_nonembedding_params), so that the
    # planner's N is the N the law is evaluated at
    n = n + 13 * m["n_layer"] * m["d_model"] + 2 * m["d_model"]
    b = t["batch_size"]
    per_step = b * m["seq_len"]
    steps = max(1, math.ceil(t["tokens"] / per_step))

    def loss(s):
        return 2 + (s / (S0 + E0 / b)) ** -0.5

    if t.get("seed") in (7, 8):
        final = 1.5 + 400 * n ** -0.34 + 4000 * t["tokens"] ** -0.28
        if t["seed"] == 8:  # a run's own noise: 1% in ln L, fixed by its shape and D
            key = hashlib.sha256(f"{m['n_layer']} {m['d_model']} {t['tokens']}".encode())
            final *= math.exp(0.01 * random.Random(key.hexdigest()).gauss(0, 1))

        def loss(s):  # noqa: F811 (the Chinchilla law's run)
            return final + 0.3 * ((steps / s) ** 0.5 - 1)

    if m.get("parametrization") == "mup" and t.get("seed") != 99:
        final_mup = 2 + math.log(t["lr"] / MUP_LR) ** 2 / 4 + 50 / m["d_model"]

        def loss(s):  # noqa: F811 (a muP run: the rate decides)
            return final_mup + 0.3 * ((steps / s) ** 0.5 - 1)

    def out(o):
        sys.stdout.write(json.dumps(o) + "\n")

    out(dict({"event": "config", "config": cfg, "params": n, "nonembedding_params": n,
              "flops_per_token": 6 * n}, **corpus_figures(cfg)))
    emit = min(steps, 400)
    pause = float(os.environ.get("FAKE_LAW_SECONDS", "0")) / emit
    for i in range(1, emit + 1):
        if pause:
            sys.stdout.flush()
            time.sleep(pause)
        s = max(1, round(steps * i / emit))
        out({"event": "step", "step": s, "tokens": s * per_step, "train_loss": loss(s),
             "lr": t.get("lr", 0.001), "grad_norm": 1.0, "b_noise": BNOISE, "tok_per_s": 1e6})
        out({"event": "eval", "step": s, "tokens": s * per_step, "val_loss": loss(s)})
        failing = t.get("seed") == 99 or \
            str(m["d_model"]) == os.environ.get("FAKE_LAW_FAIL_DMODEL")
        if failing and i == emit // 2:
            print(f"fake_law_trainer: loss diverged at step {s}", file=sys.stderr)
            out({"event": "error", "message": "loss diverged"})
            return 1
    out({"event": "done", "final_val_loss": loss(steps), "params": n, "nonembedding_params": n,
         "flops": 6 * n * steps * per_step, "flops_6nd": 6 * n * steps * per_step,
         "tokens": steps * per_step, "steps": steps, "wall_s": 0.01, "peak_rss_bytes": 1 << 20})
    return 0


if __name__ == "__main__":
    sys.exit(main())

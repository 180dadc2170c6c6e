#!/usr/bin/python3
"""The torch trainer on a GPU (backend cuda), against the built-in on the
CPU: fp32 with TF32 off follows the built-in's fp32 run to 1e-4 relative
(different kernels and summation orders, as on the CPU); bf16 and fp16
(autocast, fp16 with the built-in's dynamic loss scaling: loss_scale starts
at 65536 and is reported with "skipped" on every step line) train to within
2% of the fp32 final_val_loss. Exits 77 ("skipped: no GPU") without one.
Usage: test_cuda.py SCALESWEEP_BINARY
"""
import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sstest as t  # noqa: E402


def main():
    t.need_torch()
    import torch
    if not torch.cuda.is_available():
        print("skipped: no GPU")
        sys.exit(77)
    binary = t.binary()
    with t.Tmp("ss_torch_cuda_") as tmp:
        p = t.small(100)
        cpu = t.resolve(binary, p, tmp)
        rc, a, err = t.run_builtin(binary, cpu, tmp, "builtin_cpu")
        t.ok(rc, a, err, "built-in (CPU)")
        p.update({"backend": "cuda", "tf32": False})
        gpu = t.resolve(binary, p, tmp)
        rc, b, err = t.run_torch(gpu, tmp, "torch_cuda_fp32")
        t.ok(rc, b, err, "torch (cuda fp32)")
        worst = max(t.rel(x, y) for x, y in zip(t.losses(a), t.losses(b)))
        fv = t.rel(t.finals(a), t.finals(b))
        print("cuda fp32 (tf32 off) vs built-in CPU fp32: max rel train_loss %.3g, "
              "final_val_loss %.3g" % (worst, fv))
        t.check(worst <= 1e-4 and fv <= 1e-4, "cuda fp32 differs from the built-in")
        for prec in ("bf16", "fp16"):
            c = dict(copy.deepcopy(gpu), precision=prec)
            c.pop("tf32", None)
            rc, e, err = t.run_torch(c, tmp, "torch_cuda_" + prec)
            t.ok(rc, e, err, "torch (cuda %s)" % prec)
            steps = t.by(e, "step")
            if prec == "fp16":
                t.check(steps[0].get("loss_scale") == 65536.0 and "skipped" in steps[0],
                        "fp16 step lines without loss_scale/skipped: %s" % steps[0])
            r = t.rel(t.finals(e), t.finals(b))
            print("cuda %s: final_val_loss %.6g, fp32 %.6g (rel %.3g)"
                  % (prec, t.finals(e), t.finals(b), r))
            t.check(r <= 0.02, "cuda %s final_val_loss off by %.3g" % (prec, r))
    print("ok")


if __name__ == "__main__":
    main()

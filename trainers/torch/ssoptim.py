"""AdamW as trainer/optim.c and kernels/cpu/adamw.c compute it, in float32:

  g  = grad * grad_scale          (loss-scale undo times the clipping factor)
  m  = b1 m + (1 - b1) g
  v  = b2 v + (1 - b2) g g
  p -= lr ((m / bc1) / (sqrt(v / bc2) + eps) + wd p)

with bc_i = 1 - b_i^step (step: the optimizer's own 1-based count), b1, b2,
lr, eps and wd rounded to float32 as the C code's kern_adamw_args holds them,
and weight decay only on the tensors the model marks (ssmodel.DECAY). A
group's lr_scale (muP's 1/m for the hidden matrices, ssmodel.lr_scale; 1
otherwise) multiplies the float32 lr in float32, as adamw_fused's
pa.lr = a->lr * part.lr_scale; weight decay is then at that rate too.
torch.optim.AdamW decays first and divides differently, which differs in
the last bits; this class keeps the built-in's order of operations.

A torch.optim.Optimizer, so ZeroRedundancyOptimizer can shard it: step()
takes the step's learning rate, gradient factor and optimizer step count.
"""
import numpy as np
import torch


def f32(x):
    return float(np.float32(x))


class SSAdamW(torch.optim.Optimizer):
    def __init__(self, params, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0, lr_scale=1.0):
        super().__init__(params, dict(beta1=beta1, beta2=beta2, eps=eps,
                                      weight_decay=weight_decay, lr_scale=lr_scale))

    @torch.no_grad()
    def step(self, closure=None, lr=0.0, grad_scale=1.0, opt_step=1):
        for group in self.param_groups:
            b1, b2 = f32(group["beta1"]), f32(group["beta2"])
            omb1 = f32(np.float32(1.0) - np.float32(b1))
            omb2 = f32(np.float32(1.0) - np.float32(b2))
            bc1 = f32(1.0 - b1 ** opt_step)
            bc2 = f32(1.0 - b2 ** opt_step)
            eps, wd, lrf, gs = f32(group["eps"]), f32(group["weight_decay"]), f32(lr), \
                f32(grad_scale)
            scale = f32(group.get("lr_scale", 1.0))
            if scale != 1.0:
                lrf = f32(np.float32(lrf) * np.float32(scale))
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["m"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["v"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                m, v = st["m"], st["v"]
                g = p.grad * gs
                m.mul_(b1).add_(g * omb1)
                v.mul_(b2).add_((g * omb2) * g)
                upd = (m / bc1) / ((v / bc2).sqrt_() + eps)
                p.sub_((upd + p * wd) * lrf)
        return None

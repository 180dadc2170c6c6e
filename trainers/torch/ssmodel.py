"""The built-in trainer's GPT (trainer/model.c, kernels/cpu) in PyTorch.

The same 16 tensors in the same order and shapes as trn_weights (the block
tensors stacked over layers), so the initialisation draws them exactly as
trn_model_init_weights does; pre-LayerNorm blocks (eps 1e-5), causal
multi-head attention with scores scaled by 1/sqrt(head size), a 4x MLP with
the tanh GELU, a final LayerNorm, and the head tied to the token embedding,
without bias. Linear weights are (out, in), as torch's and the kernels'.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import ssrng

LN_EPS = 1e-5

# name, decays (matrices and embeddings), shape as a function of (V, T, L, C)
TENSORS = [
    ("wte", 1, lambda V, T, L, C: (V, C)),
    ("wpe", 1, lambda V, T, L, C: (T, C)),
    ("ln1w", 0, lambda V, T, L, C: (L, C)),
    ("ln1b", 0, lambda V, T, L, C: (L, C)),
    ("qkvw", 1, lambda V, T, L, C: (L, 3 * C, C)),
    ("qkvb", 0, lambda V, T, L, C: (L, 3 * C)),
    ("attprojw", 1, lambda V, T, L, C: (L, C, C)),
    ("attprojb", 0, lambda V, T, L, C: (L, C)),
    ("ln2w", 0, lambda V, T, L, C: (L, C)),
    ("ln2b", 0, lambda V, T, L, C: (L, C)),
    ("fcw", 1, lambda V, T, L, C: (L, 4 * C, C)),
    ("fcb", 0, lambda V, T, L, C: (L, 4 * C)),
    ("fcprojw", 1, lambda V, T, L, C: (L, C, 4 * C)),
    ("fcprojb", 0, lambda V, T, L, C: (L, C)),
    ("lnfw", 0, lambda V, T, L, C: (C,)),
    ("lnfb", 0, lambda V, T, L, C: (C,)),
]
NAMES = [t[0] for t in TENSORS]
DECAY = {t[0]: t[1] for t in TENSORS}
LN_GAINS = ("ln1w", "ln2w", "lnfw")
RESID_PROJ = ("attprojw", "fcprojw")


def init_weights(shape, seed):
    """trn_model_init_weights: {name: float32 numpy array}. One generator
    seeded with seed draws every decaying tensor's elements in tensor order,
    N(0, 0.02), the residual projections N(0, 0.02 / sqrt(2L)); biases 0,
    LayerNorm gains 1."""
    V, T, L, C = shape["vocab_size"], shape["seq_len"], shape["n_layer"], shape["d_model"]
    rng = ssrng.Xoshiro(seed)
    resid_std = 0.02 / math.sqrt(2.0 * L)
    out = {}
    for name, decay, shp in TENSORS:
        dims = shp(V, T, L, C)
        n = int(np.prod(dims))
        if name in LN_GAINS:
            a = np.ones(n, dtype=np.float32)
        elif decay:
            std = resid_std if name in RESID_PROJ else 0.02
            a = ssrng.normals_f32(rng, n, std)
        else:
            a = np.zeros(n, dtype=np.float32)
        out[name] = a.reshape(dims)
    return out


class GPT(torch.nn.Module):
    def __init__(self, shape, recompute=False):
        super().__init__()
        V, T, L, C = shape["vocab_size"], shape["seq_len"], shape["n_layer"], shape["d_model"]
        self.V, self.T, self.L, self.C, self.NH = V, T, L, C, shape["n_head"]
        self.recompute = recompute
        for name, _, shp in TENSORS:
            self.register_parameter(name, torch.nn.Parameter(torch.zeros(shp(V, T, L, C))))

    def tensors(self):
        """The parameters in trn_weights order."""
        return [getattr(self, n) for n in NAMES]

    def load_weights(self, arrays):
        with torch.no_grad():
            for n in NAMES:
                p = getattr(self, n)
                p.copy_(torch.as_tensor(np.asarray(arrays[n])).to(p.device))

    def block(self, x, l):
        B, T, C, NH = x.shape[0], x.shape[1], self.C, self.NH
        hs = C // NH
        h = F.layer_norm(x, (C,), self.ln1w[l], self.ln1b[l], LN_EPS)
        qkv = F.linear(h, self.qkvw[l], self.qkvb[l])
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf"))
        att = torch.softmax(att.float(), dim=-1).to(v.dtype)
        y = torch.matmul(att, v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, self.attprojw[l], self.attprojb[l])
        h = F.layer_norm(x, (C,), self.ln2w[l], self.ln2b[l], LN_EPS)
        h = F.gelu(F.linear(h, self.fcw[l], self.fcb[l]), approximate="tanh")
        return x + F.linear(h, self.fcprojw[l], self.fcprojb[l])

    def forward(self, idx):
        """Logits (B, T, V) of token ids idx (B, T)."""
        T = idx.shape[1]
        x = F.embedding(idx, self.wte) + self.wpe[:T]
        for l in range(self.L):
            if self.recompute and torch.is_grad_enabled():
                x = checkpoint(self.block, x, l, use_reentrant=False)
            else:
                x = self.block(x, l)
        x = F.layer_norm(x, (self.C,), self.lnfw, self.lnfb, LN_EPS)
        return F.linear(x, self.wte)

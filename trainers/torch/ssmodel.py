"""The built-in trainer's decoder (trainer/model.c, kernels/cpu) in PyTorch,
in both of its families (docs/models.md) and both parametrisations.

The same 19 tensors in the same order and shapes as trn_weights (the block
tensors stacked over layers; those a family lacks have size 0), so the
initialisation draws them exactly as trn_model_init_weights does. Linear
weights are (out, in), as torch's and the kernels'.

gpt2: token and learned position embeddings, pre-LayerNorm blocks (eps
1e-5), causal multi-head attention with scores scaled by 1/sqrt(head size),
a 4x MLP with the tanh GELU, biases, a final LayerNorm, and the head tied to
the token embedding, without bias.

llama: the token embedding alone; pre-RMSNorm blocks (x / sqrt(mean(x^2) +
1e-5) times a gain); attention without biases, with (qk_norm) q and k
RMS-normalised per head times per-layer gains, then rotary positions
("rotate half", as HF Llama: for i < hs/2, angle t theta^(-2i/hs) turns the
pair (i, i + hs/2)); a SwiGLU MLP of rcfg_ffn_hidden F (fcw's rows [0, F)
the gate, [F, 2F) the up projection, silu(gate) x up, fcprojw down); a final
RMSNorm; an output head of its own (head) unless tie_embeddings.

muP (trainer/mup.h), with m = d_model / base_width: q times 1/sqrt(hs)
before attention (scores q.k / hs), the final norm's output times 1/m
before the head, the hidden matrices (qkvw, attprojw, fcw, fcprojw) drawn
with std / sqrt(m) and trained at lr / m (lr_scale; ssoptim).
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import ssrng

LN_EPS = 1e-5


def ffn_hidden(s):
    """runcfg/flops.c rcfg_ffn_hidden: 4 d for gpt2; for llama
    mlp_multiple_of x ceil(mlp_ratio x d / mlp_multiple_of), computed as the
    C code does (a hair below an integer counts as that integer)."""
    d = s["d_model"]
    if s.get("family", "gpt2") != "llama":
        return 4 * d
    m = s["mlp_multiple_of"] if s["mlp_multiple_of"] > 0 else 1
    x = s["mlp_ratio"] * d / float(m)
    q = int(x)
    if x - float(q) > 1e-9:
        q += 1
    if q < 1:
        q = 1
    return q * m


def full_shape(s):
    """A model dict (a resolved config's "model", or sscfg.shape_of's) with
    the family's and parametrisation's keys filled in (gpt2, sp)."""
    out = dict(s)
    out.setdefault("family", "gpt2")
    out.setdefault("parametrization", "sp")
    out.setdefault("base_width", 0)
    llama = out["family"] == "llama"
    for k, v in (("rope_theta", 0.0), ("mlp_ratio", 0.0), ("mlp_multiple_of", 0),
                 ("qk_norm", False)):
        out.setdefault(k, v)
    out.setdefault("tie_embeddings", not llama)
    out["untied"] = llama and not out["tie_embeddings"]
    return out


def width_mult(s):
    """trn_mup_width_mult: d_model / base_width under muP, else 1."""
    if s.get("parametrization", "sp") != "mup" or s.get("base_width", 0) <= 0:
        return 1.0
    return float(s["d_model"]) / float(s["base_width"])


HIDDEN = ("qkvw", "attprojw", "fcw", "fcprojw")  # trn_mup_hidden


def lr_scale(s, name):
    """trn_mup_lr_scale, a float32: 1/m for the hidden matrices, else 1."""
    return float(np.float32(1.0 / width_mult(s))) if name in HIDDEN else 1.0


def init_scale(s, name):
    """trn_mup_init_scale (double): 1/sqrt(m) for the hidden matrices, else 1."""
    return 1.0 / math.sqrt(width_mult(s)) if name in HIDDEN else 1.0


def out_mult(s):
    """trn_mup_out_mult, a float32: 1/m (1 in sp)."""
    return float(np.float32(1.0 / width_mult(s)))


def attn_qscale(s):
    """trn_mup_attn_qscale, a float32: 1/sqrt(hs) under muP, else 1."""
    if s.get("parametrization", "sp") != "mup":
        return 1.0
    return float(np.float32(1.0 / math.sqrt(float(s["d_model"]) / s["n_head"])))


def _dims(s):
    s = full_shape(s)
    V, T, L, C = s["vocab_size"], s["seq_len"], s["n_layer"], s["d_model"]
    return s, V, T, L, C, ffn_hidden(s), C // s["n_head"], s["family"] == "llama"


def tensor_dims(name, s):
    """Tensor name's dims in a model of shape s; (0,) where its family lacks it."""
    s, V, T, L, C, Fh, hs, llama = _dims(s)
    qk = llama and s["qk_norm"]
    return {
        "wte": (V, C),
        "wpe": (0,) if llama else (T, C),
        "ln1w": (L, C),
        "ln1b": (0,) if llama else (L, C),
        "qkvw": (L, 3 * C, C),
        "qkvb": (0,) if llama else (L, 3 * C),
        "attprojw": (L, C, C),
        "attprojb": (0,) if llama else (L, C),
        "ln2w": (L, C),
        "ln2b": (0,) if llama else (L, C),
        "fcw": (L, 2 * Fh, C) if llama else (L, Fh, C),  # llama: gate rows, then up rows
        "fcb": (0,) if llama else (L, Fh),
        "fcprojw": (L, C, Fh),
        "fcprojb": (0,) if llama else (L, C),
        "qnw": (L, hs) if qk else (0,),
        "knw": (L, hs) if qk else (0,),
        "lnfw": (C,),
        "lnfb": (0,) if llama else (C,),
        "head": (V, C) if s["untied"] else (0,),
    }[name]

# trn_weights' order; 1: weight decay applies (matrices and embeddings)
TENSORS = [("wte", 1), ("wpe", 1), ("ln1w", 0), ("ln1b", 0), ("qkvw", 1), ("qkvb", 0),
           ("attprojw", 1), ("attprojb", 0), ("ln2w", 0), ("ln2b", 0), ("fcw", 1), ("fcb", 0),
           ("fcprojw", 1), ("fcprojb", 0), ("qnw", 0), ("knw", 0), ("lnfw", 0), ("lnfb", 0),
           ("head", 1)]
NAMES = [t[0] for t in TENSORS]
DECAY = {t[0]: t[1] for t in TENSORS}
GAINS = ("ln1w", "ln2w", "lnfw", "qnw", "knw")
RESID_PROJ = ("attprojw", "fcprojw")


def names(s):
    """The tensors a model of shape s has (size > 0), in trn_weights order."""
    return [n for n in NAMES if int(np.prod(tensor_dims(n, s))) > 0]


def init_weights(shape, seed):
    """trn_model_init_weights: {name: float32 numpy array} for all 19
    tensors (size 0 where the family lacks one). One generator seeded with
    seed draws every decaying tensor's elements in tensor order, N(0, 0.02),
    the residual projections N(0, 0.02 / sqrt(2L)), each times muP's init
    scale (1/sqrt(m) for the hidden matrices); biases 0, norm gains 1. A
    tensor of size 0 draws nothing, so a gpt2 model's draws are the ones it
    had before llama existed."""
    s = full_shape(shape)
    L = s["n_layer"]
    rng = ssrng.Xoshiro(seed)
    resid_std = 0.02 / math.sqrt(2.0 * L)
    out = {}
    for name, decay in TENSORS:
        dims = tensor_dims(name, s)
        n = int(np.prod(dims))
        if name in GAINS:
            a = np.ones(n, dtype=np.float32)
        elif decay:
            std = (resid_std if name in RESID_PROJ else 0.02) * init_scale(s, name)
            a = ssrng.normals_f32(rng, n, std)
        else:
            a = np.zeros(n, dtype=np.float32)
        out[name] = a.reshape(dims)
    return out


def rms_norm(x, w, eps=LN_EPS):
    """x / sqrt(mean(x^2 over the last dim) + eps) * w, in float32."""
    xf = x.float()
    rstd = 1.0 / torch.sqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return ((xf * rstd) * w.float()).to(x.dtype)


def rope_tables(T, hs, theta, device):
    """cos and sin (T, hs/2) as float32: angle t theta^(-2i/hs) in float64,
    with theta rounded to float32 first, as kern.h's rope ops take it (the
    same value for 10000, 500000 and 1e6; not for every rope_theta)."""
    t = np.arange(T, dtype=np.float64)[:, None]
    i = np.arange(hs // 2, dtype=np.float64)[None, :]
    ang = t * np.power(float(np.float32(theta)), -2.0 * i / hs)
    return (torch.from_numpy(np.cos(ang).astype(np.float32)).to(device),
            torch.from_numpy(np.sin(ang).astype(np.float32)).to(device))


def rotate(x, cos, sin):
    """Rotary positions on x (B, T, NH, hs), "rotate half"."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h].float(), x[..., h:].float()
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


class GPT(torch.nn.Module):
    def __init__(self, shape, recompute=False):
        super().__init__()
        s = full_shape(shape)
        self.s = s
        self.V, self.T, self.L, self.C = s["vocab_size"], s["seq_len"], s["n_layer"], s["d_model"]
        self.NH = s["n_head"]
        self.hs = self.C // self.NH
        self.F = ffn_hidden(s)
        self.llama = s["family"] == "llama"
        self.qk_norm = self.llama and bool(s["qk_norm"])
        self.untied = s["untied"]
        self.qscale = attn_qscale(s)
        self.out_mult = out_mult(s)
        self.recompute = recompute
        self.names = names(s)
        for name in self.names:
            self.register_parameter(name, torch.nn.Parameter(torch.zeros(tensor_dims(name, s))))
        self.rope = None

    def tensors(self):
        """The parameters in trn_weights order (those of size > 0)."""
        return [getattr(self, n) for n in self.names]

    def load_weights(self, arrays):
        with torch.no_grad():
            for n in self.names:
                p = getattr(self, n)
                p.copy_(torch.as_tensor(np.asarray(arrays[n])).to(p.device))

    def rope_for(self, T, device):
        if self.rope is None or self.rope[0].shape[0] < T or self.rope[0].device != device:
            self.rope = rope_tables(max(T, self.T), self.hs, self.s["rope_theta"], device)
        return self.rope[0][:T], self.rope[1][:T]

    def attention(self, q, k, v):
        """Causal attention of q, k, v (B, NH, T, hs): q times muP's qscale,
        scores q.k / sqrt(hs)."""
        B, NH, T, hs = q.shape
        if self.qscale != 1.0:
            q = q * self.qscale
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        att = att.masked_fill(mask, float("-inf"))
        att = torch.softmax(att.float(), dim=-1).to(v.dtype)
        return torch.matmul(att, v).transpose(1, 2).reshape(B, T, NH * hs)

    def block(self, x, l):
        if self.llama:
            return self.llama_block(x, l)
        B, T, C, NH = x.shape[0], x.shape[1], self.C, self.NH
        hs = C // NH
        h = F.layer_norm(x, (C,), self.ln1w[l], self.ln1b[l], LN_EPS)
        qkv = F.linear(h, self.qkvw[l], self.qkvb[l])
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        y = self.attention(q, k, v)
        x = x + F.linear(y, self.attprojw[l], self.attprojb[l])
        h = F.layer_norm(x, (C,), self.ln2w[l], self.ln2b[l], LN_EPS)
        h = F.gelu(F.linear(h, self.fcw[l], self.fcb[l]), approximate="tanh")
        return x + F.linear(h, self.fcprojw[l], self.fcprojb[l])

    def llama_block(self, x, l):
        B, T, C, NH, hs = x.shape[0], x.shape[1], self.C, self.NH, self.hs
        h = rms_norm(x, self.ln1w[l])
        qkv = F.linear(h, self.qkvw[l])
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.reshape(B, T, NH, hs) for t in (q, k, v))
        if self.qk_norm:
            q = rms_norm(q, self.qnw[l])
            k = rms_norm(k, self.knw[l])
        cos, sin = self.rope_for(T, x.device)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        y = self.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        x = x + F.linear(y, self.attprojw[l])
        h = rms_norm(x, self.ln2w[l])
        g, u = F.linear(h, self.fcw[l]).split(self.F, dim=2)
        return x + F.linear(F.silu(g) * u, self.fcprojw[l])

    def forward(self, idx):
        """Logits (B, T, V) of token ids idx (B, T)."""
        T = idx.shape[1]
        x = F.embedding(idx, self.wte)
        if not self.llama:
            x = x + self.wpe[:T]
        for l in range(self.L):
            if self.recompute and torch.is_grad_enabled():
                x = checkpoint(self.block, x, l, use_reentrant=False)
            else:
                x = self.block(x, l)
        if self.llama:
            x = rms_norm(x, self.lnfw)
        else:
            x = F.layer_norm(x, (self.C,), self.lnfw, self.lnfb, LN_EPS)
        if self.out_mult != 1.0:
            x = x * self.out_mult
        return F.linear(x, self.head if self.untied else self.wte)

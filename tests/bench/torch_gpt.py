#!/usr/bin/python3
"""PyTorch reference side of the CPU training benchmark (tests/bench/run.sh).

A small GPT-2 written for this benchmark (nanoGPT-style, not copied from it):
token + learned position embeddings, pre-LN blocks, causal multi-head attention
(masked softmax: torch 1.13 has no F.scaled_dot_product_attention), 4x MLP with
the tanh approximation of GELU, final LayerNorm, output head tied to the token
embedding, biases on every nn.Linear, LayerNorm eps 1e-5, AdamW (lr 1e-3, betas 0.9/0.95,
eps 1e-8, weight decay 0.1 on matrices and embeddings), no dropout. The data are uniform random tokens in [0, vocab).

Each step (forward + backward + optimizer step) is timed; the warmup steps are
discarded; one JSON line goes to stdout.

Run with Debian's interpreter: /usr/bin/python3 tests/bench/torch_gpt.py ...
"""
import argparse
import json
import math
import os
import re
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads, T):
        super().__init__()
        assert d % heads == 0
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d, bias=True)
        self.out = nn.Linear(d, d, bias=True)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        self.register_buffer("causal", mask.view(1, 1, T, T), persistent=False)

    def forward(self, x):
        B, T, d = x.shape
        hd = d // self.heads
        q, k, v = self.qkv(x).split(d, dim=2)
        # (B, heads, T, hd)
        q = q.view(B, T, self.heads, hd).transpose(1, 2)
        k = k.view(B, T, self.heads, hd).transpose(1, 2)
        v = v.view(B, T, self.heads, hd).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        scores = scores.masked_fill(~self.causal[:, :, :T, :T], float("-inf"))
        probs = F.softmax(scores, dim=-1)
        y = probs @ v
        y = y.transpose(1, 2).contiguous().view(B, T, d)
        return self.out(y)


class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.up = nn.Linear(d, 4 * d, bias=True)
        self.down = nn.Linear(4 * d, d, bias=True)

    def forward(self, x):
        return self.down(F.gelu(self.up(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d, heads, T):
        super().__init__()
        self.ln1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = CausalSelfAttention(d, heads, T)
        self.ln2 = nn.LayerNorm(d, eps=1e-5)
        self.mlp = MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class GPT(nn.Module):
    def __init__(self, layers, d, heads, T, vocab):
        super().__init__()
        self.T = T
        self.tok_emb = nn.Embedding(vocab, d)
        self.pos_emb = nn.Embedding(T, d)
        self.blocks = nn.ModuleList(Block(d, heads, T) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d, eps=1e-5)
        self.reset_parameters(layers)

    def reset_parameters(self, layers):
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                nn.init.zeros_(p)
            elif "ln" in name:
                nn.init.ones_(p)
            elif name.endswith("out.weight") or name.endswith("down.weight"):
                # GPT-2: residual projections scaled by 1/sqrt(2L)
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        for blk in self.blocks:
            x = blk(x)
        x = self.ln_f(x)
        logits = F.linear(x, self.tok_emb.weight)  # tied head, no bias
        return F.cross_entropy(logits.float().view(B * T, -1), targets.view(B * T))


def blas_description():
    """Which BLAS/GEMM libraries this process has mapped (call after a matmul)."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            base = os.path.basename(path)
            if any(k in base for k in ("blas", "lapack", "mkl", "dnnl")):
                libs.add(os.path.realpath(path))
    cfg = torch.__config__.show()
    info = re.findall(r"\b(BLAS_INFO=[^,\s]*|LAPACK_INFO=[^,\s]*|USE_MKLDNN=[^,\s]*)", cfg)
    dnnl = re.search(r"MKL-DNN v[0-9.]+", cfg)
    if dnnl:
        info.append(dnnl.group(0))
    return "; ".join(sorted(libs) + info)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--d", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--T", type=int, required=True)
    ap.add_argument("--B", type=int, required=True)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20, help="timed steps (after warmup)")
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shape", default=None, help="label echoed in the output")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    # the interpreter + libtorch alone, before any model or data exists
    baseline_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = GPT(a.layers, a.d, a.heads, a.T, a.vocab)
    model.train()
    # the trainer's defaults: decay on matrices and embeddings, not on biases
    # and LayerNorm gains
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(a.seed)
    use_bf16 = a.precision == "bf16"

    times, losses = [], []
    for step in range(a.warmup_steps + a.steps):
        x = torch.randint(0, a.vocab, (a.B, a.T), generator=gen)
        y = torch.randint(0, a.vocab, (a.B, a.T), generator=gen)
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_bf16):
            loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        lv = loss.item()
        dt = time.perf_counter() - t0
        if step >= a.warmup_steps:
            times.append(dt)
        losses.append(lv)
        print(f"# step {step} loss {lv:.4f} {dt * 1e3:.1f} ms", file=sys.stderr)

    tok = a.B * a.T
    rates = [tok / t for t in times]
    n_params = sum(p.numel() for p in model.parameters())
    out = {
        "side": "pytorch",
        "shape": a.shape or f"L{a.layers}_d{a.d}_h{a.heads}_T{a.T}_B{a.B}",
        "precision": a.precision,
        "layers": a.layers, "d": a.d, "heads": a.heads, "T": a.T, "B": a.B,
        "vocab": a.vocab, "threads": torch.get_num_threads(),
        "steps_timed": len(times), "warmup_steps": a.warmup_steps,
        "tok_per_s_median": statistics.median(rates),
        "tok_per_s_min": min(rates), "tok_per_s_max": max(rates),
        "step_s_median": statistics.median(times),
        "params": n_params,
        "first_loss": losses[0], "last_loss": losses[-1],
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "baseline_rss_bytes": baseline_rss,
        "tok_per_s_steps": rates,
        "torch": torch.__version__,
        "blas": blas_description(),
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The PyTorch side of the GPU benchmark (tests/gpu/run.sh, section 3).

A GPT written for this comparison, the model scalesweep trains (docs/design.md#the-trainer),
shape for shape: token and learned position embeddings, pre-LayerNorm blocks
(causal multi-head attention through F.scaled_dot_product_attention, a 4x MLP
with the tanh approximation of GELU), a final LayerNorm, the output head tied
to the token embedding, biases on every linear layer and LayerNorm, no
dropout. Training is what a careful PyTorch user would write: fp32 master
weights under bf16 autocast, AdamW (fused where this PyTorch has it; betas
0.9/0.95, eps 1e-8, weight decay 0.1 on matrices and embeddings, scalesweep's
defaults), gradient clipping at 1.0, and one fixed batch of random tokens on
the device (data loading is not what is measured; scalesweep's step lines
include its synthetic corpus's generation).

  torch_bench.py --layers 12 --d-model 768 --heads 12 --seq-len 1024 \
      --vocab 50304 --micro-batch 16 --steps 20 --flops-per-token 798031872 \
      --mode eager|compile --json

Each step (forward, backward, clipping, optimizer step) is timed after
--warmup steps: on CUDA with a pair of events around each step (the GPU's
timeline, gaps from a slow host included) inside a window opened and closed
by torch.cuda.synchronize; on the CPU with the clock. tokens/s is
micro-batch x T over the median step time. MFU divides tokens/s x
--flops-per-token (pass scalesweep's config event's figure for the shape, so
both sides divide by one number; without it, SCIENCE.md's formula) by the
device's peak dense bf16 FLOP/s (--peak-flops, else 989e12 for H100/H200,
312e12 for A100; none on the CPU). The peak memory is
torch.cuda.max_memory_allocated over the mode (model, optimizer state,
activations), its counter reset when the mode starts.

One JSON line goes to stdout. Exit status 0 when the mode was measured or
torch.compile is unavailable (the line says "compile": "unavailable:
REASON"); 1 when the run could not be measured (out of memory: "oom": true;
CUDA asked for and absent; any other error), with "error" saying why.
Without CUDA (--device auto) it runs on the CPU, for tests at tiny shapes.
"""
import argparse
import inspect
import json
import math
import statistics
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


def flops_per_token(layers, d, T, V):
    """SCIENCE.md's training FLOPs per token (runcfg/flops.c)."""
    return 6.0 * (12.0 * layers * d * d + d * V) + 6.0 * layers * T * d


def peak_flops_of(name):
    """Peak dense bf16 FLOP/s of the GPUs this benchmark knows (SXM figures)."""
    if "H100" in name or "H200" in name:
        return 989e12
    if "A100" in name:
        return 312e12
    return None


class Attention(nn.Module):
    def __init__(self, d, heads, T):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        if not HAVE_SDPA:  # torch < 2.0: an explicit causal mask
            mask = torch.ones(T, T, dtype=torch.bool).tril()
            self.register_buffer("mask", mask.view(1, 1, T, T), persistent=False)

    def forward(self, x):
        B, T, d = x.shape
        hd = d // self.heads
        q, k, v = self.qkv(x).split(d, 2)
        # (B, heads, T, hd) each
        q = q.view(B, T, self.heads, hd).transpose(1, 2)
        k = k.view(B, T, self.heads, hd).transpose(1, 2)
        v = v.view(B, T, self.heads, hd).transpose(1, 2)
        if HAVE_SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, d))


class Block(nn.Module):
    def __init__(self, d, heads, T):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads, T)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fcproj = nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, d, heads, T, V):
        super().__init__()
        self.wte = nn.Embedding(V, d)
        self.wpe = nn.Embedding(T, d)
        self.blocks = nn.ModuleList(Block(d, heads, T) for _ in range(layers))
        self.lnf = nn.LayerNorm(d)
        # GPT-2's initialisation, as the trainer's: N(0, 0.02), the residual
        # projections N(0, 0.02 / sqrt(2L)), biases 0, LayerNorm gains 1
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif ".ln" in name or name.startswith("lnf"):
                nn.init.ones_(p)
            elif name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = F.linear(self.lnf(x), self.wte.weight)  # the tied head
        return F.cross_entropy(logits.view(B * T, -1).float(), targets.view(B * T))


def make_optimizer(model, device):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    kw = dict(lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    fused = device.type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters
    if fused:
        kw["fused"] = True
    return torch.optim.AdamW(groups, **kw), fused


def is_oom(e):
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(e, oom)) or "out of memory" in str(e).lower()


def first_line(e):
    """The exception's type and the first line of its innermost cause's message
    (torch.compile wraps the compiler's error: "backend='inductor' raised:")."""
    root = e
    while root.__cause__ is not None and root.__cause__ is not root:
        root = root.__cause__
    msg = [line for line in str(root).strip().splitlines() if line.strip()]
    what = type(e).__name__ if root is e else "%s from %s" % (type(e).__name__, type(root).__name__)
    return ("%s: %s" % (what, msg[0] if msg else ""))[:300]


def run(a, out):
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("CUDA is not available to this PyTorch (%s)" % torch.__version__)
    dev = torch.device("cuda" if a.device != "cpu" and torch.cuda.is_available() else "cpu")
    cuda = dev.type == "cuda"
    out["device"] = dev.type
    out["device_name"] = torch.cuda.get_device_name(dev) if cuda else "cpu"
    peak = a.peak_flops if a.peak_flops else peak_flops_of(out["device_name"]) if cuda else None
    fpt = a.flops_per_token or flops_per_token(a.layers, a.d_model, a.seq_len, a.vocab)
    out.update(flops_per_token=fpt, peak_flops=peak,
               flops_per_token_from="argument" if a.flops_per_token else "formula")
    # TF32 is left as it is: under bf16 autocast every product is bf16, and
    # PyTorch >= 2.9 refuses a mix of its legacy and new TF32 switches
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)

    torch.manual_seed(a.seed)
    if hasattr(torch.device, "__enter__"):  # torch >= 2.0: initialised where it lives
        with dev:
            model = GPT(a.layers, a.d_model, a.heads, a.seq_len, a.vocab)
    else:
        model = GPT(a.layers, a.d_model, a.heads, a.seq_len, a.vocab).to(dev)
    out["params"] = sum(p.numel() for p in model.parameters())
    opt, out["fused_adamw"] = make_optimizer(model, dev)
    gen = torch.Generator(device="cpu").manual_seed(a.seed)
    shape = (a.micro_batch, a.seq_len)
    x = torch.randint(0, a.vocab, shape, generator=gen).to(dev)
    y = torch.randint(0, a.vocab, shape, generator=gen).to(dev)

    fwd = model
    if a.mode == "compile":
        if not hasattr(torch, "compile"):
            out["compile"] = "unavailable: PyTorch %s has no torch.compile" % torch.__version__
            return 0
        try:
            fwd = torch.compile(model)
        except Exception as e:  # noqa: BLE001 -- reported, not raised
            out["compile"] = "unavailable: " + first_line(e)
            return 0

    def step():
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    t = time.perf_counter()
    try:
        loss = step()  # the first step compiles (compile mode)
        sync()
    except Exception as e:  # noqa: BLE001
        if a.mode != "compile" or is_oom(e):
            raise
        out["compile"] = "unavailable: " + first_line(e)
        traceback.print_exc(file=sys.stderr)
        return 0
    out["first_step_s"] = time.perf_counter() - t
    if a.mode == "compile":
        out["compile"] = "ok"
    for _ in range(a.warmup - 1):
        step()
    sync()

    times = []
    t = time.perf_counter()
    if cuda:
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(a.steps)]
        for s, e in ev:
            s.record()
            loss = step()
            e.record()
        sync()
        times = [s.elapsed_time(e) / 1e3 for s, e in ev]
    else:
        for _ in range(a.steps):
            t1 = time.perf_counter()
            loss = step()
            times.append(time.perf_counter() - t1)
    window = time.perf_counter() - t

    tokens = a.micro_batch * a.seq_len
    med = statistics.median(times)
    out.update(
        steps=a.steps, warmup=a.warmup, step_s_median=med, step_s_min=min(times),
        step_s_max=max(times), tok_per_s=tokens / med, tok_per_s_window=tokens * a.steps / window,
        mfu=tokens / med * fpt / peak if peak else None, last_loss=float(loss))
    if cuda:
        out["peak_memory_bytes"] = torch.cuda.max_memory_allocated(dev)
        out["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(dev)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--d-model", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--micro-batch", type=int, required=True)
    ap.add_argument("--steps", type=int, default=20, help="timed steps, after the warm-up")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (>= 1)")
    ap.add_argument("--flops-per-token", type=float, default=None,
                    help="scalesweep's figure for the shape (its config event)")
    ap.add_argument("--peak-flops", type=float, default=None,
                    help="the device's peak dense bf16 FLOP/s (default: by its name)")
    ap.add_argument("--mode", choices=("eager", "compile"), default="eager")
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                    help="cuda: fail rather than fall back to the CPU")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true",
                    help="one JSON line on stdout (the only output format; kept for callers)")
    a = ap.parse_args()
    if a.d_model % a.heads or a.steps < 1 or a.warmup < 1:
        ap.error("d-model must be a multiple of heads; steps and warmup >= 1")

    out = {"impl": "torch", "mode": a.mode, "torch": torch.__version__,
           "layers": a.layers, "d_model": a.d_model, "heads": a.heads, "seq_len": a.seq_len,
           "vocab": a.vocab, "micro_batch": a.micro_batch, "precision": "bf16",
           "attention": "sdpa" if HAVE_SDPA else "masked softmax"}
    if a.mode == "eager":
        out["compile"] = "n/a"
    rc = 0
    try:
        rc = run(a, out)
    except SystemExit as e:
        out["error"] = str(e)
        rc = 1
    except Exception as e:  # noqa: BLE001 -- every failure becomes the JSON line's error
        traceback.print_exc(file=sys.stderr)
        out["oom"] = is_oom(e)
        out["error"] = ("out of memory: " if out["oom"] else "") + first_line(e)
        rc = 1
    print(json.dumps(out), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())

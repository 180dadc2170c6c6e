#!/usr/bin/python3
"""The torch trainer's model families and muP against their definitions,
without the built-in: trainers/torch/ssmodel.py's forward and its factors
checked against a plain float64 numpy transcription of the formulas
(docs/models.md, trainer/model.h, trainer/mup.h), written loop by loop
and independently of ssmodel's tensor code.

Checks, for gpt2 sp, gpt2 mup, llama sp (untied), llama with qk_norm and
tie_embeddings, llama mup:
- the tensors' shapes and which exist (size 0 where a family lacks one),
  the parameter counts against runcfg/flops.c's formulas;
- the initial weights: gains 1, biases 0, the drawn tensors' standard
  deviations (muP's hidden matrices / sqrt(m)), and zero-sized tensors draw
  nothing (a gpt2 model's draws are a prefix-for-prefix match of a model
  whose absent tensors were never listed);
- the logits of random weights (not the init: gains and biases random too)
  to 2e-5 relative to the largest logit (float32 against float64);
- the optimizer's per-tensor rates: one SSAdamW step moves the hidden
  matrices at lr / m under muP;
- sscfg: the new keys' canonical text (rcfg_to_json's) and refusals.
Usage: test_families.py [SCALESWEEP_BINARY] (the binary is not used)
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sstest as t  # noqa: E402

BASE = {"n_layer": 2, "d_model": 64, "n_head": 4, "seq_len": 16, "vocab_size": 50}
LLAMA = {"family": "llama", "rope_theta": 10000.0, "mlp_ratio": 8.0 / 3.0, "mlp_multiple_of": 32,
         "tie_embeddings": False, "qk_norm": False}
CASES = [
    ("gpt2 sp", {}),
    ("gpt2 mup", {"parametrization": "mup", "base_width": 16}),
    ("llama sp", dict(LLAMA)),
    ("llama qk_norm tied", dict(LLAMA, qk_norm=True, tie_embeddings=True, rope_theta=500.0)),
    ("llama mup", dict(LLAMA, parametrization="mup", base_width=32, mlp_ratio=3.0,
                       mlp_multiple_of=16)),
]
LOGIT_TOL = 2e-5


# ---- the definitions, in float64 numpy, one position and one head at a time ----

def ref_forward(W, s, idx):
    import numpy as np
    L, C, NH, V = s["n_layer"], s["d_model"], s["n_head"], s["vocab_size"]
    hs = C // NH
    llama = s.get("family") == "llama"
    mup = s.get("parametrization") == "mup"
    m = C / s["base_width"] if mup else 1.0
    qscale = 1.0 / math.sqrt(hs) if mup else 1.0
    out_mult = 1.0 / m
    B, T = idx.shape
    w = {k: np.asarray(v, dtype=np.float64) for k, v in W.items()}

    def layernorm(x, g, b):
        mu = x.mean()
        var = ((x - mu) ** 2).mean()
        return (x - mu) / math.sqrt(var + 1e-5) * g + b

    def rms(x, g):
        return x / math.sqrt((x * x).mean() + 1e-5) * g

    def gelu(x):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))

    def rot(vec, pos):
        out = vec.copy()
        h = hs // 2
        for i in range(h):
            ang = pos * s["rope_theta"] ** (-2.0 * i / hs)
            c, sn = math.cos(ang), math.sin(ang)
            out[i] = vec[i] * c - vec[i + h] * sn
            out[i + h] = vec[i + h] * c + vec[i] * sn
        return out

    logits = np.zeros((B, T, V))
    for b in range(B):
        x = np.array([w["wte"][idx[b, p]] + (0.0 if llama else w["wpe"][p]) for p in range(T)])
        for l in range(L):
            if llama:
                h = np.array([rms(x[p], w["ln1w"][l]) for p in range(T)])
                qkv = h @ w["qkvw"][l].T
            else:
                h = np.array([layernorm(x[p], w["ln1w"][l], w["ln1b"][l]) for p in range(T)])
                qkv = h @ w["qkvw"][l].T + w["qkvb"][l]
            y = np.zeros((T, C))
            for hd in range(NH):
                sl = slice(hd * hs, (hd + 1) * hs)
                q = qkv[:, 0 * C:1 * C][:, sl].copy()
                k = qkv[:, 1 * C:2 * C][:, sl].copy()
                v = qkv[:, 2 * C:3 * C][:, sl].copy()
                if llama:
                    for p in range(T):
                        if s["qk_norm"]:
                            q[p] = rms(q[p], w["qnw"][l])
                            k[p] = rms(k[p], w["knw"][l])
                        q[p], k[p] = rot(q[p], p), rot(k[p], p)
                q = q * qscale
                for p in range(T):
                    sc = np.array([q[p] @ k[j] / math.sqrt(hs) for j in range(p + 1)])
                    e = np.exp(sc - sc.max())
                    y[p, sl] = (e / e.sum()) @ v[:p + 1]
            if llama:
                x = x + y @ w["attprojw"][l].T
                h = np.array([rms(x[p], w["ln2w"][l]) for p in range(T)])
                gu = h @ w["fcw"][l].T
                Fh = gu.shape[1] // 2
                g, u = gu[:, :Fh], gu[:, Fh:]
                a = g / (1.0 + np.exp(-g)) * u
                x = x + a @ w["fcprojw"][l].T
            else:
                x = x + y @ w["attprojw"][l].T + w["attprojb"][l]
                h = np.array([layernorm(x[p], w["ln2w"][l], w["ln2b"][l]) for p in range(T)])
                a = gelu(h @ w["fcw"][l].T + w["fcb"][l])
                x = x + a @ w["fcprojw"][l].T + w["fcprojb"][l]
        if llama:
            h = np.array([rms(x[p], w["lnfw"]) for p in range(T)])
        else:
            h = np.array([layernorm(x[p], w["lnfw"], w["lnfb"]) for p in range(T)])
        h = h * out_mult
        head = w["head"] if llama and not s["tie_embeddings"] else w["wte"]
        logits[b] = h @ head.T
    return logits


def expected_dims(s):
    """trainer/model.h's shapes, written out per family."""
    L, C, NH, T, V = s["n_layer"], s["d_model"], s["n_head"], s["seq_len"], s["vocab_size"]
    if s.get("family") != "llama":
        return {"wte": (V, C), "wpe": (T, C), "ln1w": (L, C), "ln1b": (L, C),
                "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C), "attprojw": (L, C, C),
                "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C), "fcw": (L, 4 * C, C),
                "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C), "lnfw": (C,),
                "lnfb": (C,)}
    mo = s["mlp_multiple_of"]
    Fh = mo * math.ceil(s["mlp_ratio"] * C / mo - 1e-9)
    d = {"wte": (V, C), "ln1w": (L, C), "qkvw": (L, 3 * C, C), "attprojw": (L, C, C),
         "ln2w": (L, C), "fcw": (L, 2 * Fh, C), "fcprojw": (L, C, Fh), "lnfw": (C,)}
    if s["qk_norm"]:
        d["qnw"] = d["knw"] = (L, C // NH)
    if not s["tie_embeddings"]:
        d["head"] = (V, C)
    return d


def check_case(name, s):
    import numpy as np
    import torch
    import ssmodel
    import ssoptim
    import train
    sh = ssmodel.full_shape(s)
    llama = s.get("family") == "llama"
    m = s["d_model"] / s["base_width"] if s.get("parametrization") == "mup" else 1.0

    # shapes and counts
    want = expected_dims(s)
    got = {n: ssmodel.tensor_dims(n, sh) for n in ssmodel.names(sh)}
    t.check(got == want, "%s: tensors %r, expected %r" % (name, got, want))
    nonemb, total, _ = train.counts(dict(sh))
    n_all = sum(int(np.prod(d)) for d in want.values())
    emb = s["vocab_size"] * s["d_model"] * (2 if llama and not s["tie_embeddings"] else 1) + \
        (0 if llama else s["seq_len"] * s["d_model"])
    t.check(total == n_all and nonemb == n_all - emb,
            "%s: counts %d / %d, the tensors hold %d (%d embedding)" % (name, total, nonemb,
                                                                       n_all, emb))

    # the initial weights
    W = ssmodel.init_weights(s, 1234)
    t.check(sorted(W) == sorted(ssmodel.NAMES), "%s: init_weights' tensors" % name)
    for n in ssmodel.NAMES:
        t.check(W[n].shape == tuple(ssmodel.tensor_dims(n, sh)), "%s: init %s shape" % (name, n))
    resid = 0.02 / math.sqrt(2.0 * s["n_layer"])
    for n in want:
        a = W[n].astype(np.float64)
        if n in ("ln1w", "ln2w", "lnfw", "qnw", "knw"):
            t.check((a == 1).all(), "%s: init %s not all 1" % (name, n))
        elif n.endswith("b"):
            t.check((a == 0).all(), "%s: init %s not all 0" % (name, n))
        else:
            std = (resid if n in ("attprojw", "fcprojw") else 0.02)
            if n in ("qkvw", "attprojw", "fcw", "fcprojw"):
                std /= math.sqrt(m)
            r = a.std() / std
            t.check(abs(r - 1) < 0.08 and abs(a.mean()) < 0.1 * std,
                    "%s: init %s std %.4g, expected %.4g" % (name, n, a.std(), std))
    # zero-sized tensors draw nothing: the draws in order are those of the
    # present tensors alone, whatever else the list holds
    import ssrng
    rng = ssrng.Xoshiro(1234)
    for n in ssmodel.names(sh):
        if ssmodel.DECAY[n]:
            std = (resid if n in ("attprojw", "fcprojw") else 0.02) * ssmodel.init_scale(sh, n)
            ref = ssrng.normals_f32(rng, W[n].size, std)
            t.check((ref == W[n].reshape(-1)).all(), "%s: init %s's draws" % (name, n))

    # the forward, with every tensor random (gains and biases included)
    g = torch.Generator().manual_seed(7)
    model = ssmodel.GPT(sh)
    R = {}
    for n in ssmodel.names(sh):
        R[n] = (torch.randn(ssmodel.tensor_dims(n, sh), generator=g) *
                (0.3 if n in ("ln1w", "ln2w", "lnfw", "qnw", "knw") else 0.15))
        if n in ("ln1w", "ln2w", "lnfw", "qnw", "knw"):
            R[n] += 1.0
    model.load_weights({n: R[n].numpy() for n in R})
    idx = torch.randint(0, s["vocab_size"], (2, s["seq_len"]), generator=g)
    with torch.no_grad():
        mine = model(idx).double().numpy()
    ref = ref_forward({n: R[n].numpy() for n in R}, s, idx.numpy())
    err = np.abs(mine - ref).max() / np.abs(ref).max()
    t.check(err <= LOGIT_TOL, "%s: logits differ by %.3g relative (> %g)" % (name, err, LOGIT_TOL))

    # the optimizer: one step from zero moments moves each weight by lr x
    # its rate (Adam's first step is sign(g) up to eps), no weight decay
    params = model.tensors()
    groups, at = [], {}
    for n, p in zip(model.names, params):
        key = ssmodel.lr_scale(sh, n)
        if key not in at:
            at[key] = len(groups)
            groups.append(dict(params=[], lr_scale=key))
        groups[at[key]]["params"].append(p)
    opt = ssoptim.SSAdamW(groups, eps=1e-30)
    loss = model(idx).float().logsumexp(-1).mean()
    loss.backward()
    before = {n: p.detach().clone() for n, p in zip(model.names, params)}
    opt.step(lr=1e-3, grad_scale=1.0, opt_step=1)
    for n, p in zip(model.names, params):
        moved = (p.detach() - before[n]).abs()
        moved = moved[p.grad.abs() > 1e-12]
        rate = 1e-3 / m if n in ("qkvw", "attprojw", "fcw", "fcprojw") else 1e-3
        if moved.numel():
            t.check(abs(float(moved.max()) / rate - 1) < 1e-3 and
                    abs(float(moved.min()) / rate - 1) < 1e-3,
                    "%s: %s moved %.4g, expected lr x rate %.4g" % (name, n,
                                                                   float(moved.max()), rate))
    print("%s: %d tensors, %d params; logits within %.2g of the float64 definition"
          % (name, len(want), total, err))


# a resolved config as `scalesweep train --print-config` prints it
RESOLVED = {"model": {"n_layer": 2, "d_model": 64, "n_head": 4, "seq_len": 32, "vocab_size": 27},
            "data": {"synthetic": {"letters": 26, "words": 4096, "min_len": 2, "max_len": 8,
                                   "zipf": 1.2, "seed": 1}},
            "train": {"batch_size": 8, "micro_batch_size": 4, "tokens": 2560, "lr": 0.001,
                      "warmup_tokens": 128, "schedule": "cosine", "min_lr_ratio": 0.1,
                      "weight_decay": 0.1, "grad_clip": 1, "seed": 1},
            "optimizer": {"name": "adamw", "beta1": 0.9, "beta2": 0.95, "eps": 1e-08},
            "precision": "fp32", "memory": {"recompute": False},
            "eval": {"every_tokens": 256, "tokens": 2048},
            "checkpoint": {"dir": "", "every_tokens": 0}, "backend": "cpu", "world_size": 1,
            "threads": 1}
LLAMA_TEXT = ('"family":"llama","rope_theta":10000,"mlp_ratio":2.6666666666666665,'
              '"mlp_multiple_of":32,"tie_embeddings":false,"qk_norm":true,'
              '"parametrization":"mup","base_width":16}')


def check_config():
    """sscfg: the keys' canonical text (rcfg_to_json's order and numbers)
    and runcfg.c's refusals, each naming its key."""
    import copy
    import json
    import sscfg
    c = sscfg.parse(RESOLVED)
    t.check(c.family == "gpt2" and c.parametrization == "sp", "gpt2 sp by default")
    t.check('"vocab_size":27},' in sscfg.canonical_json(c), "gpt2 sp's model text changed")
    explicit = copy.deepcopy(RESOLVED)
    explicit["model"].update(family="gpt2", parametrization="sp")
    t.check(sscfg.config_hash(sscfg.parse(explicit)) == sscfg.config_hash(c),
            "explicit gpt2 / sp changed the hash")
    r = copy.deepcopy(RESOLVED)
    r["model"].update(json.loads("{" + LLAMA_TEXT))
    text = sscfg.canonical_json(sscfg.parse(r))
    t.check('"vocab_size":27,' + LLAMA_TEXT in text, "llama mup's canonical text: %s" % text)
    sh = sscfg.model_shape(sscfg.parse(r))
    t.check(sh["family"] == "llama" and sh["qk_norm"] is True and sh["base_width"] == 16,
            "model_shape: %r" % sh)

    def refused(model, want):
        bad = copy.deepcopy(RESOLVED)
        bad["model"].update(model)
        try:
            sscfg.parse(bad)
        except sscfg.ConfigError as e:
            t.check(all(w in str(e) for w in want), "refusal %r: %s" % (model, e))
            return
        t.check(False, "not refused: %r" % model)
    llama = json.loads("{" + LLAMA_TEXT)
    refused({"family": "gpt3"}, ["$.model.family", "gpt3"])
    refused({"parametrization": "mup"}, ["$.model.base_width: missing"])
    refused({"base_width": 16}, ["$.model.base_width", "only with"])
    refused({"qk_norm": True}, ["$.model.qk_norm", "only with", "llama"])
    refused({k: v for k, v in llama.items() if k != "rope_theta"},
            ["$.model.rope_theta: missing"])
    refused(dict(llama, n_head=64), ["$.model.n_head", "even head size"])
    refused(dict(llama, mlp_ratio=100), ["$.model.mlp_ratio", "from 0.125 to 64"])
    refused(dict(llama, tie_embeddings=1), ["$.model.tie_embeddings", "true or false"])
    print("config: canonical text and refusals")


def main():
    t.need_torch()
    sys.path.insert(0, os.path.join(t.REPO, "trainers", "torch"))
    import ssmodel
    import torch
    torch.set_num_threads(1)
    check_config()
    for name, extra in CASES:
        check_case(name, dict(BASE, **extra))
    # the factors' values (trainer/mup.c)
    s = ssmodel.full_shape(dict(BASE, parametrization="mup", base_width=16))
    t.check(ssmodel.width_mult(s) == 4.0 and ssmodel.lr_scale(s, "fcw") == 0.25 and
            ssmodel.lr_scale(s, "wte") == 1.0 and ssmodel.out_mult(s) == 0.25 and
            ssmodel.attn_qscale(s) == 0.25 and ssmodel.init_scale(s, "qkvw") == 0.5,
            "muP's factors at m = 4, hs = 16")
    sp = ssmodel.full_shape(BASE)
    t.check(ssmodel.attn_qscale(sp) == 1.0 and ssmodel.out_mult(sp) == 1.0, "sp's factors")
    print("ok")


if __name__ == "__main__":
    main()

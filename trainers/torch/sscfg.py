"""The run config as the torch trainer takes it: fully resolved (every key
present, as `scalesweep train --config partial.json --print-config` prints
it). Nothing here fills a default: a missing key is an error naming its JSON
path, and so is an unknown key or a value out of runcfg/runcfg.c's ranges.

canonical_json() prints the config as runcfg/runcfg.c rcfg_to_json does
(key order, cJSON's number format), for config_hash and for comparing the
configs of checkpoints.
"""
import hashlib
import json
import math
import re

RESOLVE_HINT = "resolve a partial config with scalesweep train --print-config"


class ConfigError(Exception):
    pass


def _num_text(v):
    """cJSON's print_number."""
    if isinstance(v, bool):
        return "true" if v else "false"
    d = float(v)
    if math.isnan(d) or math.isinf(d):
        return "null"
    vi = 2147483647 if d >= 2147483647 else -2147483648 if d <= -2147483648 else int(d)
    if d == float(vi):
        return "%d" % vi
    s = "%1.15g" % d
    t = float(s)
    if not abs(t - d) <= max(abs(t), abs(d)) * 2.220446049250313e-16:
        s = "%1.17g" % d
    return s


def _dump(o):
    if isinstance(o, dict):
        return "{" + ",".join(json.dumps(k) + ":" + _dump(v) for k, v in o.items()) + "}"
    if isinstance(o, bool):
        return "true" if o else "false"
    if isinstance(o, (int, float)):
        return _num_text(o)
    if isinstance(o, str):
        return json.dumps(o, ensure_ascii=False)
    raise TypeError(type(o))


class Checker:
    def __init__(self):
        self.problems = []

    def fail(self, path, msg):
        self.problems.append("%s: %s" % (path, msg))

    def keys(self, obj, path, allowed, required):
        for k in obj:
            if k not in allowed:
                self.fail("%s.%s" % (path, k), "unknown key; expected one of: %s"
                          % ", ".join(allowed))
        for k in required:
            if k not in obj:
                self.fail("%s.%s" % (path, k), "missing; " + RESOLVE_HINT)

    def section(self, root, key):
        path = "$." + key
        if key not in root:
            self.fail(path, "missing; " + RESOLVE_HINT)
            return None
        v = root[key]
        if not isinstance(v, dict):
            self.fail(path, "expected an object, found %s" % _shown(v))
            return None
        return v

    def num(self, obj, path, key, lo, hi, rng):
        if obj is None or key not in obj:
            return None
        v = obj[key]
        full = "%s.%s" % (path, key)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.fail(full, "expected a number %s, found %s" % (rng, _shown(v)))
            return None
        if not (lo <= v <= hi):
            self.fail(full, "found %r, expected a number %s" % (v, rng))
            return None
        return float(v)

    def int(self, obj, path, key, lo, hi):
        if obj is None or key not in obj:
            return None
        v = obj[key]
        full = "%s.%s" % (path, key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or \
                (isinstance(v, float) and (not math.isfinite(v) or v != math.floor(v))):
            self.fail(full, "expected an integer from %d to %d, found %s" % (lo, hi, _shown(v)))
            return None
        if not lo <= v <= hi:
            self.fail(full, "found %r, expected an integer from %d to %d" % (v, lo, hi))
            return None
        return int(v)

    def str(self, obj, path, key, choices=None, maxlen=1023):
        if obj is None or key not in obj:
            return None
        v = obj[key]
        full = "%s.%s" % (path, key)
        allowed = ", ".join('"%s"' % c for c in choices) if choices else ""
        if not isinstance(v, str):
            self.fail(full, "expected a string%s, found %s"
                      % (" among " + allowed if choices else "", _shown(v)))
            return None
        if len(v.encode()) > maxlen:
            self.fail(full, "string too long (%d bytes, at most %d)" % (len(v.encode()), maxlen))
            return None
        if choices and v not in choices:
            self.fail(full, 'found "%s", expected one of %s' % (v, allowed))
            return None
        return v

    def bool(self, obj, path, key):
        if obj is None or key not in obj:
            return None
        v = obj[key]
        if not isinstance(v, bool):
            self.fail("%s.%s" % (path, key), "expected true or false, found %s" % _shown(v))
            return None
        return v


def _shown(v):
    s = json.dumps(v)
    return s if len(s) <= 40 else s[:37] + "..."


# model keys of the llama family only (runcfg.c llama_keys), in canonical order
LLAMA_KEYS = ("rope_theta", "mlp_ratio", "mlp_multiple_of", "tie_embeddings", "qk_norm")


def parse_family(ck, model, c):
    """model.family and model.parametrization (runcfg.c parse_model). In a
    resolved config gpt2 and sp are the keys' absence (rcfg_to_json leaves
    them out), so absent means gpt2 / sp; a llama model's own keys and a
    muP model's base_width must be present, as the resolver prints them."""
    m = "$.model"
    c.family = "gpt2"
    c.parametrization = "sp"
    if model is not None and "family" in model:
        c.family = ck.str(model, m, "family", ["gpt2", "llama"]) or "gpt2"
    if model is not None and "parametrization" in model:
        c.parametrization = ck.str(model, m, "parametrization", ["sp", "mup"]) or "sp"
    c.base_width = 0
    if c.parametrization == "mup":
        if model is not None and "base_width" not in model:
            ck.fail(m + ".base_width", 'missing; parametrization "mup" needs the d_model of the '
                    'proxy its learning rate was tuned at (docs/models.md, "muP")')
        c.base_width = ck.int(model, m, "base_width", 1, 1 << 16) or 0
    elif model is not None and "base_width" in model:
        ck.fail(m + ".base_width", 'only with "parametrization": "mup" (found "%s")'
                % c.parametrization)
    c.rope_theta = c.mlp_ratio = 0.0
    c.mlp_multiple_of = 0
    c.tie_embeddings = c.qk_norm = False
    if c.family == "llama":
        if model is not None:
            for k in LLAMA_KEYS:
                if k not in model:
                    ck.fail("%s.%s" % (m, k), "missing; " + RESOLVE_HINT)
        c.rope_theta = ck.num(model, m, "rope_theta", 1.0, 1e12, "from 1 to 1e12")
        c.mlp_ratio = ck.num(model, m, "mlp_ratio", 0.125, 64.0, "from 0.125 to 64")
        c.mlp_multiple_of = ck.int(model, m, "mlp_multiple_of", 1, 4096)
        c.tie_embeddings = ck.bool(model, m, "tie_embeddings")
        c.qk_norm = ck.bool(model, m, "qk_norm")
        if c.d_model and c.n_head and (c.d_model // c.n_head) % 2:
            ck.fail(m + ".n_head", "found %d, expected a head count that leaves an even head "
                    "size (d_model / n_head = %d): rotary embeddings turn channel pairs"
                    % (c.n_head, c.d_model // c.n_head))
    elif model is not None:
        for k in LLAMA_KEYS:
            if k in model:
                ck.fail("%s.%s" % (m, k), 'only with "family": "llama" (found "%s")' % c.family)


def model_shape(c):
    """The model's shape (runcfg/flops.h rcfg_shape) as ssmodel takes it:
    the canonical model section's keys, with gpt2's and sp's filled in."""
    return shape_of(canonical(c)["model"])


def shape_of(model):
    """A canonical model section (a resolved config's "model") as a full
    shape dict: absent family / parametrization keys are gpt2 / sp."""
    s = {k: model[k] for k in ("n_layer", "d_model", "n_head", "seq_len", "vocab_size")}
    s["family"] = model.get("family", "gpt2")
    s["parametrization"] = model.get("parametrization", "sp")
    s["base_width"] = model.get("base_width", 0)
    llama = s["family"] == "llama"
    s["rope_theta"] = model["rope_theta"] if llama else 0.0
    s["mlp_ratio"] = model["mlp_ratio"] if llama else 0.0
    s["mlp_multiple_of"] = model["mlp_multiple_of"] if llama else 0
    s["tie_embeddings"] = bool(model["tie_embeddings"]) if llama else True
    s["qk_norm"] = bool(model["qk_norm"]) if llama else False
    return s


class Config:
    """The resolved config's values (attribute access mirrors rcfg)."""

    def __init__(self, raw):
        self.raw = raw


def parse(raw):
    """Validates a resolved run config (a dict from JSON). Returns a Config,
    or raises ConfigError with every problem, one per line."""
    ck = Checker()
    if not isinstance(raw, dict):
        raise ConfigError("$: expected a JSON object, found %s" % _shown(raw))
    top = ["model", "data", "train", "optimizer", "precision", "memory", "eval", "checkpoint",
           "backend", "world_size", "threads", "tf32", "trainer", "reproducible"]
    ck.keys(raw, "$", top, [])
    c = Config(raw)
    model = ck.section(raw, "model")
    data = ck.section(raw, "data")
    train = ck.section(raw, "train")
    opt = ck.section(raw, "optimizer")
    mem = ck.section(raw, "memory")
    ev = ck.section(raw, "eval")
    ckpt = ck.section(raw, "checkpoint")

    # data
    c.synthetic = None
    c.data_train = c.data_val = None
    if data is not None:
        if "train" in data or "val" in data:
            ck.keys(data, "$.data", ["train", "val", "synthetic"], ["train", "val"])
            if "synthetic" in data:
                ck.fail("$.data", 'give either "synthetic" or "train"/"val" shards, not both')
            c.data_train = ck.str(data, "$.data", "train")
            c.data_val = ck.str(data, "$.data", "val")
        else:
            ck.keys(data, "$.data", ["train", "val", "synthetic"], ["synthetic"])
            syn = data.get("synthetic")
            if syn is not None and not isinstance(syn, dict):
                ck.fail("$.data.synthetic", "expected an object, found %s" % _shown(syn))
            elif syn is not None:
                at = "$.data.synthetic"
                keys = ["letters", "words", "min_len", "max_len", "zipf", "seed"]
                ck.keys(syn, at, keys, keys)
                c.synthetic = {
                    "letters": ck.int(syn, at, "letters", 1, 255),
                    "words": ck.int(syn, at, "words", 1, 10000000),
                    "min_len": ck.int(syn, at, "min_len", 1, 64),
                    "max_len": ck.int(syn, at, "max_len", 1, 64),
                    "zipf": ck.num(syn, at, "zipf", 1e-6, 100.0, "in (0, 100]"),
                    "seed": ck.int(syn, at, "seed", 0, 1 << 53),
                }
                s = c.synthetic
                if None not in (s["min_len"], s["max_len"]) and s["min_len"] > s["max_len"]:
                    ck.fail("$.data.synthetic.min_len", "found %d, expected <= max_len (%d)"
                            % (s["min_len"], s["max_len"]))

    # model
    if model is not None:
        keys = ["n_layer", "d_model", "n_head", "seq_len", "vocab_size"]
        ck.keys(model, "$.model", keys + ["family", "parametrization", "base_width"]
                + list(LLAMA_KEYS), keys)
    c.n_layer = ck.int(model, "$.model", "n_layer", 1, 1024)
    c.d_model = ck.int(model, "$.model", "d_model", 1, 1 << 16)
    c.n_head = ck.int(model, "$.model", "n_head", 1, 1024)
    c.seq_len = ck.int(model, "$.model", "seq_len", 2, 1 << 16)
    c.vocab_size = ck.int(model, "$.model", "vocab_size", 2, 65536)
    if c.d_model and c.n_head and c.d_model % c.n_head:
        ck.fail("$.model.d_model", "found %d, expected a multiple of n_head (%d)"
                % (c.d_model, c.n_head))
    if c.synthetic and c.synthetic["letters"] and c.vocab_size and \
            c.vocab_size < c.synthetic["letters"] + 1:
        ck.fail("$.model.vocab_size", "found %d, expected at least letters + 1 = %d for the "
                "synthetic corpus" % (c.vocab_size, c.synthetic["letters"] + 1))
    parse_family(ck, model, c)

    # train
    tkeys = ["batch_size", "micro_batch_size", "tokens", "lr", "warmup_tokens", "schedule",
             "min_lr_ratio", "weight_decay", "grad_clip", "seed", "decay_frac"]
    if train is not None:
        sched = train.get("schedule")
        ck.keys(train, "$.train", tkeys,
                [k for k in tkeys if k != "decay_frac" or sched == "wsd"])
    t = "$.train"
    c.batch_size = ck.int(train, t, "batch_size", 1, 1 << 20)
    c.micro_batch_size = ck.int(train, t, "micro_batch_size", 1, 1 << 20)
    c.tokens = ck.int(train, t, "tokens", 1, 1 << 53)
    c.lr = ck.num(train, t, "lr", 1e-12, 10.0, "in (0, 10]")
    c.warmup_tokens = ck.num(train, t, "warmup_tokens", 0.0, 1e18, ">= 0")
    c.schedule = ck.str(train, t, "schedule", ["cosine", "constant", "wsd"])
    c.min_lr_ratio = ck.num(train, t, "min_lr_ratio", 0.0, 1.0, "in [0, 1]")
    c.decay_frac = 0.0
    if c.schedule == "wsd":
        c.decay_frac = ck.num(train, t, "decay_frac", 1e-9, 1.0, "in (0, 1]")
    elif train is not None and "decay_frac" in train and c.schedule:
        ck.fail("$.train.decay_frac", 'found a decay fraction with schedule "%s", expected it '
                'only with "wsd"' % c.schedule)
    c.weight_decay = ck.num(train, t, "weight_decay", 0.0, 10.0, "in [0, 10]")
    c.grad_clip = ck.num(train, t, "grad_clip", 0.0, 1e9, ">= 0 (0 turns clipping off)")
    c.seed = ck.int(train, t, "seed", 0, 1 << 53)
    if c.batch_size and c.micro_batch_size and c.batch_size % c.micro_batch_size:
        ck.fail("$.train.micro_batch_size", "found %d, expected a divisor of batch_size (%d)"
                % (c.micro_batch_size, c.batch_size))
    if c.batch_size and c.seq_len and c.tokens and c.tokens < c.batch_size * c.seq_len:
        ck.fail("$.train.tokens", "found %d, expected at least one batch: batch_size x seq_len "
                "= %d" % (c.tokens, c.batch_size * c.seq_len))

    # optimizer
    if opt is not None:
        ck.keys(opt, "$.optimizer", ["name", "beta1", "beta2", "eps", "zero"],
                ["name", "beta1", "beta2", "eps"])
    o = "$.optimizer"
    c.optimizer = ck.str(opt, o, "name", ["adamw", "adamw8bit"])
    c.beta1 = ck.num(opt, o, "beta1", 0.0, 0.999999, "in [0, 1)")
    c.beta2 = ck.num(opt, o, "beta2", 0.0, 0.999999, "in [0, 1)")
    c.eps = ck.num(opt, o, "eps", 1e-30, 1.0, "in (0, 1]")
    c.zero = 0
    if opt is not None and "zero" in opt:
        c.zero = ck.int(opt, o, "zero", 0, 1) or 0

    if "precision" not in raw:
        ck.fail("$.precision", "missing; " + RESOLVE_HINT)
    c.precision = ck.str(raw, "$", "precision", ["fp32", "bf16", "fp16"])

    if mem is not None:
        ck.keys(mem, "$.memory", ["recompute"], ["recompute"])
    c.recompute = ck.bool(mem, "$.memory", "recompute")
    if ev is not None:
        ck.keys(ev, "$.eval", ["every_tokens", "tokens"], ["every_tokens", "tokens"])
    c.eval_every = ck.int(ev, "$.eval", "every_tokens", 0, 1 << 53)
    c.eval_tokens = ck.int(ev, "$.eval", "tokens", 1, 1 << 40)
    if c.eval_tokens and c.seq_len and c.eval_tokens < c.seq_len:
        ck.fail("$.eval.tokens", "found %d, expected at least one window (seq_len = %d)"
                % (c.eval_tokens, c.seq_len))
    if ckpt is not None:
        ck.keys(ckpt, "$.checkpoint", ["dir", "every_tokens"], ["dir", "every_tokens"])
    c.checkpoint_dir = ck.str(ckpt, "$.checkpoint", "dir")
    c.checkpoint_every = ck.int(ckpt, "$.checkpoint", "every_tokens", 0, 1 << 53)

    for k in ("backend", "world_size", "threads"):
        if k not in raw:
            ck.fail("$." + k, "missing; " + RESOLVE_HINT)
    c.backend = ck.str(raw, "$", "backend", ["cpu", "cuda"])
    c.world_size = ck.int(raw, "$", "world_size", 1, 1024)
    c.threads = ck.int(raw, "$", "threads", 1, 1024)
    if c.world_size and c.batch_size and c.micro_batch_size and c.world_size > 1 and \
            c.batch_size % (c.micro_batch_size * c.world_size):
        ck.fail("$.world_size", "found %d: batch_size %d is not a multiple of micro_batch_size "
                "%d x world_size" % (c.world_size, c.batch_size, c.micro_batch_size))
    if c.zero and c.world_size == 1:
        ck.fail("$.optimizer.zero", "found 1, expected 0 with world_size 1 (nothing to shard)")
    applies = c.backend == "cuda" and c.precision == "fp32"
    if applies and "tf32" not in raw:
        ck.fail("$.tf32", "missing; " + RESOLVE_HINT)
    c.tf32 = ck.bool(raw, "$", "tf32")
    if c.tf32 and not applies:
        ck.fail("$.tf32", 'found true with backend "%s" and precision "%s", expected false or '
                'no key: TF32 applies to backend "cuda" at precision "fp32" only'
                % (c.backend, c.precision))
    c.tf32 = bool(c.tf32) and applies
    c.trainer = "builtin"
    if "trainer" in raw:
        v = raw["trainer"]
        if not isinstance(v, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}", v):
            ck.fail("$.trainer", "found %s, expected a trainer's name: 1 to 32 letters, digits, "
                    "'_', '-' or '.'" % _shown(v))
        else:
            c.trainer = v
    c.reproducible = "machine"
    if "reproducible" in raw:
        c.reproducible = ck.str(raw, "$", "reproducible", ["machine", "portable"])
    if ck.problems:
        raise ConfigError("\n".join(ck.problems))
    return c


def canonical(c):
    """rcfg_to_json's object: its keys in its order, from the parsed values."""
    d = {"model": {"n_layer": c.n_layer, "d_model": c.d_model, "n_head": c.n_head,
                   "seq_len": c.seq_len, "vocab_size": c.vocab_size}}
    # rcfg_to_json: the family's and parametrisation's keys only where they
    # are not gpt2's and sp's (configs from before them keep their hashes)
    if c.family == "llama":
        d["model"].update({"family": "llama", "rope_theta": c.rope_theta,
                           "mlp_ratio": c.mlp_ratio, "mlp_multiple_of": c.mlp_multiple_of,
                           "tie_embeddings": c.tie_embeddings, "qk_norm": c.qk_norm})
    if c.parametrization == "mup":
        d["model"].update({"parametrization": "mup", "base_width": c.base_width})
    if c.synthetic:
        d["data"] = {"synthetic": dict(c.synthetic)}
    else:
        d["data"] = {"train": c.data_train, "val": c.data_val}
    t = {"batch_size": c.batch_size, "micro_batch_size": c.micro_batch_size, "tokens": c.tokens,
         "lr": c.lr, "warmup_tokens": c.warmup_tokens, "schedule": c.schedule,
         "min_lr_ratio": c.min_lr_ratio}
    if c.schedule == "wsd":
        t["decay_frac"] = c.decay_frac
    t.update({"weight_decay": c.weight_decay, "grad_clip": c.grad_clip, "seed": c.seed})
    d["train"] = t
    o = {"name": c.optimizer, "beta1": c.beta1, "beta2": c.beta2, "eps": c.eps}
    if c.zero:
        o["zero"] = c.zero
    d["optimizer"] = o
    d["precision"] = c.precision
    d["memory"] = {"recompute": c.recompute}
    d["eval"] = {"every_tokens": c.eval_every, "tokens": c.eval_tokens}
    d["checkpoint"] = {"dir": c.checkpoint_dir, "every_tokens": c.checkpoint_every}
    d["backend"] = c.backend
    d["world_size"] = c.world_size
    d["threads"] = c.threads
    if c.backend == "cuda" and c.precision == "fp32":
        d["tf32"] = c.tf32
    if c.trainer != "builtin":
        d["trainer"] = c.trainer
    if c.reproducible == "portable":
        d["reproducible"] = "portable"
    return d


def canonical_json(c):
    return _dump(canonical(c))


def config_hash(c):
    return hashlib.sha256(canonical_json(c).encode()).hexdigest()


def wsd_stable_steps(c):
    """rcfg_wsd_stable_steps."""
    step_tokens = c.batch_size * c.seq_len
    steps = c.tokens // step_tokens
    if c.schedule != "wsd":
        return steps
    decay = int(math.ceil(c.decay_frac * float(steps) - 1e-9))
    decay = max(decay, 1)
    return 0 if decay > steps else steps - decay


def first_diff(a, b, where):
    """The first place two JSON values differ, as a message; None if equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in b:
                return "%s.%s: %s here, absent in the other" % (where, k, _dump(a[k]))
            if k not in a:
                return "%s.%s: absent here, %s in the other" % (where, k, _dump(b[k]))
            d = first_diff(a[k], b[k], "%s.%s" % (where, k))
            if d:
                return d
        return None
    if type(a) != type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))
                                   and not isinstance(a, bool) and not isinstance(b, bool)):
        return "%s: %s vs %s" % (where, _dump(a), _dump(b))
    if a != b:
        return "%s: %s vs %s" % (where, _dump(a), _dump(b))
    return None

#!/usr/bin/python3
"""scalesweep's reference PyTorch trainer: trains one run config as
`scalesweep train` does (the same model, initialisation, data, schedule,
optimizer, noise scale, evaluation and JSON lines), for a worker that runs
an operator's trainer (docs/trainers.md) or by hand. README.md beside it
says how to run it and what it supports.

Inputs, each an environment variable or a flag (the flag wins):
  SCALESWEEP_CONFIG          --config PATH        the fully resolved run config
  SCALESWEEP_CHECKPOINT_DIR  --checkpoint-dir DIR (else the config's checkpoint.dir)
  SCALESWEEP_DATA_DIRS       --data-dir DIR ...   token shards only under these (':'-separated)
  SCALESWEEP_RESUME_MAX_STEP --resume-max-step N  resume from a checkpoint at step <= N
  SCALESWEEP_BRANCH_FROM     --branch-from PATH   a wsd / constant-rate branch's start
  SCALESWEEP_KEEP_STEPS      --keep-steps S,...   keep checkpoints after these steps
  RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT   (world_size > 1; torchrun's)
  --compile                                       torch.compile the model (torch >= 2)
Exit codes: 0 done; 1 failed at run time; 2 invalid input; 143 (SIGTERM) or
130 (SIGINT) stopped by the signal, after its checkpoint.
"""
import argparse
import hashlib
import io
import json
import math
import os
import platform
import random
import resource
import signal
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

SCALE_INIT = 65536.0  # fp16 dynamic loss scaling (train.c)
SCALE_GROWTH_STEPS = 2000
NOISE_EMA_DECAY = 0.95
CKPT_FILE = "checkpoint.pt"
CKPT_PREV_FILE = "checkpoint.prev.pt"
CKPT_MAGIC = b"SSTORCH1"  # then the SHA-256 of the payload, then torch.save's bytes
CKPT_VERSION = 1


class Fail(Exception):
    """A run that cannot go on: code is the exit status, message the error
    line's."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


OUT = sys.stdout
SPEAK = True  # rank 0 prints the JSON lines; the other ranks nothing on stdout


def emit(obj):
    if SPEAK:
        OUT.write(json.dumps(obj, separators=(",", ":"), allow_nan=True) + "\n")
        OUT.flush()


def log(msg):
    sys.stderr.write("train.py: %s\n" % msg)
    sys.stderr.flush()


# ---- inputs ------------------------------------------------------------------------


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="train.py", description=__doc__.split("\n")[0])
    ap.add_argument("--config")
    ap.add_argument("--checkpoint-dir")
    ap.add_argument("--data-dir", action="append")
    ap.add_argument("--resume-max-step")
    ap.add_argument("--branch-from")
    ap.add_argument("--keep-steps")
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args(argv)
    env = os.environ.get
    o = argparse.Namespace()
    o.config = a.config or env("SCALESWEEP_CONFIG")
    o.checkpoint_dir = a.checkpoint_dir if a.checkpoint_dir is not None \
        else env("SCALESWEEP_CHECKPOINT_DIR") or None
    if a.data_dir is not None:
        o.data_dirs = a.data_dir
    elif "SCALESWEEP_DATA_DIRS" in os.environ:
        # set by a worker: only these, and set but empty: none (docs/trainers.md)
        o.data_dirs = [d for d in os.environ["SCALESWEEP_DATA_DIRS"].split(":") if d]
    else:
        o.data_dirs = None  # by hand: any file
    ms = a.resume_max_step if a.resume_max_step is not None else env("SCALESWEEP_RESUME_MAX_STEP")
    o.resume_max_step = -1
    if ms not in (None, ""):
        try:
            o.resume_max_step = int(ms)
            if o.resume_max_step < 0:
                raise ValueError
        except ValueError:
            raise Fail(EXIT_USAGE, "--resume-max-step '%s': expected an integer >= 0" % ms)
    o.branch_from = a.branch_from or env("SCALESWEEP_BRANCH_FROM") or None
    ks = a.keep_steps if a.keep_steps is not None else env("SCALESWEEP_KEEP_STEPS", "")
    o.keep_steps = []
    if ks:
        try:
            o.keep_steps = [int(x) for x in ks.split(",")]
            if any(x < 1 for x in o.keep_steps) or o.keep_steps != sorted(set(o.keep_steps)):
                raise ValueError
        except ValueError:
            raise Fail(EXIT_USAGE, "--keep-steps '%s': expected ascending steps >= 1 separated "
                       "by commas" % ks)
    o.compile = a.compile
    return o


# ---- the learning rate (train.c lr_at) ------------------------------------------------


def lr_at(c, tokens):
    lr = c.lr
    if tokens < c.warmup_tokens:
        return lr * (tokens + 1.0) / (c.warmup_tokens + 1.0)
    if c.schedule == "constant":
        return lr
    mn = lr * c.min_lr_ratio
    if c.schedule == "wsd":
        import sscfg
        step_tokens = float(c.batch_size * c.seq_len)
        start = float(sscfg.wsd_stable_steps(c)) * step_tokens
        end = math.floor(float(c.tokens) / step_tokens) * step_tokens
        if tokens < start:
            return lr
        p = (tokens + step_tokens - start) / (end - start)
        p = min(p, 1.0)
        return mn + (lr - mn) * (1.0 - math.sqrt(p))
    span = float(c.tokens) - c.warmup_tokens
    frac = (tokens - c.warmup_tokens) / span if span > 0 else 1.0
    frac = min(frac, 1.0)
    return mn + 0.5 * (lr - mn) * (1.0 + math.cos(math.pi * frac))


def counts(s):
    """runcfg/flops.c: (nonembedding params, params, training FLOPs per
    token) of a model shape (sscfg.shape_of), in its arithmetic."""
    import ssmodel
    L, d, T, V = s["n_layer"], s["d_model"], s["seq_len"], s["vocab_size"]
    if s["family"] == "llama":
        Fh = ssmodel.ffn_hidden(s)
        hs = d // s["n_head"]
        nonemb = L * (4 * d * d + 3 * Fh * d + 2 * d + (2 * hs if s["qk_norm"] else 0)) + d
        total = nonemb + V * d * (1 if s["tie_embeddings"] else 2)
        fl, dd, TT, VV, FF = float(L), float(d), float(T), float(V), float(Fh)
        fpt = 6.0 * ((4.0 * dd * dd + 3.0 * FF * dd) * fl + dd * VV) + 6.0 * fl * TT * dd + \
            12.0 * fl * dd
        return nonemb, total, fpt
    nonemb = L * (12 * d * d + 13 * d) + 2 * d
    return nonemb, nonemb + V * d + T * d, 6.0 * (12.0 * L * d * d + d * V) + 6.0 * L * T * d


def crossed(before, after, every):
    return every > 0 and after // every > before // every


def step_scale(gnorm2, loss_scale, clip):
    """kernels/step_scale.h: the update's gradient factor, as float32."""
    import numpy as np
    if not math.isfinite(gnorm2):
        return 0.0
    gnorm = math.sqrt(gnorm2) / loss_scale
    f = clip / gnorm if clip > 0 and gnorm > clip else 1.0
    return float(np.float32(f / loss_scale))


class Noise:
    """trainer/noise.c: EMAs of the unbiased |G|^2 and tr(Sigma) estimates."""

    def __init__(self, decay=NOISE_EMA_DECAY):
        self.decay, self.ema_g2, self.ema_s, self.n = decay, 0.0, 0.0, 0

    def update(self, g_small2, g_big2, b_small, b_big):
        g2 = (b_big * g_big2 - b_small * g_small2) / (b_big - b_small)
        s = (g_small2 - g_big2) / (1.0 / b_small - 1.0 / b_big)
        self.ema_g2 = self.decay * self.ema_g2 + (1.0 - self.decay) * g2
        self.ema_s = self.decay * self.ema_s + (1.0 - self.decay) * s
        self.n += 1

    def value(self):
        if self.n == 0 or not self.ema_g2 > 0.0:
            return None
        return self.ema_s / self.ema_g2

    def state(self):
        return dict(decay=self.decay, ema_g2=self.ema_g2, ema_s=self.ema_s, n=self.n)

    def load(self, d):
        self.decay, self.ema_g2, self.ema_s, self.n = d["decay"], d["ema_g2"], d["ema_s"], d["n"]


# ---- the run ------------------------------------------------------------------------------


STOP = {"sig": 0}


def on_signal(sig, frame):
    STOP["sig"] = sig


class Run:
    def __init__(self, opts):
        self.opts = opts

    # -- set-up --

    def load_config(self):
        import sscfg
        o = self.opts
        if not o.config:
            raise Fail(EXIT_USAGE, "no run config: set SCALESWEEP_CONFIG or pass --config PATH")
        try:
            with open(o.config, "rb") as f:
                text = f.read().decode("utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise Fail(EXIT_USAGE, "%s: cannot read the run config: %s" % (o.config, e))
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise Fail(EXIT_USAGE, "%s:%d:%d: malformed JSON: %s"
                       % (o.config, e.lineno, e.colno, e.msg))
        try:
            self.c = sscfg.parse(raw)
        except sscfg.ConfigError as e:
            raise Fail(EXIT_USAGE, "\n".join("%s: %s" % (o.config, line)
                                             for line in str(e).split("\n")))
        self.raw = raw
        self.canonical = sscfg.canonical(self.c)
        self.config_hash = sscfg.config_hash(self.c)
        c = self.c
        self.ckdir = o.checkpoint_dir if o.checkpoint_dir is not None else c.checkpoint_dir
        if c.checkpoint_every > 0 and not self.ckdir:
            raise Fail(EXIT_USAGE, "$.checkpoint.dir: missing; checkpoint.every_tokens > 0 "
                       "needs a directory\nHINT: set checkpoint.dir, or pass --checkpoint-dir DIR")
        if o.keep_steps and not self.ckdir:
            raise Fail(EXIT_USAGE, "--keep-steps: the branch points' checkpoints need a "
                       "directory\nHINT: set checkpoint.dir, or pass --checkpoint-dir DIR")

    def setup_torch(self):
        global SPEAK
        self.pin_blas()
        import torch
        self.torch = torch
        c, o = self.c, self.opts
        self.world, self.rank, self.local_rank = c.world_size, 0, 0
        env = os.environ
        if c.world_size > 1:
            for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
                if not env.get(k):
                    raise Fail(EXIT_USAGE, "$.world_size: %d ranks, but %s is not set (start "
                               "each rank with torchrun's RANK, WORLD_SIZE, LOCAL_RANK, "
                               "MASTER_ADDR and MASTER_PORT)" % (c.world_size, k))
        if env.get("WORLD_SIZE") and int(env["WORLD_SIZE"]) != c.world_size:
            raise Fail(EXIT_USAGE, "$.world_size: found %d, but WORLD_SIZE is %s"
                       % (c.world_size, env["WORLD_SIZE"]))
        if c.world_size > 1:
            self.rank = int(env["RANK"])
            self.local_rank = int(env.get("LOCAL_RANK", "0"))
            if not 0 <= self.rank < c.world_size:
                raise Fail(EXIT_USAGE, "RANK %d: expected a rank below world_size %d"
                           % (self.rank, c.world_size))
        SPEAK = self.rank == 0
        torch.set_num_threads(c.threads)
        if c.backend == "cuda":
            if not torch.cuda.is_available():
                raise Fail(EXIT_USAGE, '$.backend: found "cuda", but this torch (%s) sees no '
                           "CUDA device" % torch.__version__)
            self.dev = torch.device("cuda", self.local_rank)
            torch.cuda.set_device(self.dev)
            torch.backends.cuda.matmul.allow_tf32 = bool(c.tf32)
            torch.backends.cudnn.allow_tf32 = bool(c.tf32)
        else:
            self.dev = torch.device("cpu")
        if c.precision == "fp16" and c.backend == "cpu" and not self.cpu_autocast_fp16():
            raise Fail(EXIT_USAGE, '$.precision: found "fp16" with backend "cpu": torch %s\'s '
                       "CPU autocast has no float16 (bfloat16 only)\nHINT: use backend "
                       '"cuda", or precision "bf16"' % torch.__version__)
        self.amp = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[c.precision]
        if c.optimizer == "adamw8bit":
            try:
                import bitsandbytes  # noqa: F401
            except Exception as e:
                raise Fail(EXIT_USAGE, '$.optimizer.name: found "adamw8bit": the torch trainer '
                           "runs it as bitsandbytes.optim.AdamW8bit, and bitsandbytes cannot "
                           "be imported here (%s)\nHINT: install bitsandbytes, or use "
                           '"adamw"' % e)
            if c.zero:
                raise Fail(EXIT_USAGE, '$.optimizer.zero: found 1 with "adamw8bit": the torch '
                           "trainer shards only adamw's state (ZeroRedundancyOptimizer)")
        if o.compile and not hasattr(torch, "compile"):
            raise Fail(EXIT_USAGE, "--compile: torch %s has no torch.compile (it needs torch "
                       ">= 2)" % torch.__version__)

    def cpu_autocast_fp16(self):
        import warnings
        torch = self.torch
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with torch.autocast("cpu", dtype=torch.float16):
                    y = torch.ones(2, 2) @ torch.ones(2, 2)
            return y.dtype == torch.float16
        except Exception:
            return False

    def open_data(self):
        import ssdata
        c = self.c
        self.lex = None
        try:
            if c.synthetic:
                self.lex = ssdata.Lexicon(c.synthetic)
                self.train = ssdata.SynthLoader(self.lex, ssdata.synth_train_seed(c.synthetic["seed"]))
                self.val = ssdata.SynthLoader(self.lex, ssdata.synth_val_seed(c.synthetic["seed"]))
            else:
                dirs = self.opts.data_dirs
                loaders = []
                for key, pat in (("$.data.train", c.data_train), ("$.data.val", c.data_val)):
                    try:
                        loaders.append(ssdata.ShardLoader(pat, dirs, c.vocab_size))
                    except ssdata.DataError as e:
                        allowed = "" if not dirs else " (allowed data directories: %s)" \
                            % ", ".join(dirs)
                        raise ssdata.DataError("%s: '%s': %s%s" % (key, pat, e, allowed))
                self.train, self.val = loaders
        except ssdata.DataError as e:
            if c.synthetic:
                raise Fail(EXIT_USAGE, "$.data.synthetic: %s" % e)
            raise Fail(EXIT_USAGE, str(e))
        self.nval = c.eval_tokens // c.seq_len
        self.val_tok = self.val.next(self.nval * c.seq_len + 1)

    def build(self):
        import ssmodel
        import sscfg
        torch = self.torch
        c = self.c
        self.shape = sscfg.model_shape(c)
        self.model = ssmodel.GPT(self.shape, recompute=c.recompute).to(self.dev)
        self.params = self.model.tensors()
        self.names = self.model.names
        self.fwd = self.model
        if self.opts.compile:
            self.fwd = torch.compile(self.model)
        # one group per (weight decay, learning-rate factor), in tensor order:
        # sp's decay and no-decay groups; muP's hidden matrices a third
        groups, at = [], {}
        for n, p in zip(self.names, self.params):
            key = (ssmodel.DECAY[n], ssmodel.lr_scale(self.shape, n))
            if key not in at:
                at[key] = len(groups)
                groups.append(dict(params=[], weight_decay=c.weight_decay if key[0] else 0.0,
                                   lr_scale=key[1]))
            groups[at[key]]["params"].append(p)
        self.zero = None
        if c.optimizer == "adamw8bit":
            import bitsandbytes
            self.opt = bitsandbytes.optim.AdamW8bit(groups, lr=c.lr, betas=(c.beta1, c.beta2),
                                                   eps=c.eps)
        elif c.zero:
            from torch.distributed.optim import ZeroRedundancyOptimizer
            import ssoptim
            self.opt = ZeroRedundancyOptimizer(groups[0]["params"],
                                               optimizer_class=ssoptim.SSAdamW, beta1=c.beta1,
                                               beta2=c.beta2, eps=c.eps,
                                               weight_decay=groups[0]["weight_decay"],
                                               lr_scale=groups[0]["lr_scale"])
            for g in groups[1:]:
                self.opt.add_param_group(g)
            self.zero = self.opt
        else:
            import ssoptim
            self.opt = ssoptim.SSAdamW(groups, beta1=c.beta1, beta2=c.beta2, eps=c.eps)

    def nparams(self):
        return sum(p.numel() for p in self.params)

    def optimizer_state_bytes(self):
        c = self.c
        n = self.nparams()
        if c.optimizer == "adamw8bit":
            return 2 * n  # about: one byte per moment (the blocks' scales aside)
        return 8 * n

    def emit_config(self):
        torch = self.torch
        c = self.c
        self.nonemb, self.nparams_total, self.fpt = counts(self.shape)
        o = {"event": "config", "config": self.raw, "config_hash": self.config_hash}
        if self.opts.checkpoint_dir is not None:
            o["checkpoint_dir"] = self.opts.checkpoint_dir
        o.update({"params": self.nparams_total, "nonembedding_params": self.nonemb,
                  "flops_per_token": self.fpt,
                  "optimizer_state_bytes": self.optimizer_state_bytes(),
                  "b_noise_unit": "sequences", "val_tokens": self.nval * c.seq_len})
        if self.lex is not None:
            o["lexicon_digest"] = "%016x" % self.lex.digest
            o["entropy_rate"] = self.lex.entropy_rate
            o["window_floor"] = self.lex.window_floor(c.seq_len)
        else:
            o["data_hashes"] = [{"split": split, "path": p, "sha256": h}
                                for split, ld in (("train", self.train), ("val", self.val))
                                for p, h, _ in ld.files]
        o["trainer"] = "torch"
        o["torch_version"] = torch.__version__
        o["environment"] = self.environment()
        emit(o)

    def pin_blas(self):
        """"reproducible": "portable" (README, "Reproduce anywhere"): OpenBLAS's
        Haswell kernels, which every CPU with AVX2 and FMA runs, whatever it
        would pick for this one; an OPENBLAS_CORETYPE set before wins. It is
        read once, when OpenBLAS loads with torch: so before the import."""
        env = os.environ
        if self.c.reproducible != "portable" or self.c.backend != "cpu" or \
                env.get("OPENBLAS_CORETYPE"):
            return
        flags = set()
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("flags"):
                        flags = set(line.split(":", 1)[1].split())
                        break
        except OSError:
            pass
        if "avx2" in flags and "fma" in flags:
            env["OPENBLAS_CORETYPE"] = env["SCALESWEEP_BLAS_PINNED"] = "Haswell"
        else:
            log("reproducible \"portable\": this CPU lacks AVX2 or FMA, which OpenBLAS's "
                "Haswell kernels need; its own run, so the numbers may differ from other CPUs'")

    @staticmethod
    def blas_core():
        """OpenBLAS's kernels as it loaded with torch, and who chose them
        (trainer/where.c's keys); None without OpenBLAS"""
        import ctypes
        try:
            lib = ctypes.CDLL("libopenblas.so.0", mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            core = lib.openblas_get_corename().decode()
        except (OSError, AttributeError):
            return None
        owner, pinned = os.environ.get("OPENBLAS_CORETYPE"), os.environ.get("SCALESWEEP_BLAS_PINNED")
        by = "portable" if owner and owner == pinned else "OPENBLAS_CORETYPE" if owner else "openblas"
        return core, by

    def environment(self):
        """Where this run trains (docs/runtime.md, "Where a run ran"): the
        built-in's keys where they apply, and PyTorch's own versions."""
        torch = self.torch
        cpu = "unknown"
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        cpu = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        env = {"host": socket.gethostname(), "cpu": cpu, "backend": self.c.backend,
               "threads": self.c.threads, "trainer": "torch", "torch": torch.__version__,
               "python": platform.python_version()}
        blas = self.blas_core() if self.c.backend == "cpu" else None
        if blas:
            env["blas_core"], env["blas_core_by"] = blas
        if self.c.backend == "cuda":
            dev = torch.cuda.current_device()
            cc = torch.cuda.get_device_capability(dev)
            env.update({"gpu": torch.cuda.get_device_name(dev),
                        "compute_capability": "%d.%d" % cc,
                        "cuda_runtime": torch.version.cuda or "unknown"})
            if torch.backends.cudnn.is_available():
                env["cudnn"] = str(torch.backends.cudnn.version())
            if self.world > 1 and hasattr(torch.cuda, "nccl"):
                env["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        return env

    def init_dist(self):
        if self.world == 1:
            return
        torch = self.torch
        import datetime
        backend = "nccl" if self.c.backend == "cuda" else "gloo"
        try:
            torch.distributed.init_process_group(backend=backend, init_method="env://",
                                                 timeout=datetime.timedelta(seconds=600))
        except Exception as e:
            raise Fail(EXIT_FAIL, "rank %d of %d: cannot join the other ranks: %s"
                       % (self.rank, self.world, e))

    # -- checkpoints --

    def state_dict(self, st):
        torch = self.torch
        c = self.c
        if self.zero is not None:
            self.zero.consolidate_state_dict(to=0)
        if self.rank != 0:
            return None
        params = {n: p.detach().to("cpu").clone() for n, p in zip(self.names, self.params)}
        if c.optimizer == "adamw8bit":
            optim = {"kind": "adamw8bit", "state_dict": self.opt.state_dict()}
        else:
            sd = self.opt.state_dict()
            index = self._param_index()
            m, v = {}, {}
            for i, s in sd["state"].items():
                n = index[i]
                m[n] = s["m"].to("cpu").clone()
                v[n] = s["v"].to("cpu").clone()
            optim = {"kind": "adamw", "m": m, "v": v}
        rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
        if self.c.backend == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state_all()
        return {"format": "scalesweep-torch-checkpoint", "version": CKPT_VERSION,
                "config": self.canonical, "params": params, "optimizer": optim,
                "state": dict(st), "rng": rng}

    def _param_index(self):
        """state_dict()'s parameter indices -> tensor names (the groups' order)."""
        order = []
        for g in self.opt.param_groups:
            for p in g["params"]:
                order.append(self.names[[id(q) for q in self.params].index(id(p))])
        return {i: n for i, n in enumerate(order)}

    def save(self, st, directory, branch):
        """Writes directory/checkpoint.pt (the one it replaces becoming
        checkpoint.prev.pt) through a temporary file, fsync'ed and renamed;
        every rank calls it, rank 0 writes."""
        torch = self.torch
        ck = self.state_dict(st)
        if self.rank != 0:
            return
        buf = io.BytesIO()
        torch.save(ck, buf)
        payload = buf.getvalue()
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, CKPT_FILE)
        for name in os.listdir(directory):  # a killed writer's leftovers
            if name.startswith(CKPT_FILE + ".tmp."):
                try:
                    os.unlink(os.path.join(directory, name))
                except OSError:
                    pass
        tmp = "%s.tmp.%d" % (path, os.getpid())
        try:
            with open(tmp, "wb") as f:
                f.write(CKPT_MAGIC + hashlib.sha256(payload).digest() + payload)
                f.flush()
                os.fsync(f.fileno())
            if os.path.exists(path):
                os.replace(path, os.path.join(directory, CKPT_PREV_FILE))
            os.replace(tmp, path)
            dfd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            import errno
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                log("checkpoint at step %d skipped: %s; training goes on, the previous "
                    "checkpoints are kept" % (st["step"], e))
                return
            raise Fail(EXIT_FAIL, "%s: cannot write the checkpoint: %s" % (path, e))
        o = {"event": "checkpoint", "step": st["step"], "tokens": st["tokens"], "path": path}
        if branch:
            o["branch"] = True
        emit(o)

    def read_checkpoint(self, path):
        """The checkpoint dict; Fail(2) when it is not whole (corrupt=True)
        or cannot be read."""
        torch = self.torch
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise
        except OSError as e:
            raise Fail(EXIT_USAGE, "%s: cannot read checkpoint: %s" % (path, e))
        n = len(CKPT_MAGIC)
        bad = None
        if data[:n] != CKPT_MAGIC:
            bad = "%s: not a torch trainer checkpoint (magic %r, expected %r)" \
                  % (path, data[:n], CKPT_MAGIC)
        elif hashlib.sha256(data[n + 32:]).digest() != data[n:n + 32]:
            bad = "%s: checksum mismatch: the file is corrupt" % path
        if bad is None:
            try:
                ck = torch.load(io.BytesIO(data[n + 32:]), map_location="cpu")
                if ck.get("version") != CKPT_VERSION:
                    bad = "%s: version %s, expected %d" % (path, ck.get("version"), CKPT_VERSION)
            except Exception as e:
                bad = "%s: cannot be loaded: %s" % (path, e)
        if bad:
            f = Fail(EXIT_USAGE, bad)
            f.corrupt = True
            raise f
        return ck

    def same_run(self, path, theirs, branch):
        """ckpt.c same_run: model, data, train, optimizer (but zero) and
        precision must agree; a branch's train keys may differ."""
        import copy
        import sscfg
        a, b = copy.deepcopy(theirs), copy.deepcopy(self.canonical)
        free = {None: [], "wsd": ["tokens"],
                "constant": ["tokens", "batch_size", "micro_batch_size", "lr"]}[branch]
        for d in (a, b):
            for k in free:
                d.get("train", {}).pop(k, None)
            d.get("optimizer", {}).pop("zero", None)
        for k in ("model", "data", "train", "optimizer", "precision"):
            diff = sscfg.first_diff(a.get(k), b.get(k), "$." + k)
            if diff:
                hint = {None: "resume with the config that wrote the checkpoint",
                        "wsd": "a branch starts from a wsd run that differs from it only in "
                               "train.tokens",
                        "constant": "a constant-rate branch differs from the run it starts "
                                    "from only in train.tokens, batch_size, micro_batch_size "
                                    "and lr"}[branch]
                raise Fail(EXIT_USAGE, "%s: written by a run with another config: %s\nHINT: %s"
                           % (path, diff, hint))

    def apply_checkpoint(self, ck, st):
        torch = self.torch
        c = self.c
        with torch.no_grad():
            for n, p in zip(self.names, self.params):
                t = ck["params"][n]
                if tuple(t.shape) != tuple(p.shape):
                    raise Fail(EXIT_USAGE, "checkpoint tensor %s has shape %s, expected %s"
                               % (n, tuple(t.shape), tuple(p.shape)))
                p.copy_(t.to(self.dev))
        om = ck["optimizer"]
        if om["kind"] == "adamw8bit":
            self.opt.load_state_dict(om["state_dict"])
        else:
            index = self._param_index()
            sd = {"state": {}, "param_groups": []}
            own = self.opt.state_dict() if self.zero is None else None
            groups = own["param_groups"] if own else None
            for i, n in index.items():
                if n in om["m"]:
                    sd["state"][i] = {"m": om["m"][n].to(self.dev), "v": om["v"][n].to(self.dev)}
            if self.zero is None:
                sd["param_groups"] = groups
                self.opt.load_state_dict(sd)
            else:
                pg = []
                at = 0
                for g in self.opt.param_groups:
                    d = {k: v for k, v in g.items() if k != "params"}
                    d["params"] = list(range(at, at + len(g["params"])))
                    at += len(g["params"])
                    pg.append(d)
                sd["param_groups"] = pg
                self.opt.load_state_dict(sd)
        s = ck["state"]
        for k in ("step", "tokens", "loss_scale", "good_steps", "skipped_steps", "carry"):
            st[k] = s[k]
        st["noise"] = dict(s["noise"])
        st["train_pos"] = s["train_pos"]
        try:
            self.train.set_pos(s["train_pos"])
        except Exception as e:
            raise Fail(EXIT_USAGE, "checkpoint: %s" % e)
        rng = ck.get("rng", {})
        if "torch" in rng:
            torch.set_rng_state(rng["torch"])
        if "python" in rng:
            random.setstate(rng["python"])
        if "cuda" in rng and c.backend == "cuda":
            torch.cuda.set_rng_state_all(rng["cuda"])

    def load_branch(self):
        """The branch point's checkpoint, checked (ckpt.c load's branch
        checks): (checkpoint, "wsd" or "constant")."""
        import sscfg
        c = self.c
        path = self.opts.branch_from
        if os.path.isdir(path):
            path = os.path.join(path, CKPT_FILE)
        try:
            ck = self.read_checkpoint(path)
        except FileNotFoundError:
            raise Fail(EXIT_USAGE, "%s: cannot open checkpoint: no such file" % path)
        if c.schedule not in ("wsd", "constant"):
            raise Fail(EXIT_USAGE, '%s: $.train.schedule: found "%s", expected "wsd" or '
                       '"constant": only a warmup-stable-decay or constant-rate run can start '
                       "from another run's checkpoint" % (path, c.schedule))
        self.same_run(path, ck["config"], c.schedule)
        s = ck["state"]
        bt = c.batch_size * c.seq_len
        if c.schedule == "constant":
            if s["tokens"] < c.warmup_tokens:
                raise Fail(EXIT_USAGE, "%s: holds %d tokens, inside the warmup ($.train."
                           "warmup_tokens %.0f): a constant-rate branch starts after it"
                           % (path, s["tokens"], c.warmup_tokens))
            if s["tokens"] % bt:
                raise Fail(EXIT_USAGE, "%s: holds %d tokens, not a whole number of this run's "
                           "batches ($.train.batch_size %d x seq_len %d = %d tokens)\nHINT: "
                           "branch at a multiple of the batch"
                           % (path, s["tokens"], c.batch_size, c.seq_len, bt))
        else:
            parent = sscfg.parse(ck["config"])
            own, theirs = sscfg.wsd_stable_steps(c), sscfg.wsd_stable_steps(parent)
            if s["step"] > own or s["step"] > theirs:
                raise Fail(EXIT_USAGE, "%s: holds step %d, after the stable phase of %s (%d "
                           "steps): the learning rates differ before it\nHINT: branch from a "
                           "checkpoint at or before step %d"
                           % (path, s["step"], "this run" if s["step"] > own
                              else "the run that wrote it", own if s["step"] > own else theirs,
                              min(own, theirs)))
        log("starting from %s (step %d)" % (path, s["step"]))
        return ck, ("constant" if c.schedule == "constant" else "wsd")

    def find_start(self):
        """What the run starts from (train.c resume_from): the checkpoint
        directory's newest whole checkpoint (at step <= resume_max_step when
        given), else the branch point, else nothing. (checkpoint, kind) with
        kind "resume", "wsd" or "constant"; (None, None) for a fresh start."""
        d, max_step = self.ckdir, self.opts.resume_max_step
        found, bad = [], []
        if d and os.path.isdir(d):
            for name in (CKPT_FILE, CKPT_PREV_FILE):
                p = os.path.join(d, name)
                if not os.path.exists(p):
                    continue
                try:
                    ck = self.read_checkpoint(p)
                except Fail as e:
                    if getattr(e, "corrupt", False):
                        bad.append(e.message)
                        continue
                    raise
                step = ck["state"]["step"]
                if max_step >= 0 and step > max_step:
                    log("%s holds step %d, after step %d (the last one whose metrics are "
                        "stored); not resumed from" % (p, step, max_step))
                    continue
                found.append((step, p, ck))
        found.sort(key=lambda x: -x[0])
        if found:
            step, p, ck = found[0]
            self.same_run(p, ck["config"], None)
            for b in bad:
                log("checkpoint %s; resuming from %s (step %d)" % (b, p, step))
            log("resuming from %s (step %d)" % (p, step))
            return ck, "resume"
        if bad and max_step < 0:
            raise Fail(EXIT_USAGE, "; ".join(bad))
        for i, b in enumerate(bad):
            log("checkpoint %s; no other checkpoint to resume from%s"
                % (b, "" if i + 1 < len(bad) else ": starting from the branch point"
                   if self.opts.branch_from else ": starting from scratch"))
        if self.opts.branch_from:
            return self.load_branch()
        return None, None

    def resume(self, st):
        """Rank 0 finds the start and hands it to every rank (checkpoints are
        a single process's, as the built-in's: a run may resume on another
        number of ranks); every rank then loads it. True when resumed."""
        torch = self.torch
        if self.world == 1:
            ck, kind = self.find_start()
        else:
            msg = [None]
            if self.rank == 0:
                try:
                    msg = [self.find_start()]
                except Fail as e:
                    msg = [("error", e.code, e.message)]
            torch.distributed.broadcast_object_list(msg, src=0)
            got = msg[0]
            if got and got[0] == "error":
                if self.rank == 0:
                    raise Fail(got[1], got[2])
                raise Fail(got[1], "rank %d: rank 0 could not resume: %s" % (self.rank, got[2]))
            ck, kind = got
        if ck is None:
            return False
        s = ck["state"]
        self.apply_checkpoint(ck, st)
        if kind == "constant":
            bt = self.c.batch_size * self.c.seq_len
            st["step"] = s["tokens"] // bt
            st["skipped_steps"] = st["step"] - (s["step"] - s["skipped_steps"])
        return True

    # -- training --

    def sumsq(self, tensors):
        torch = self.torch
        return float(sum(torch.sum(t.double() * t.double()) for t in tensors).item())

    def evaluate(self):
        torch = self.torch
        F = torch.nn.functional
        c = self.c
        T, mb = c.seq_len, c.micro_batch_size
        total = 0.0
        self.model.eval()
        with torch.no_grad():
            for i in range(0, self.nval, mb):
                n = min(mb, self.nval - i)
                x = torch.from_numpy(self.val_tok[i * T:(i + n) * T]).view(n, T).to(self.dev)
                y = torch.from_numpy(self.val_tok[i * T + 1:(i + n) * T + 1]).view(-1).to(self.dev)
                with self.autocast():
                    logits = self.fwd(x)
                losses = F.cross_entropy(logits.float().view(-1, c.vocab_size), y,
                                         reduction="none")
                total += float(losses.double().sum().item()) / (n * T) * n
        self.model.train()
        return total / self.nval

    def autocast(self):
        import contextlib
        torch = self.torch
        if self.amp is None:
            return contextlib.nullcontext()
        return torch.autocast(self.dev.type, dtype=self.amp)

    def train_loop(self):
        torch = self.torch
        F = torch.nn.functional
        c = self.c
        import ssmodel
        T, mb, B = c.seq_len, c.micro_batch_size, c.batch_size
        nmicro = B // mb
        nlocal = nmicro // self.world
        step_tokens = B * T
        steps = c.tokens // step_tokens
        st = {"step": 0, "tokens": 0, "loss_scale": SCALE_INIT if c.precision == "fp16" else 1.0,
              "good_steps": 0, "skipped_steps": 0, "carry": 0, "noise": Noise().state(),
              "train_pos": None}
        resumed = False
        if self.ckdir or self.opts.branch_from:
            resumed = self.resume(st)
        if not resumed:
            self.model.load_weights(ssmodel.init_weights(self.shape, c.seed))
            st["carry"] = int(self.train.next(1)[0])
        noise = Noise()
        noise.load(st["noise"])
        t_start = time.monotonic()
        val_loss, val_at = float("nan"), -1
        keep = set(self.opts.keep_steps)
        inv = float(torch.tensor(1.0 / nmicro, dtype=torch.float32)) if nmicro > 1 else 1.0
        while st["step"] < steps:
            t0 = time.monotonic()
            lr = lr_at(c, float(st["tokens"]))
            S = st["loss_scale"]
            loss_sum, g_small2 = 0.0, 0.0
            acc = None
            for i in range(nmicro):
                batch = self.train.next(mb * T)
                full = torch.from_numpy(batch)
                x_all = torch.cat([torch.tensor([st["carry"]], dtype=torch.int64), full[:-1]])
                y_all = full
                st["carry"] = int(batch[-1])
                if i // nlocal != self.rank:
                    continue
                x = x_all.view(mb, T).to(self.dev)
                y = y_all.view(-1).to(self.dev)
                for p in self.params:
                    p.grad = None
                with self.autocast():
                    logits = self.fwd(x)
                losses = F.cross_entropy(logits.float().view(-1, c.vocab_size), y,
                                         reduction="none")
                loss_sum += float(losses.detach().double().sum().item()) / (mb * T)
                mean = losses.mean()
                (mean * S if S != 1.0 else mean).backward()
                grads = [p.grad for p in self.params]
                if nmicro > 1:
                    if i % nlocal == 0:
                        acc = [g * inv for g in grads]
                    else:
                        for a, g in zip(acc, grads):
                            a.add_(g * inv)
                    g_small2 += self.sumsq(grads)
                else:
                    acc = grads
            stop_req = 1.0 if STOP["sig"] else 0.0
            if self.world > 1:
                flat = torch.cat([a.reshape(-1) for a in acc])
                torch.distributed.all_reduce(flat)
                at = 0
                for a in acc:
                    a.copy_(flat[at:at + a.numel()].view_as(a))
                    at += a.numel()
                ctl = torch.tensor([loss_sum, g_small2, stop_req], dtype=torch.float64,
                                   device=self.dev if c.backend == "cuda" else "cpu")
                torch.distributed.all_reduce(ctl)
                loss_sum, g_small2, stop_req = [float(v) for v in ctl.tolist()]
            gnorm2 = self.sumsq(acc)
            loss = loss_sum / nmicro
            if not math.isfinite(loss):
                raise Fail(EXIT_FAIL, "training loss is %g at step %d (tokens %d); stopping\nHINT: "
                           "lower train.lr, keep train.grad_clip on, or use fp32/bf16; the last "
                           "good checkpoint is kept"
                           % (loss, st["step"] + 1, st["tokens"] + step_tokens))
            skipped = False
            if not math.isfinite(gnorm2):
                if c.precision != "fp16":
                    raise Fail(EXIT_FAIL, "gradient norm is not finite at step %d; stopping"
                               % (st["step"] + 1))
                skipped = True
                st["loss_scale"] *= 0.5
                st["good_steps"] = 0
            gnorm = math.sqrt(gnorm2) / S
            if not skipped:
                if nmicro > 1:
                    noise.update(g_small2 / nmicro / (S * S), gnorm * gnorm, mb, B)
                gs = step_scale(gnorm2, S, c.grad_clip)
                for p, a in zip(self.params, acc):
                    p.grad = a
                opt_step = st["step"] + 1 - st["skipped_steps"]
                self.optimizer_step(lr, gs, opt_step)
                if c.precision == "fp16":
                    st["good_steps"] += 1
                    if st["good_steps"] >= SCALE_GROWTH_STEPS:
                        st["loss_scale"] *= 2.0
                        st["good_steps"] = 0
            else:
                st["skipped_steps"] += 1
            before = st["tokens"]
            st["step"] += 1
            st["tokens"] += step_tokens
            dt = time.monotonic() - t0
            o = {"event": "step", "step": st["step"], "tokens": st["tokens"], "train_loss": loss,
                 "lr": lr, "grad_norm": None if skipped else gnorm}
            bn = noise.value()
            if bn is not None:
                o["b_noise"] = bn
            if c.precision == "fp16":
                o["loss_scale"] = st["loss_scale"]
                o["skipped"] = skipped
            o["tok_per_s"] = float("%.6g" % (step_tokens / dt)) if dt > 0 else 0.0
            emit(o)
            if crossed(before, st["tokens"], c.eval_every) or st["step"] == steps:
                val_loss = self.shared_eval()
                val_at = st["step"]
                emit({"event": "eval", "step": st["step"], "tokens": st["tokens"],
                      "val_loss": val_loss})
                if not math.isfinite(val_loss):
                    raise Fail(EXIT_FAIL, "validation loss is %g at step %d; stopping"
                               % (val_loss, st["step"]))
            stop_any = stop_req > 0 if self.world > 1 else bool(STOP["sig"])
            stopping = stop_any and st["step"] < steps
            want = crossed(before, st["tokens"], c.checkpoint_every) or \
                (stopping and bool(self.ckdir))
            st["noise"] = noise.state()
            if want or st["step"] in keep:
                st["train_pos"] = self.train.get_pos()
            if st["step"] in keep:
                self.save(st, os.path.join(self.ckdir, "branch-%d" % st["step"]), True)
            if want:
                self.save(st, self.ckdir, False)
            if stopping:
                sig = STOP["sig"] or signal.SIGTERM
                raise Fail(128 + int(sig), "stopped by signal %d after step %d%s"
                           % (sig, st["step"], "; it resumes from the checkpoint directory"
                              if self.ckdir else " (no checkpoint.dir: nothing saved)"))
        if val_at != st["step"]:
            val_loss = self.shared_eval()
            emit({"event": "eval", "step": st["step"], "tokens": st["tokens"],
                  "val_loss": val_loss})
        o = {"event": "done", "final_val_loss": val_loss, "params": self.nparams_total,
             "nonembedding_params": self.nonemb, "flops": self.fpt * float(st["tokens"]),
             "flops_6nd": 6.0 * float(self.nonemb) * float(st["tokens"]),
             "tokens": st["tokens"], "steps": st["step"],
             "wall_s": float("%.6g" % (time.monotonic() - t_start)),
             "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
        if c.backend == "cuda":
            o["peak_device_bytes"] = torch.cuda.max_memory_allocated(self.dev)
        if self.world > 1:
            o["world_size"] = self.world
        emit(o)

    def shared_eval(self):
        torch = self.torch
        v = self.evaluate() if self.rank == 0 else 0.0
        if self.world > 1:
            t = torch.tensor([v], dtype=torch.float64,
                             device=self.dev if self.c.backend == "cuda" else "cpu")
            torch.distributed.broadcast(t, 0)
            v = float(t.item())
        return v

    def optimizer_step(self, lr, gs, opt_step):
        c = self.c
        if c.optimizer == "adamw8bit":
            import numpy as np
            torch = self.torch
            with torch.no_grad():
                for p in self.params:
                    p.grad.mul_(gs)
            for g in self.opt.param_groups:
                g["lr"] = float(np.float32(np.float32(lr) * np.float32(g["lr_scale"])))
            self.opt.step()
        else:
            self.opt.step(lr=lr, grad_scale=gs, opt_step=opt_step)


def main(argv):
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    r = None
    try:
        opts = parse_args(argv)
        r = Run(opts)
        r.load_config()
        r.setup_torch()
        r.open_data()
        r.init_dist()
        r.build()
        r.emit_config()
        r.train_loop()
        code = EXIT_OK
    except Fail as e:
        emit({"event": "error", "message": e.message})
        rank = getattr(r, "rank", 0) if r else 0
        log(("rank %d: " % rank if r and getattr(r, "world", 1) > 1 else "") + e.message)
        code = e.code
    except Exception as e:  # a bug or an unexpected failure: still one error line
        import traceback
        traceback.print_exc()
        emit({"event": "error", "message": "%s: %s" % (type(e).__name__, e)})
        code = EXIT_FAIL
    try:
        if r is not None and getattr(r, "world", 1) > 1:
            import torch
            if torch.distributed.is_initialized():
                if code in (EXIT_OK, 130, 143):  # the ranks agreed: they leave together
                    torch.distributed.barrier()
                torch.distributed.destroy_process_group()
    except Exception:
        pass
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Helpers of the torch trainer's tests (tests/torch/): the real processes,
`scalesweep train` (the built-in) and trainers/torch/train.py, started on the
same fully resolved config, and their JSON lines.

Every test takes the scalesweep binary as its first argument and exits 77
("skipped: no torch") when torch cannot be imported.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN_PY = os.path.join(REPO, "trainers", "torch", "train.py")
# Debian's interpreter has python3-torch; the GPU check passes its own
PY = os.environ.get("SS_TORCH_PYTHON", "/usr/bin/python3")


def need_torch():
    try:
        import torch  # noqa: F401
    except Exception:
        print("skipped: no torch")
        sys.exit(77)
    sys.path.insert(0, os.path.join(REPO, "trainers", "torch"))


def binary():
    if len(sys.argv) < 2:
        sys.exit("usage: %s SCALESWEEP_BINARY" % sys.argv[0])
    return os.path.abspath(sys.argv[1])


class Tmp:
    """A temporary directory, removed at exit unless KEEP_TMP is set."""

    def __init__(self, prefix):
        self.path = tempfile.mkdtemp(prefix=prefix)

    def __enter__(self):
        return self.path

    def __exit__(self, *a):
        if not os.environ.get("KEEP_TMP"):
            shutil.rmtree(self.path, ignore_errors=True)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


def small(steps=100, model=None, train=None, **top):
    """The partial config the tests train: GPT-2 of 2 layers, d_model 64, 4
    heads, T = 32, batch 8 in micro-batches of 4 (256 tokens a step) for
    steps steps at lr 1e-3, evaluated on 1024 tokens every 10 steps, one
    thread; model, train and the top-level keys of top added over it."""
    return dict({"model": dict({"n_layer": 2, "d_model": 64, "n_head": 4, "seq_len": 32},
                               **(model or {})),
                 "train": dict({"batch_size": 8, "micro_batch_size": 4, "tokens": steps * 256,
                                "lr": 1e-3}, **(train or {})),
                 "eval": {"every_tokens": 2560, "tokens": 1024}, "threads": 1}, **top)


def resolve(binary, partial, tmp):
    """The fully resolved config of a partial one, as the built-in prints it."""
    p = write_json(os.path.join(tmp, "partial.json"), partial)
    out = subprocess.run([binary, "train", "--config", p, "--print-config"], check=True,
                         stdout=subprocess.PIPE).stdout
    return json.loads(out)


def events(text):
    return [json.loads(l) for l in text.splitlines() if l.strip()]


def run_builtin(binary, cfg, tmp, name, args=(), env=None):
    """(exit code, events) of `scalesweep train` on cfg."""
    p = write_json(os.path.join(tmp, name + ".json"), cfg)
    r = subprocess.run([binary, "train", "--config", p] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=env)
    return r.returncode, events(r.stdout.decode()), r.stderr.decode()


def torch_env(extra=None):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("SCALESWEEP_") or k in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                 "MASTER_ADDR", "MASTER_PORT"):
            del env[k]
    for k, v in (extra or {}).items():  # None: unset
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def run_torch(cfg, tmp, name, args=(), env=None, timeout=600):
    """(exit code, events, stderr) of train.py on cfg (given by
    SCALESWEEP_CONFIG unless args say --config)."""
    p = write_json(os.path.join(tmp, name + ".json"), cfg)
    e = torch_env(env)
    if "--config" not in args:
        e["SCALESWEEP_CONFIG"] = p
    r = subprocess.run([PY, TRAIN_PY] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=e, timeout=timeout)
    return r.returncode, events(r.stdout.decode()), r.stderr.decode()


def start_torch(cfg, tmp, name, args=(), env=None):
    """A running train.py (stdout piped) on cfg."""
    p = write_json(os.path.join(tmp, name + ".json"), cfg)
    e = torch_env(env)
    e["SCALESWEEP_CONFIG"] = p
    return subprocess.Popen([PY, TRAIN_PY] + list(args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=e)


def wait_for_step(proc, step, lines):
    """Reads proc's lines into `lines` until a step line with step >= step."""
    for raw in proc.stdout:
        ev = json.loads(raw)
        lines.append(ev)
        if ev["event"] == "step" and ev["step"] >= step:
            return ev
    raise AssertionError("the trainer ended before step %d" % step)


def by(evs, kind):
    return [e for e in evs if e["event"] == kind]


def one(evs, kind):
    got = by(evs, kind)
    assert len(got) == 1, "expected one %s line, got %d" % (kind, len(got))
    return got[0]


def check(cond, msg):
    if not cond:
        print("FAIL:", msg)
        sys.exit(1)


def ok(rc, evs, err, what):
    if rc != 0:
        print(err[-3000:])
    check(rc == 0, "%s: exit %d (%s)" % (what, rc, [e for e in evs if e["event"] == "error"]))


def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def losses(evs):
    return [e["train_loss"] for e in by(evs, "step")]


def finals(evs):
    return one(evs, "done")["final_val_loss"]

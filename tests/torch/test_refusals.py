#!/usr/bin/python3
"""What the torch trainer refuses: exit 2 and one error line on stdout that
names the key (JSON path) or file and the value, before it trains:
an unknown key, a missing key (a partial config), an unsupported value,
adamw8bit without bitsandbytes, a shard outside SCALESWEEP_DATA_DIRS (the
path and the allowed directories named) or any shard when it is set but
empty (a worker that allows no directory), WORLD_SIZE other than the config's
world_size, fp16 on a CPU torch without float16 autocast, --compile on
torch < 2, a checkpoint of another config, a corrupt checkpoint.
Usage: test_refusals.py SCALESWEEP_BINARY
"""
import copy
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sstest as t  # noqa: E402


def refused(cfg, tmp, name, needles, args=(), env=None, after_config=False):
    """after_config: the refusal comes once the run is set up (a checkpoint
    is read after the config line, as the built-in does)."""
    rc, evs, err = t.run_torch(cfg, tmp, name, args=args, env=env)
    errs = t.by(evs, "error")
    msg = errs[0]["message"] if errs else ""
    t.check(rc == 2, "%s: exit %d, expected 2 (%s)" % (name, rc, err[-500:]))
    want = ["config", "error"] if after_config else ["error"]
    t.check([e["event"] for e in evs] == want, "%s: expected the lines %s, got %s"
            % (name, want, evs))
    for n in needles:
        t.check(n in msg, "%s: the error %r does not name %r" % (name, msg, n))
    print("%s: exit 2: %s" % (name, msg.split("\n")[0][:160]))


def main():
    t.need_torch()
    binary = t.binary()
    import torch
    with t.Tmp("ss_torch_refuse_") as tmp:
        base = t.resolve(binary, {"model": {"n_layer": 1, "d_model": 32, "n_head": 2,
                                            "seq_len": 16},
                                  "train": {"batch_size": 4, "tokens": 4 * 16 * 4},
                                  "threads": 1}, tmp)

        c = copy.deepcopy(base)
        c["train"]["learning_rate"] = 0.1
        refused(c, tmp, "unknown_key", ["$.train.learning_rate", "unknown key"])
        c = copy.deepcopy(base)
        c["bogus"] = 1
        refused(c, tmp, "unknown_top_key", ["$.bogus", "unknown key"])

        c = copy.deepcopy(base)
        del c["train"]["lr"]
        refused(c, tmp, "missing_key", ["$.train.lr: missing", "--print-config"])
        refused({"model": {"n_layer": 2}}, tmp, "partial", ["$.data: missing"])

        c = copy.deepcopy(base)
        c["train"]["schedule"] = "linear"
        refused(c, tmp, "bad_value", ["$.train.schedule", '"linear"'])
        c = copy.deepcopy(base)
        c["model"]["n_head"] = 3
        refused(c, tmp, "bad_heads", ["$.model.d_model", "32"])

        c = copy.deepcopy(base)
        c["optimizer"]["name"] = "adamw8bit"
        try:
            import bitsandbytes  # noqa: F401
            print("adamw8bit: bitsandbytes is importable here; refusal not tested")
        except Exception:
            refused(c, tmp, "adamw8bit", ["$.optimizer.name", "adamw8bit", "bitsandbytes"])

        # a shard outside the allowed directories
        inside, outside = os.path.join(tmp, "allowed"), os.path.join(tmp, "elsewhere")
        os.makedirs(inside)
        text = os.path.join(tmp, "text.txt")
        with open(text, "w") as f:
            f.write("the quick brown fox jumps over the lazy dog\n" * 200)
        subprocess.run([binary, "data", "prepare", "--out", outside, text], check=True,
                       stdout=subprocess.DEVNULL)
        p = {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 16},
             "data": {"train": os.path.join(outside, "train_*.bin"),
                      "val": os.path.join(outside, "val_*.bin")},
             "train": {"batch_size": 4, "tokens": 4 * 16 * 4}, "threads": 1}
        c = t.resolve(binary, p, tmp)
        refused(c, tmp, "shard_outside", ["$.data.train", os.path.join(outside, "train_*.bin"),
                                          "outside the allowed data directories", inside],
                env={"SCALESWEEP_DATA_DIRS": inside})
        link = os.path.join(inside, "train_000000.bin")
        os.symlink(os.path.join(outside, "train_000000.bin"), link)
        c["data"]["train"] = link
        refused(c, tmp, "shard_symlink_out", [link, "outside the allowed data directories"],
                args=["--data-dir", inside])
        refused(c, tmp, "shard_no_dirs", ["$.data.train", "no data directories are allowed"],
                env={"SCALESWEEP_DATA_DIRS": ""})
        rc, evs, err = t.run_torch(c, tmp, "shard_unconfined")
        t.ok(rc, evs, err, "the same shards unconfined (no SCALESWEEP_DATA_DIRS)")

        c = dict(copy.deepcopy(base), world_size=2)
        c["train"]["micro_batch_size"] = 2
        refused(c, tmp, "world_size", ["$.world_size", "WORLD_SIZE is 3"],
                env={"WORLD_SIZE": "3", "RANK": "0", "MASTER_ADDR": "127.0.0.1",
                     "MASTER_PORT": "1"})

        c = dict(copy.deepcopy(base), precision="fp16")
        import warnings
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with torch.autocast("cpu", dtype=torch.float16):
                    fp16_cpu = (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float16
        except Exception:
            fp16_cpu = False
        if not fp16_cpu:
            refused(c, tmp, "fp16_cpu", ["$.precision", "fp16", "bfloat16"])
        if not hasattr(torch, "compile"):
            refused(base, tmp, "compile", ["--compile", torch.__version__], args=["--compile"])

        # checkpoints: another config's, and a corrupt one
        ck = os.path.join(tmp, "ck")
        c = copy.deepcopy(base)
        c["checkpoint"]["every_tokens"] = 64
        rc, evs, err = t.run_torch(c, tmp, "ck_writer", env={"SCALESWEEP_CHECKPOINT_DIR": ck})
        t.ok(rc, evs, err, "checkpoint writer")
        other = copy.deepcopy(c)
        other["train"]["lr"] = 0.002
        refused(other, tmp, "ck_other_config", ["$.train.lr", "another config"],
                env={"SCALESWEEP_CHECKPOINT_DIR": ck}, after_config=True)
        for name in ("checkpoint.pt", "checkpoint.prev.pt"):
            path = os.path.join(ck, name)
            data = bytearray(open(path, "rb").read())
            data[len(data) // 2] ^= 0xFF
            open(path, "wb").write(bytes(data))
        refused(c, tmp, "ck_corrupt", ["checkpoint.pt", "corrupt"],
                env={"SCALESWEEP_CHECKPOINT_DIR": ck}, after_config=True)
        rc, evs, err = t.run_torch(c, tmp, "ck_corrupt_max",
                                   env={"SCALESWEEP_CHECKPOINT_DIR": ck,
                                        "SCALESWEEP_RESUME_MAX_STEP": "100"})
        t.ok(rc, evs, err, "corrupt checkpoints with a max step (a worker's resume)")
        t.check(t.by(evs, "step")[0]["step"] == 1 and "corrupt" in err,
                "with a max step, corrupt checkpoints start the run afresh, saying so")
    print("ok")


if __name__ == "__main__":
    main()

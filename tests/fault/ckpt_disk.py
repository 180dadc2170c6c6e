"""The checkpoint-disk phase of tests/fault/test_durability.py: a full disk
and corrupt checkpoints, with the real trainer alone (the worker resumes a
run the same way, with --resume DIR).

1. An uninterrupted reference run.
2. The same run checkpointing every 100 steps into a small tmpfs; once it
   has written a checkpoint at or past a step chosen by the seed, the test
   fills the tmpfs: the next checkpoints fail with ENOSPC, which must skip
   them with a line on stderr while training goes on; the trainer is then
   killed (SIGKILL).
3. The filler is removed and one byte of the newest checkpoint flipped:
   --resume must pass over it with a line naming it and why, and resume
   from the previous one; every step and series after it equals the
   reference bit for bit.
4. The newest checkpoint truncated (a torn write) and the previous one
   corrupted: a plain --resume (by hand) fails with exit 2 naming both; the
   worker's (--resume-max-step) must say so and start from scratch, again
   equal to the reference on every step.
"""
import fcntl
import json
import os
import signal
import subprocess

import faultlib

STEP_TOKENS = 8 * 32
STEPS = 2000
CKPT_HDR = 256 * 4  # the checkpoint's int32 header; the step (int64) follows
F_SETPIPE_SZ = 1031  # Linux fcntl: a small pipe keeps the trainer close to what was read


def ckpt_step(path):
    with open(path, "rb") as f:
        f.seek(CKPT_HDR)
        return int.from_bytes(f.read(8), "little", signed=True)


def write_config(tmp, ckdir):
    cfg = {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32},
           "train": {"batch_size": 8, "lr": 0.003, "tokens": STEPS * STEP_TOKENS, "seed": 5},
           "eval": {"tokens": 256, "every_tokens": 500 * STEP_TOKENS},
           "checkpoint": {"dir": ckdir, "every_tokens": 100 * STEP_TOKENS}, "threads": 1}
    path = os.path.join(tmp, "ckdisk.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def train(binary, cfg, env, *extra):
    out = subprocess.run([binary, "train", "--config", cfg, *extra], capture_output=True,
                         text=True, env=env, timeout=300)
    return out.returncode, faultlib.trainer_events(out.stdout), out.stderr


def fill(path):
    """Writes path until the filesystem is full; the bytes written."""
    n = 0
    with open(path, "wb", buffering=0) as f:
        chunk = b"\0" * 4096
        while True:
            try:
                n += f.write(chunk)
            except OSError:
                return n


def run(binary, tmp, rng, env, say, problems):
    """False when the full disk was skipped (not root, or no tmpfs): the
    corrupt checkpoints are still checked on a plain directory; problems
    gets every violation."""
    ref_cfg = write_config(tmp, os.path.join(tmp, "ckref"))
    rc, ev, err = train(binary, ref_cfg, env)
    if rc != 0:
        problems.append(f"the reference run failed ({rc}): {err[-500:]}")
        return True
    ref = faultlib.series_of(ev)
    ref_done = next(e for e in ev if e["event"] == "done")
    mnt = os.path.join(tmp, "ckdisk")
    os.makedirs(mnt)
    if os.geteuid() != 0:
        say("checkpoint disk: the full disk skipped (mounting a tmpfs needs root); the "
            "corrupt checkpoints on a plain directory")
        phase(binary, tmp, mnt, rng, env, say, problems, ref, ref_done, False)
        return False
    # two checkpoints (about 180 KB each) and the temporary one of the next
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt],
                       capture_output=True, text=True)
    if r.returncode != 0:
        say(f"checkpoint disk: the full disk skipped: mount -t tmpfs failed: "
            f"{r.stderr.strip()}; the corrupt checkpoints on a plain directory")
        phase(binary, tmp, mnt, rng, env, say, problems, ref, ref_done, False)
        return False
    try:
        phase(binary, tmp, mnt, rng, env, say, problems, ref, ref_done, True)
    finally:
        subprocess.run(["umount", "-l", mnt])
    return True


def phase(binary, tmp, mnt, rng, env, say, problems, ref, ref_done, full_disk):
    ck = os.path.join(mnt, "ck")
    cfg = write_config(tmp, ck)
    fill_at = rng.choice([300, 400, 500, 600])
    errlog = os.path.join(tmp, "ckdisk.stderr")
    with open(errlog, "w") as ef:
        p = subprocess.Popen([binary, "train", "--config", cfg], stdout=subprocess.PIPE,
                             stderr=ef, env=env, text=True)
        try:
            fcntl.fcntl(p.stdout.fileno(), F_SETPIPE_SZ, 4096)
        except OSError:
            pass
        filled, last, kill_at, kept = 0, 0, None, None
        for line in p.stdout:
            e = json.loads(line) if line.startswith("{") else {}
            if e.get("event") == "step":
                last = e["step"]
            if e.get("event") == "checkpoint" and kept is None and e["step"] >= fill_at:
                p.send_signal(signal.SIGSTOP)
                filled = fill(os.path.join(mnt, "filler")) if full_disk else 0
                kept = {n: ckpt_step(os.path.join(ck, n)) for n in sorted(os.listdir(ck))
                        if n.startswith("checkpoint")}
                p.send_signal(signal.SIGCONT)
                kill_at = max(kept.values()) + 350
            # on a disk with room, at a checkpoint event: never between its renames
            if kill_at and last >= kill_at and (full_disk or e.get("event") == "checkpoint"):
                break
        p.kill()
        p.wait()
    errs = open(errlog).read()
    skipped = [l for l in errs.splitlines() if "skipped" in l and "No space left" in l]
    say(f"checkpoint disk: {'tmpfs of 1 MiB filled' if full_disk else 'not filled'} "
        f"({filled} bytes) after the checkpoint at step "
        f">= {fill_at}; kept {kept}; killed at step {last}; {len(skipped)} checkpoint(s) "
        f"skipped, e.g. {skipped[:1]}")
    if not kept or "checkpoint.bin" not in kept or "checkpoint.prev.bin" not in kept:
        problems.append(f"checkpoint disk: expected checkpoint.bin and checkpoint.prev.bin when "
                        f"the disk filled, found {kept}")
        return
    if not skipped and full_disk:
        problems.append(f"checkpoint disk: no 'checkpoint ... skipped' line for the full disk; "
                        f"stderr: {errs[-500:]}")
    if last < kill_at:
        problems.append(f"checkpoint disk: the trainer stopped at step {last} after the disk "
                        f"filled (expected it to train on); stderr: {errs[-500:]}")
    if full_disk:
        now = {n: ckpt_step(os.path.join(ck, n)) for n in kept}
        if now != kept:
            problems.append(f"checkpoint disk: the kept checkpoints changed while the disk was "
                            f"full: {kept} then {now}")
        os.unlink(os.path.join(mnt, "filler"))
    else:
        kept = {n: ckpt_step(os.path.join(ck, n)) for n in sorted(os.listdir(ck))
                if n.startswith("checkpoint")}

    newest, prev = os.path.join(ck, "checkpoint.bin"), os.path.join(ck, "checkpoint.prev.bin")
    at = faultlib.flip_bits(newest, os.path.getsize(newest), rng, 0x40)
    rc, ev, err = train(binary, cfg, env, "--resume", ck)
    want_line = f"checkpoint {newest}: checksum mismatch"
    from_line = f"resuming from {prev} (step {kept['checkpoint.prev.bin']})"
    line = next((l for l in err.splitlines() if want_line in l), "")
    say(f"corrupt newest (byte {at} flipped): exit {rc}; {line!r}")
    start = kept["checkpoint.prev.bin"]
    check_resumed(problems, "resume past a corrupt checkpoint", rc, ev, err, ref, ref_done, start)
    if not line or from_line not in line:
        problems.append(f"resume past a corrupt checkpoint: no line '{want_line} ...; "
                        f"{from_line}' on stderr: {err[-600:]}")

    # a torn newest and a corrupt previous one: from scratch
    with open(newest, "r+b") as f:
        f.truncate(os.path.getsize(newest) // 2)
    with open(prev, "r+b") as f:
        f.seek(rng.randrange(4096, os.path.getsize(prev) - 16))
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0x01]))
    # by hand (plain --resume) that is an error naming both files
    rc, ev, err = train(binary, cfg, env, "--resume", ck)
    msg = next((e.get("message", "") for e in ev if e.get("event") == "error"), "")
    say(f"torn newest, corrupt previous, plain --resume: exit {rc}; {msg!r}")
    if rc != 2 or newest not in msg or prev not in msg:
        problems.append(f"both checkpoints bad, plain --resume: exit {rc} (expected 2), error "
                        f"{msg!r} (expected both files named)")
    # as the worker resumes (--resume-max-step): from scratch
    rc, ev, err = train(binary, cfg, env, "--resume", ck, "--resume-max-step", str(STEPS))
    lines = [l for l in err.splitlines() if l.startswith("scalesweep train: checkpoint ")]
    say(f"torn newest, corrupt previous, as the worker resumes: exit {rc}; {lines}")
    check_resumed(problems, "both checkpoints bad", rc, ev, err, ref, ref_done, 0)
    if not any(newest in l and "truncated" in l for l in lines) or \
            not any(prev in l and "checksum mismatch" in l and "starting from scratch" in l
                    for l in lines):
        problems.append(f"both checkpoints bad: expected lines naming {newest} (truncated) and "
                        f"{prev} (checksum mismatch; starting from scratch): {err[-600:]}")


def check_resumed(problems, what, rc, ev, err, ref, ref_done, start):
    if rc != 0:
        problems.append(f"{what}: exit {rc}: {err[-500:]}")
        return
    got = faultlib.series_of(ev)
    first = min((e["step"] for e in ev if e["event"] == "step"), default=None)
    if first != start + 1:
        problems.append(f"{what}: the first step trained is {first}, expected {start + 1}")
    problems.extend(faultlib.diff_series(got, {s: v for s, v in ref.items() if s > start}, what))
    done = next((e for e in ev if e["event"] == "done"), {})
    if done.get("final_val_loss") != ref_done["final_val_loss"]:
        problems.append(f"{what}: final val loss {done.get('final_val_loss')!r}, uninterrupted "
                        f"{ref_done['final_val_loss']!r}")

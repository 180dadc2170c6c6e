#!/usr/bin/python3
"""A declared trainer for tests/integration/test_trainers.py: what a worker
started with --trainer fake="/usr/bin/python3 contract_trainer.py" runs,
through `scalesweep launch`, for a run whose config says "trainer": "fake"
(docs/trainers.md). It reads its run config from $SCALESWEEP_CONFIG, writes
the contract's environment to stderr (the attempt's log), one line per
variable:
    contract_trainer: rank R env NAME=VALUE     (NAME=<unset> when unset)
and prints the trainer's JSON lines on stdout. The config is all a run
carries, so train.seed chooses what it does:

  1  a good run: config, 4 steps, evals at steps 2 and 4, a checkpoint at
     step 4 (a file in $SCALESWEEP_CHECKPOINT_DIR), done (final_val_loss
     3 + tokens / 1e6, so each run's is its own)
  2  stdout line 3 is not JSON
  3  stdout line 3 is 10 MB long (a JSON string, never ended by a newline
     before the worker gives up on it)
  4  stdout line 3 is an unknown event ("gossip")
  5  exits 0 after its steps without a done event
  6  prints done without final_val_loss (stdout line 9)
  7  hangs: config and one step, then sleeps for an hour
  8  stdout line 3 is a step without train_loss (an invalid row)
  9  a good run whose steps come 1.2 s apart (5 s in all)

With WORLD_SIZE > 1, the ranks meet as torch.distributed's env:// would:
rank 0 listens on MASTER_ADDR:MASTER_PORT and every other rank connects to
it, and stays until rank 0 says it has finished; a rank other than 0
prints a line that is not JSON on its stdout (which the launcher sends to
the log, not to the worker) and nothing else there."""
import json
import os
import socket
import sys
import time

VARS = ("SCALESWEEP_CONFIG", "SCALESWEEP_CHECKPOINT_DIR", "SCALESWEEP_DATA_DIRS",
        "SCALESWEEP_RUN_ID", "SCALESWEEP_ATTEMPT", "SCALESWEEP_TRAINER", "SCALESWEEP_TOKEN",
        "SCALESWEEP_DIST_SECRET", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
        "MASTER_ADDR", "MASTER_PORT")


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def meet(rank, world):
    """The ranks find each other at MASTER_ADDR:MASTER_PORT: rank 0's
    connections to the others, or this rank's to rank 0."""
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if rank == 0:
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((addr, port))
        srv.listen(world)
        srv.settimeout(30)
        conns = []
        for _ in range(world - 1):
            conn, _ = srv.accept()
            conn.settimeout(30)
            heard = conn.recv(64).decode()
            conns.append(conn)
            print(f"contract_trainer: rank 0 heard '{heard}' on port {port}", file=sys.stderr)
        srv.close()
        return conns
    deadline = time.time() + 30
    while True:
        try:
            s = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)
    s.sendall(f"rank {rank}".encode())
    return [s]


def main():
    rank = int(os.environ.get("RANK", "-1"))
    world = int(os.environ.get("WORLD_SIZE", "0"))
    for v in VARS:
        print(f"contract_trainer: rank {rank} env {v}={os.environ.get(v, '<unset>')}",
              file=sys.stderr)
    sys.stderr.flush()
    cfg = json.load(open(os.environ["SCALESWEEP_CONFIG"]))
    m, t = cfg["model"], cfg["train"]
    seed = t["seed"]
    peers = meet(rank, world) if world > 1 else []
    if rank != 0:
        # not JSON, on stdout: the launcher sends a rank's stdout other
        # than rank 0's to the log, so that it breaks no contract
        print(f"rank {rank} of {world}: nothing for the worker here")
        sys.stdout.flush()
        peers[0].settimeout(60)
        said = peers[0].recv(64).decode()
        print(f"contract_trainer: rank {rank}: rank 0 said '{said}'", file=sys.stderr)
        return 0
    try:
        return run(cfg, m, t, seed)
    finally:
        for p in peers:
            p.sendall(b"finished")
            p.close()


def run(cfg, m, t, seed):
    n = 12 * m["n_layer"] * m["d_model"] ** 2
    per_step = t["batch_size"] * m["seq_len"]
    steps, final = 4, 3 + t["tokens"] / 1e6
    out({"event": "config", "config": cfg, "params": n + m["vocab_size"] * m["d_model"],
         "nonembedding_params": n, "flops_per_token": 6 * n})
    out({"event": "step", "step": 1, "tokens": per_step, "train_loss": final + 2.0,
         "lr": t["lr"], "grad_norm": 1.0, "tok_per_s": 1000.0})
    if seed == 7:  # hangs
        time.sleep(3600)
        return 0
    if seed == 2:
        sys.stdout.write("this is not JSON\n")
        sys.stdout.flush()
    elif seed == 3:  # 10 MB in one line
        sys.stdout.write('{"event": "step", "pad": "')
        chunk = "x" * (1 << 20)
        for _ in range(10):
            sys.stdout.write(chunk)
        sys.stdout.write('"}\n')
        sys.stdout.flush()
    elif seed == 4:
        out({"event": "gossip", "step": 2})
    elif seed == 8:
        out({"event": "step", "step": 2, "tokens": 2 * per_step, "lr": t["lr"]})
    for s in range(2, steps + 1):
        if seed == 9:
            time.sleep(1.2)
        out({"event": "step", "step": s, "tokens": s * per_step,
             "train_loss": final + 2.0 / s, "lr": t["lr"], "grad_norm": 1.0 / s,
             "tok_per_s": 1000.0})
        if s % 2 == 0:
            out({"event": "eval", "step": s, "tokens": s * per_step,
                 "val_loss": final + 1.0 / s - 0.25})
    if seed == 5:  # exit 0, no done
        return 0
    ck = os.environ.get("SCALESWEEP_CHECKPOINT_DIR")
    if ck:
        os.makedirs(ck, exist_ok=True)
        path = os.path.join(ck, f"fake-{steps}.json")
        with open(path, "w") as f:
            json.dump({"step": steps}, f)
        out({"event": "checkpoint", "step": steps, "path": path})
    done = {"event": "done", "final_val_loss": final, "params": n + m["vocab_size"] * m["d_model"],
            "nonembedding_params": n, "flops": 6.0 * n * steps * per_step,
            "flops_6nd": 6.0 * n * steps * per_step, "tokens": steps * per_step, "steps": steps,
            "wall_s": 0.1, "peak_rss_bytes": 1 << 20}
    if seed == 6:
        del done["final_val_loss"]
    out(done)
    return 0


if __name__ == "__main__":
    sys.exit(main())

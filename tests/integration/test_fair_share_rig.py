"""What the fair-share, limits and accounting tests share (not a test
itself): a database migrated by the real binary with people and their
tokens put in by SQL (the scheduler loads them when it starts), the real
scheduler, and a worker stand-in on the worker port (CPU slots or simulated
GPUs, as tests/integration/test_placement.py's) whose runs end when the
test says, with the metric batches and checkpoints the test sends.
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

from harness import WireWorker, api_request, free_port, psql, wait_healthz


class Rig:
    def __init__(self, binary, prefix, people, extra=()):
        """people: {name: role}; each gets a token (self.token_file[name])."""
        self.bin = binary
        self.db = os.environ["SCALESWEEP_TEST_DB"]
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        self.cluster = os.urandom(16).hex()
        self.token_file = {"admin": self._write("admin", self.cluster)}
        self.api_port, self.wport = free_port(), free_port()
        self.workers = []
        subprocess.run([binary, "migrate", "--database", self.db], check=True,
                       capture_output=True)
        for name, role in people.items():
            tok = os.urandom(32).hex()
            self.token_file[name] = self._write(name, tok)
            psql("WITH u AS (INSERT INTO users (name, role, priority_max) VALUES ('%s', '%s', 10) "
                 "RETURNING id) "
                 "INSERT INTO user_tokens (hash, user_id) SELECT sha256(convert_to('%s', "
                 "'UTF8')), id FROM u" % (name, role, tok))
        self.log = open(os.path.join(self.tmp, "scheduler.log"), "w")
        self.sched = subprocess.Popen(
            [binary, "scheduler", "--database", self.db, "--token-file",
             self.token_file["admin"], "--listen", "127.0.0.1:%d" % self.api_port, "--workers",
             "127.0.0.1:%d" % self.wport, "--checkpoints", os.path.join(self.tmp, "ck"),
             "--retry-after-seconds", "0", *extra], stdout=self.log, stderr=self.log)
        if not wait_healthz(lambda m, p: self.request("admin", m, p), proc=self.sched):
            self.fail("the scheduler did not come up")

    def _write(self, name, token):
        path = os.path.join(self.tmp, name + ".token")
        with open(path, "w") as f:
            f.write(token)
        os.chmod(path, 0o600)
        return path

    def request(self, who, method, path, body=None):
        return api_request(self.api_port, self.token_file[who], method, path, body)

    def cli(self, who, *args):
        return subprocess.run([self.bin, *args, "--url", "http://127.0.0.1:%d" % self.api_port,
                               "--token-file", self.token_file[who]],
                              capture_output=True, text=True, timeout=60)

    def submit(self, who, spec):
        st, doc = self.request(who, "POST", "/api/sweeps", spec)
        if st != 201:
            self.fail("%s's sweep %s: %s %s" % (who, spec["name"], st, doc))
        return doc["id"]

    def owner_of(self, run_id):
        return psql("SELECT u.name FROM runs r JOIN sweeps s ON s.id = r.sweep_id "
                    "JOIN users u ON u.id = s.owner_id WHERE r.id = %d" % run_id)

    def worker(self, name, cpu_slots=0, gpus=0):
        w = Worker(self, name, cpu_slots, gpus)
        self.workers.append(w)
        return w

    def fail(self, msg):
        print("FAIL:", msg, file=sys.stderr)
        self.close()
        print(open(os.path.join(self.tmp, "scheduler.log")).read()[-4000:], file=sys.stderr)
        sys.exit(1)

    def check(self, cond, msg):
        if not cond:
            self.fail(msg)

    def close(self):
        for w in self.workers:
            try:
                w.sock.close()
            except OSError:
                pass
        if self.sched.poll() is None:
            self.sched.terminate()
            try:
                self.sched.wait(15)
            except subprocess.TimeoutExpired:
                self.sched.kill()


class Worker(WireWorker):
    """A worker stand-in: cpu_slots CPU slots, or gpus simulated GPUs."""

    def __init__(self, rig, name, cpu_slots, gpus):
        self.rig = rig
        devs = [{"index": i, "name": "Fake GPU", "memory_bytes": 1 << 34} for i in range(gpus)]
        hello = {"type": "hello", "version": 1, "token": rig.cluster, "name": name, "host": name,
                 "gpus": devs, "cpu_slots": cpu_slots, "runs": []}
        super().__init__(rig.wport, hello)
        self.seq = 0
        self.assigns = []  # assigns that came while waiting for something else

    def next(self, pred, timeout, fail=None):
        """WireWorker.next, with every assign it would skip kept for
        assigned(): the scheduler may place a run on a freed slot before it
        acks the message that freed it."""
        def keep(m):
            if pred(m):
                return True
            if m.get("type") == "assign":
                self.assigns.append(m)
            return False
        return super().next(keep, timeout, fail)

    def assigned(self, timeout):
        """The next assign within timeout seconds, started; None if none."""
        if self.assigns:
            m = self.assigns.pop(0)
        else:
            m = self.next(lambda m: m["type"] == "assign", timeout, self.rig.fail)
        if m is not None:
            self.send({"type": "started", "run_id": m["run_id"], "attempt": m["attempt"],
                       "config": {"event": "config"}})
        return m

    def acked(self, seq):
        m = self.next(lambda m: m.get("type") == "ack" and m.get("seq") == seq, 10,
                      self.rig.fail)
        self.rig.check(m is not None, "no ack of message %d" % seq)

    def metrics(self, a, steps):
        self.seq += 1
        rows = [{"event": "step", "step": s, "tokens": s * 256, "train_loss": 5.0 / (s + 1),
                 "lr": 1e-3} for s in steps]
        self.send({"type": "metrics", "run_id": a["run_id"], "attempt": a["attempt"],
                   "seq": self.seq, "rows": rows})
        self.acked(self.seq)

    def checkpoint(self, a, step):
        self.send({"type": "checkpoint", "run_id": a["run_id"], "attempt": a["attempt"],
                   "step": step, "path": "/ck/%d/%d" % (a["run_id"], step)})

    def finish(self, a, how="succeeded", checkpoint_step=None):
        """Ends an attempt: succeeded, failed (killed: exit 137) or fenced
        (interrupted by its worker's fence, after checkpoint_step)."""
        self.seq += 1
        m = {"type": "finished", "run_id": a["run_id"], "attempt": a["attempt"],
             "seq": self.seq, "exit_code": 0, "signal": 0, "error": None, "log_tail": "",
             "done": None}
        if how == "succeeded":
            m["done"] = {"event": "done", "final_val_loss": 3.0, "params": 1000,
                         "nonembedding_params": 800, "flops": 1e9, "flops_6nd": 1e9,
                         "tokens": 25600, "steps": 100, "wall_s": 1, "peak_rss_bytes": 1}
        elif how == "failed":
            m.update(exit_code=137, signal=9, error="killed (test)")
        else:
            m.update(exit_code=143, signal=15, interrupted=True, fenced=True)
            if checkpoint_step is not None:
                m["checkpoint_step"] = checkpoint_step
        self.send(m)
        self.acked(self.seq)


def spec(name, n, gpus=0, priority=0):
    return {"name": name, "method": "runs", "priority": priority,
            "base": {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32},
                     "train": {"batch_size": 8, "lr": 0.003, "tokens": 25600}},
            "runs": [{"train": {"seed": i + 1}} for i in range(n)],
            "resources": {"gpus": gpus} if gpus else {"cpus": 1}}

#!/usr/bin/env python3
"""A shared cluster's people (issue 36: people and tokens, ownership and
roles, the audit trail), against a real scheduler and a throwaway
PostgreSQL (run through tests/integration/run_with_pg.sh), over loopback:

- the admin (the --api-token-file's token) adds two members and a viewer
  with `scalesweep user add`, which prints each token once;
- each role's allowed and refused actions, through the API and the CLI:
  members submit, cancel, reprioritise (within their range) and extend
  (`next --submit`) only their own sweeps and reproduce any run; a viewer
  only reads; user management and the audit are the admin's. Every
  refusal is 403 saying what and why (the CLI prints it and exits 1);
- `user token` replaces a token (the old one refused at once); `user
  revoke` refuses the user's token at the next request, reads included,
  and closes the event stream the user had open;
- no token is in the clear in any table (every row of every table read
  as text), while its SHA-256 is;
- the audit trail holds each change and refusal: who, from which address,
  what, the outcome (`scalesweep audit --user`, GET /api/audit);
- under --closed-reads only a token reads.

Usage: test_users.py SCALESWEEP_BINARY
"""
import hashlib
import json
import os
import socket
import subprocess
import sys
import time

from harness import Rig, http_request, psql

BIN = sys.argv[1]
rig = Rig(BIN, "ss-users-", logs=("scheduler",))
check, fail = rig.check, rig.fail


def spec(name, priority=0):
    """Two runs needing a GPU: with no GPU worker they stay queued."""
    return {"name": name, "method": "runs", "priority": priority,
            "base": {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32},
                     "train": {"batch_size": 8, "lr": 0.003, "tokens": 25600}},
            "runs": [{"train": {"seed": i + 1}} for i in range(2)],
            "resources": {"gpus": 1}}


def req(token, method, path, body=None):
    """(status, decoded body) of a request with token (None: no token)."""
    h = {"Authorization": "Bearer " + token} if token else {}
    st, data, _ = http_request(rig.api_port, method, path, body, h)
    try:
        return st, json.loads(data) if data else None
    except ValueError:
        return st, data


def token_file(name, token):
    path = os.path.join(rig.tmp, name + ".token")
    with open(path, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)
    return path


def cli(tfile, *args):
    return subprocess.run([BIN, *args, "--url", f"http://127.0.0.1:{rig.api_port}",
                           "--token-file", tfile], capture_output=True, text=True, timeout=60)


def add_user(name, role):
    """`scalesweep user add`: the token it printed (once, alone on stdout)."""
    p = cli(rig.token, "user", "add", name, "--role", role)
    check(p.returncode == 0, f"user add {name}: {p.returncode} {p.stderr}")
    tok = p.stdout.strip()
    check(len(tok) == 64 and all(c in "0123456789abcdef" for c in tok),
          f"user add {name} printed {p.stdout!r}, not a 256-bit token")
    return tok


def refused(st, body, *words):
    msg = (body or {}).get("error", {}).get("message", "") if isinstance(body, dict) else ""
    return st == 403 and all(w in msg for w in words)


def roles(admin, ann, bob, vic):
    st, a = req(ann, "POST", "/api/sweeps", spec("ann-1"))
    check(st == 201, f"a member's submit: {st} {a}")
    st, b = req(bob, "POST", "/api/sweeps", spec("bob-1"))
    check(st == 201, f"the other member's submit: {st} {b}")
    A, B = a["id"], b["id"]
    owners = psql(f"SELECT u.name FROM sweeps s JOIN users u ON u.id = s.owner_id "
                  f"WHERE s.id IN ({A}, {B}) ORDER BY s.id")
    check(owners.split() == ["ann", "bob"], f"owners stored: {owners!r}")
    # a member may not touch another's sweep: 403 saying what and why
    st, e = req(bob, "POST", f"/api/sweeps/{A}/cancel", {})
    check(refused(st, e, "cancel", f"sweep {A}", "ann", "only the sweeps they submitted"),
          f"bob cancelling ann's sweep: {st} {e}")
    p = cli(token_file("bob", bob), "cancel", str(A))
    check(p.returncode == 1 and "403" in p.stderr and "refused" in p.stderr,
          f"CLI: bob cancelling ann's sweep: {p.returncode} {p.stderr}")
    st, e = req(bob, "POST", f"/api/sweeps/{A}/priority", {"priority": -5})
    check(refused(st, e, "priority"), f"bob reprioritising ann's sweep: {st} {e}")
    st, e = req(bob, "POST", f"/api/sweeps/{A}/next", {})
    check(refused(st, e, "next"), f"bob extending ann's sweep: {st} {e}")
    run_b = req(admin, "GET", f"/api/sweeps/{B}/runs")[1]["runs"][0]["id"]
    st, e = req(ann, "POST", f"/api/runs/{run_b}/cancel", {})
    check(refused(st, e, "cancel", f"run {run_b}"), f"ann cancelling bob's run: {st} {e}")
    # within the range an admin allows: members start at ..0
    st, e = req(ann, "POST", f"/api/sweeps/{A}/priority", {"priority": 5})
    check(refused(st, e, "outside the range"), f"ann's priority 5 out of range: {st} {e}")
    st, e = req(ann, "POST", "/api/sweeps", spec("ann-high", priority=5))
    check(refused(st, e, "outside the range"), f"ann submitting at priority 5: {st} {e}")
    p = cli(rig.token, "user", "set", "ann", "--priority-range", "-10:10")
    check(p.returncode == 0, f"user set: {p.returncode} {p.stderr}")
    p = cli(token_file("ann", ann), "priority", str(A), "5")
    check(p.returncode == 0 and "priority 5" in p.stdout, f"ann's priority 5: {p.stderr}")
    check(psql(f"SELECT DISTINCT priority FROM runs WHERE sweep_id = {A}") == "5",
          "the queued runs' priority did not follow")
    p = cli(token_file("ann", ann), "priority", str(A), "-3")  # a number, not an option
    check(p.returncode == 0 and "priority -3" in p.stdout,
          f"ann's priority -3: {p.returncode} {p.stdout} {p.stderr}")
    # a viewer reads and changes nothing
    st, _ = req(vic, "GET", f"/api/sweeps/{A}")
    check(st == 200, f"a viewer's read: {st}")
    for method, path, body in (("POST", "/api/sweeps", spec("vic-1")),
                               ("POST", f"/api/sweeps/{A}/cancel", {}),
                               ("POST", f"/api/runs/{run_b}/reproduce", {})):
        st, e = req(vic, method, path, body)
        check(refused(st, e, "viewer may only read"), f"viewer {path}: {st} {e}")
    # the owners' own changes, and reproducing anyone's run
    st, e = req(bob, "POST", f"/api/runs/{run_b}/cancel", {})
    check(st == 200, f"bob cancelling his run: {st} {e}")
    st, e = req(ann, "POST", f"/api/runs/{run_b}/reproduce", {})
    check(st == 201, f"ann reproducing bob's run: {st} {e}")
    p = cli(token_file("ann", ann), "cancel", str(A))
    check(p.returncode == 0, f"CLI: ann cancelling her sweep: {p.returncode} {p.stderr}")
    st, e = req(admin, "POST", f"/api/sweeps/{B}/cancel", {})
    check(st == 200, f"the admin cancelling bob's sweep: {st} {e}")
    # the admin's routes
    for tok in (ann, vic):
        st, e = req(tok, "POST", "/api/users", {"name": "eve", "role": "admin"})
        why = "only an admin" if tok == ann else "viewer may only read"
        check(refused(st, e, "refused", why), f"a non-admin adding a user: {st} {e}")
        st, e = req(tok, "GET", "/api/audit")
        check(refused(st, e, "refused", why), f"a non-admin reading the audit: {st} {e}")
    p = cli(token_file("vic", vic), "user", "list")
    check(p.returncode == 1 and "403" in p.stderr, f"CLI: a viewer's user list: {p.stderr}")
    st, me = req(bob, "GET", "/api/me")
    check(st == 200 and me["name"] == "bob" and me["role"] == "member", f"/api/me: {st} {me}")
    return A, B


def open_stream(token):
    s = socket.create_connection(("127.0.0.1", rig.api_port), timeout=10)
    s.sendall(("GET /api/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n"
               % token).encode())
    head = s.recv(4096)
    check(head.startswith(b"HTTP/1.1 200"), f"event stream: {head[:80]!r}")
    return s


def stream_closed(s, within):
    s.settimeout(within)
    deadline = time.time() + within
    try:
        while time.time() < deadline:
            if not s.recv(4096):
                return True
    except (socket.timeout, ConnectionError):
        return False
    return False


def revocation(ann, vic):
    old = ann
    p = cli(rig.token, "user", "token", "ann")
    check(p.returncode == 0, f"user token: {p.stderr}")
    ann = p.stdout.strip()
    st, e = req(old, "GET", "/api/sweeps")
    check(st == 401, f"ann's replaced token still read: {st} {e}")
    st, _ = req(ann, "GET", "/api/sweeps")
    check(st == 200, f"ann's new token: {st}")
    s = open_stream(vic)
    p = cli(rig.token, "user", "revoke", "vic")
    check(p.returncode == 0 and "revoked" in p.stdout, f"user revoke: {p.stdout} {p.stderr}")
    check(stream_closed(s, 5), "the revoked viewer's event stream stayed open")
    st, e = req(vic, "GET", "/api/sweeps")
    check(st == 401, f"a revoked token read: {st} {e}")
    st, e = req(vic, "POST", "/api/sweeps", spec("vic-2"))
    check(st == 401, f"a revoked token submitted: {st} {e}")
    return ann


def no_token_in_clear(tokens):
    tables = psql("SELECT string_agg(quote_ident(table_name), ' ') FROM information_schema.tables "
                  "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'").split()
    check("user_tokens" in tables and "audit" in tables, f"tables: {tables}")
    text = "\n".join(psql(f"SELECT coalesce(string_agg(t::text, E'\\n'), '') FROM {t} t")
                     for t in tables)
    for tok in tokens:
        check(tok not in text, "a token is in the clear in the database")
        h = hashlib.sha256(tok.encode()).hexdigest()
        check(psql(f"SELECT count(*) FROM user_tokens WHERE hash = decode('{h}', 'hex')") == "1",
              "a token's SHA-256 is not stored")


def audit(A):
    st, rows = req(open(rig.token).read().strip(), "GET", "/api/audit?user=bob")
    check(st == 200, f"GET /api/audit: {st} {rows}")
    bad = [r for r in rows if r["action"] == "cancel" and r["target"] == f"sweep {A}"]
    check(bad and bad[-1]["outcome"] == "refused" and bad[-1]["peer"].startswith("127.0.0.1")
          and "only the sweeps they submitted" in bad[-1]["detail"],
          f"bob's refused cancel in the audit: {rows}")
    p = cli(rig.token, "audit", "--user", "ann", "--since", "2000-01-01")
    check(p.returncode == 0 and "cancel" in p.stdout and f"sweep {A}" in p.stdout
          and " ok " in p.stdout, f"scalesweep audit --user ann: {p.stdout} {p.stderr}")
    acts = set(psql("SELECT string_agg(DISTINCT action || ':' || outcome, '|') FROM audit")
               .split("|"))
    for want in ("submit:ok", "submit:refused", "cancel:ok", "cancel:refused", "priority:ok",
                 "priority:refused", "next:refused", "reproduce:ok", "reproduce:refused",
                 "user add:ok", "user add:refused", "user add:failed", "user revoke:ok",
                 "user token:ok", "user priority:ok"):
        check(want in acts, f"no audit row {want}: {sorted(acts)}")
    p = cli(rig.token, "audit", "--since", "yesterday; DROP")
    check(p.returncode == 2, f"a bad --since: {p.returncode} {p.stderr}")


def closed_reads(ann):
    rig.stop("scheduler")
    rig.start_scheduler("--closed-reads")
    st, _ = req(None, "GET", "/api/sweeps")
    check(st == 401, f"an anonymous read under --closed-reads: {st}")
    st, _ = req(ann, "GET", "/api/sweeps")
    check(st == 200, f"a member's read under --closed-reads (token table reloaded): {st}")


try:
    rig.start_scheduler()
    admin = open(rig.token).read().strip()
    ann, bob, vic = add_user("ann", "member"), add_user("bob", "member"), add_user("vic", "viewer")
    st, e = req(admin, "POST", "/api/users", {"name": "ann", "role": "member"})
    check(st == 409, f"adding ann twice: {st} {e}")
    st, e = req(admin, "POST", "/api/users", {"name": "Ann!", "role": "member"})
    check(st == 400 and "$.name" in e["error"]["message"], f"a bad name: {st} {e}")
    A, B = roles(admin, ann, bob, vic)
    ann2 = revocation(ann, vic)
    no_token_in_clear([ann, ann2, bob, vic])
    audit(A)
    closed_reads(ann2)
    print("users: roles, refusals, revocation, hashes and audit OK")
finally:
    rig.close()

#!/usr/bin/env bash
# `scalesweep train` through the real binary: determinism, kill-and-resume bit for
# bit (fp32 with accumulation, bf16 + 8-bit AdamW, fp16, shards), recompute,
# gradient accumulation, low-precision training, the config event's closed forms,
# shard hashes, and partial configs.
# Usage: test_train.sh PATH/TO/scalesweep
#
# Every run is tiny and single-threaded (threads: 1) except one determinism check
# at threads: 2, so the script fits in well under 90 s on 2 shared CI cores.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cli_setup "$@"

# ---- helpers ---------------------------------------------------------------
cat >"$tmp/h.py" <<'PY'
import difflib, hashlib, json, math, os, re, signal, struct, subprocess, sys
import threading
from collections import Counter

from clilib import TIMING, die

def strict(text):
    def bad(c):
        raise ValueError("non-JSON number " + c)
    return json.loads(text, parse_constant=bad)

def lines(path):
    with open(path) as f:
        return [l.rstrip("\n") for l in f if l.strip()]

def events(path):
    out = []
    for i, l in enumerate(lines(path), 1):
        try:
            o = strict(l)
        except ValueError as e:
            die("%s line %d is not valid JSON (%s): %s" % (path, i, e, l[:300]))
        if not isinstance(o, dict) or "event" not in o:
            die("%s line %d has no event: %s" % (path, i, l[:300]))
        out.append((o, TIMING.sub("", l)))
    return out

def step_of(o):
    return o.get("step")

def diff(name_a, a, name_b, b):
    d = list(difflib.unified_diff(a, b, name_a, name_b, n=0, lineterm=""))
    return "\n".join(x[:400] for x in d[:12])

def cmd_validate(path, first="1", complete="1"):
    """Strict JSON lines; config first; steps consecutive from FIRST; tokens =
    step x batch x seq_len; with COMPLETE, done last and it counts the steps."""
    ev = events(path)
    if not ev or ev[0][0]["event"] != "config":
        die("%s: the first line is not a config event" % path)
    c = ev[0][0]["config"]
    per_step = c["train"]["batch_size"] * c["model"]["seq_len"]
    want = int(first)
    for o, _ in ev:
        if o["event"] == "step":
            if o["step"] != want:
                die("%s: step %s follows step %d (gap or repeat)" % (path, o["step"], want - 1))
            if o["tokens"] != o["step"] * per_step:
                die("%s: step %d reports tokens %s, expected %d"
                    % (path, o["step"], o["tokens"], o["step"] * per_step))
            want += 1
    if complete == "1":
        if ev[-1][0]["event"] != "done":
            die("%s: the last line is not a done event: %s" % (path, ev[-1][1][:300]))
        d = ev[-1][0]
        steps = c["train"]["tokens"] // per_step
        if d["steps"] != steps or want - 1 != steps or d["tokens"] != steps * per_step:
            die("%s: done says steps %s tokens %s; expected %d steps of %d tokens"
                % (path, d["steps"], d["tokens"], steps, per_step))

def cmd_field(path, event, key):
    """KEY of the last EVENT line, as JSON text (strings unquoted)."""
    v = None
    for o, _ in events(path):
        if o["event"] == event:
            v = o
    if v is None or key not in v:
        die("%s: no %s event with %s" % (path, event, key))
    x = v[key]
    print(x if isinstance(x, str) else json.dumps(x))

def cmd_same(a, b, what, evs="step,eval,done"):
    """The EVS lines of two outputs are identical once timings are stripped."""
    keep = evs.split(",")
    la = [t for o, t in events(a) if o["event"] in keep]
    lb = [t for o, t in events(b) if o["event"] in keep]
    if not la:
        die("%s: no %s lines" % (a, evs))
    if la != lb:
        die("%s: %s and %s differ (%s lines):\n%s"
            % (what, a, b, evs, diff(a, la, b, lb)))

def cmd_resume(full, killed, resumed, mode, ckpt_seen="0"):
    """FULL: an uninterrupted run. KILLED: the same config stopped by a signal.
    RESUMED: --resume from KILLED's checkpoint directory. The killed run's lines up
    to the checkpoint and the resumed run's lines must together equal FULL's."""
    A, B, R = events(full), events(killed), events(resumed)
    if A[0][1] != R[0][1]:
        die("resume (%s): the resumed run's config event differs:\n%s"
            % (mode, diff(full, [A[0][1]], resumed, [R[0][1]])))
    rsteps = [o["step"] for o, _ in R if o["event"] == "step"]
    if not rsteps:
        die("resume (%s): %s has no step lines" % (mode, resumed))
    s0 = rsteps[0] - 1
    bck = [o["step"] for o, _ in B if o["event"] == "checkpoint"]
    bsteps = [o["step"] for o, _ in B if o["event"] == "step"]
    if mode == "term":
        # SIGTERM: the trainer finishes its step, writes a checkpoint, exits 143.
        if not bck or bck[-1] != bsteps[-1]:
            die("resume (term): %s: last checkpoint event %s is not at the last step %s"
                % (killed, bck[-1:] or "none", bsteps[-1]))
        if s0 != bck[-1]:
            die("resume (term): resumed at step %d, the SIGTERM checkpoint is step %d"
                % (s0 + 1, bck[-1]))
    else:
        # SIGKILL after a periodic checkpoint: resume from it (or a later one written
        # before the kill landed), at a checkpoint boundary.
        every = A[0][0]["config"]["checkpoint"]["every_tokens"]
        per = A[0][0]["config"]["train"]["batch_size"] * A[0][0]["config"]["model"]["seq_len"]
        if s0 < int(ckpt_seen) or s0 not in bck or (s0 * per) % every:
            die("resume (kill): resumed after step %d; checkpoints seen %s, every %d tokens"
                % (s0, bck, every))
    keep = ("step", "eval", "done")
    head = [t for o, t in B if o["event"] in ("step", "eval") and o["step"] <= s0]
    full_head = [t for o, t in A if o["event"] in ("step", "eval") and o["step"] <= s0]
    if head != full_head:
        die("resume (%s): the interrupted run differs from the uninterrupted one "
            "before step %d:\n%s" % (mode, s0, diff(full, full_head, killed, head)))
    # everything FULL printed from step s0+1 on, checkpoint events included
    i = next(i for i, (o, _) in enumerate(A) if o["event"] == "step" and o["step"] == s0 + 1)
    want = [t for o, t in A[i:] if o["event"] in keep + ("checkpoint",)]
    got = [t for o, t in R[1:] if o["event"] in keep + ("checkpoint",)]
    if want != got:
        die("resume (%s): after resuming at step %d the lines differ from the "
            "uninterrupted run:\n%s" % (mode, s0 + 1, diff(full, want, resumed, got)))
    print(s0)

def cmd_drive(binary, out, sig, event, n, *args):
    """Runs BINARY ARGS, copies stdout to OUT as it comes, and sends signal SIG
    right after the N-th EVENT line. Prints the exit status (128 + signal when
    killed by one)."""
    err = open(out + ".err", "wb")
    p = subprocess.Popen([binary] + list(args), stdout=subprocess.PIPE, stderr=err)
    watchdog = threading.Timer(60, p.kill)
    watchdog.start()
    seen, sent = 0, False
    prefix = ('{"event":"%s"' % event).encode()
    with open(out, "wb") as f:
        for line in p.stdout:
            if not line.endswith(b"\n"):
                break  # a line cut by SIGKILL
            f.write(line)
            if not sent and line.startswith(prefix):
                seen += 1
                if seen >= int(n):
                    p.send_signal(getattr(signal, sig))
                    sent = True
    rc = p.wait()
    watchdog.cancel()
    print(128 - rc if rc < 0 else rc)

def cmd_config(path):
    """The config event's closed forms (docs/design.md#output-events, SCIENCE.md) and
    the done event."""
    ev = events(path)
    c = ev[0][0]
    m = c["config"]["model"]
    L, d, T, V = m["n_layer"], m["d_model"], m["seq_len"], m["vocab_size"]
    nonemb = L * (12 * d * d + 13 * d) + 2 * d
    params = nonemb + V * d + T * d
    fpt = 6 * (12 * L * d * d + d * V) + 6 * L * T * d
    for key, want in (("nonembedding_params", nonemb), ("params", params),
                      ("flops_per_token", fpt)):
        if c.get(key) != want:
            die("%s: config event %s is %s, expected %d (L=%d d=%d T=%d V=%d)"
                % (path, key, c.get(key), want, L, d, T, V))
    if c["config"]["optimizer"]["name"] == "adamw" and c["optimizer_state_bytes"] != 8 * params:
        # two fp32 moments per parameter: ties params to what the model allocates
        die("%s: optimizer_state_bytes %s, expected 8 x params = %d"
            % (path, c["optimizer_state_bytes"], 8 * params))
    if "synthetic" in c["config"]["data"]:
        if not 0 < c["entropy_rate"] < c["window_floor"]:
            die("%s: entropy_rate %s, window_floor %s: expected 0 < entropy_rate < "
                "window_floor" % (path, c["entropy_rate"], c["window_floor"]))
    d_ = [o for o, _ in ev if o["event"] == "done"]
    if d_:
        dn = d_[-1]
        for key in ("params", "nonembedding_params"):
            if dn[key] != c[key]:
                die("%s: done %s %s != config event's %s" % (path, key, dn[key], c[key]))
        if dn["flops"] != float(fpt) * dn["tokens"]:
            die("%s: done flops %r, expected flops_per_token x tokens = %r"
                % (path, dn["flops"], float(fpt) * dn["tokens"]))
        if dn["flops_6nd"] != 6.0 * nonemb * dn["tokens"]:
            die("%s: done flops_6nd %r, expected 6 x nonembedding x tokens = %r"
                % (path, dn["flops_6nd"], 6.0 * nonemb * dn["tokens"]))

def cmd_accum(big, small, nsteps, rtol):
    """First NSTEPS train losses of two runs agree within RTOL (relative); b_noise
    only in SMALL (the accumulating run)."""
    a = [o for o, _ in events(big) if o["event"] == "step"]
    b = [o for o, _ in events(small) if o["event"] == "step"]
    if [o for o in a if "b_noise" in o]:
        die("%s: b_noise reported without gradient accumulation" % big)
    if not [o for o in b if "b_noise" in o]:
        die("%s: no b_noise in any step line of the accumulating run" % small)
    worst = max(abs(x["train_loss"] - y["train_loss"]) / abs(x["train_loss"])
                for x, y in zip(a[:int(nsteps)], b[:int(nsteps)]))
    if worst > float(rtol):
        print("\n".join("  step %d: %.17g vs %.17g" % (x["step"], x["train_loss"], y["train_loss"])
                        for x, y in zip(a[:int(nsteps)], b[:int(nsteps)])), file=sys.stderr)
        die("train losses of %s and %s differ by %.3g relative (> %s)" % (big, small, worst, rtol))

def cmd_unigram(shard):
    """Unigram entropy (nats) of the tokens of an llm.c shard."""
    b = open(shard, "rb").read()
    magic, version, n = struct.unpack("<3i", b[:12])
    toks = struct.unpack("<%dH" % n, b[1024:1024 + 2 * n])
    c = Counter(toks)
    print(-sum(v / n * math.log(v / n) for v in c.values()))

def cmd_lowprec(path, ref, h_uni, margin, prec):
    """A PREC run trains: final val_loss and the mean of its last 20 train losses
    are below the unigram entropy H_UNI by MARGIN, and within 0.05 of the fp32 run REF."""
    ev = events(path)
    steps = [o for o, _ in ev if o["event"] == "step"]
    for o in steps:
        if prec == "fp16":
            if not (isinstance(o.get("loss_scale"), (int, float)) and o["loss_scale"] > 0
                    and isinstance(o.get("skipped"), bool)):
                die("%s: fp16 step %d lacks loss_scale/skipped: %s" % (path, o["step"], o))
        elif "loss_scale" in o or "skipped" in o:
            die("%s: %s step %d carries loss_scale/skipped" % (path, prec, o["step"]))
    val = [o for o, _ in ev if o["event"] == "done"][-1]["final_val_loss"]
    tail = sum(o["train_loss"] for o in steps[-20:]) / len(steps[-20:])
    bound = float(h_uni) - float(margin)
    if not (val < bound and tail < bound):
        die("%s: %s after %d steps: val_loss %.4f, mean train loss of the last 20 steps "
            "%.4f; expected both < unigram entropy %.4f - %s"
            % (path, prec, len(steps), val, tail, float(h_uni), margin))
    rv = [o for o, _ in events(ref) if o["event"] == "done"][-1]["final_val_loss"]
    if abs(val - rv) > 0.05:
        die("%s: %s final val_loss %.4f is %.4f away from fp32's %.4f (> 0.05)"
            % (path, prec, val, abs(val - rv), rv))
    print("%s: val_loss %.4f (fp32 %.4f, unigram entropy %.4f)" % (prec, val, rv, float(h_uni)))

def cmd_hashes(path, train_glob, val_glob):
    """data_hashes lists every shard of both splits with its sha256."""
    import glob
    c = events(path)[0][0]
    hs = c.get("data_hashes")
    if not isinstance(hs, list) or not hs:
        die("%s: config event has no data_hashes list" % path)
    want = [("train", p) for p in sorted(glob.glob(train_glob))] + \
           [("val", p) for p in sorted(glob.glob(val_glob))]
    got = [(h.get("split"), h.get("path")) for h in hs]
    if got != want:
        die("%s: data_hashes lists %s, expected %s" % (path, got, want))
    for h in hs:
        if not re.fullmatch(r"[0-9a-f]{64}", h.get("sha256", "")):
            die("%s: sha256 of %s is %r, expected 64 lowercase hex digits"
                % (path, h["path"], h.get("sha256")))
        print(h["sha256"] + "  " + h["path"])

def cmd_partial(path, nprocs):
    """--print-config of a partial config: one object with every key, defaults filled."""
    t = open(path).read().strip().split("\n")
    if len(t) != 1:
        die("%s: --print-config printed %d lines, expected one JSON object" % (path, len(t)))
    c = strict(t[0])
    keys = {
        "model": ["n_layer", "d_model", "n_head", "seq_len", "vocab_size"],
        "data": ["synthetic"],
        "train": ["batch_size", "micro_batch_size", "tokens", "lr", "warmup_tokens",
                  "schedule", "min_lr_ratio", "weight_decay", "grad_clip", "seed"],
        "optimizer": ["name", "beta1", "beta2", "eps"],
        "memory": ["recompute"],
        "eval": ["every_tokens", "tokens"],
        "checkpoint": ["dir", "every_tokens"],
    }
    for sec, ks in keys.items():
        for k in ks:
            if not isinstance(c.get(sec), dict) or k not in c[sec]:
                die("%s: resolved config lacks %s.%s" % (path, sec, k))
    for k in ("letters", "words", "min_len", "max_len", "zipf", "seed"):
        if k not in c["data"]["synthetic"]:
            die("%s: resolved config lacks data.synthetic.%s" % (path, k))
    for k in ("precision", "backend", "world_size", "threads"):
        if k not in c:
            die("%s: resolved config lacks %s" % (path, k))
    checks = [
        ("model.n_layer (given)", c["model"]["n_layer"], 1),
        ("model.d_model (given)", c["model"]["d_model"], 16),
        ("train.tokens (given)", c["train"]["tokens"], 4096),
        ("train.lr", c["train"]["lr"], 0.001),
        ("train.batch_size", c["train"]["batch_size"], 8),
        ("train.micro_batch_size", c["train"]["micro_batch_size"], 8),
        ("optimizer.name", c["optimizer"]["name"], "adamw"),
        ("precision", c["precision"], "fp32"),
        ("memory.recompute", c["memory"]["recompute"], False),
        ("eval.every_tokens (tokens / 10)", c["eval"]["every_tokens"], 409),
        ("model.vocab_size (letters + 1)", c["model"]["vocab_size"], 27),
        ("backend", c["backend"], "cpu"),
        ("world_size", c["world_size"], 1),
        ("threads (all cores)", c["threads"], int(nprocs)),
    ]
    for name, got, want in checks:
        if got != want or type(got) is not type(want):
            die("%s: %s is %r, expected %r" % (path, name, got, want))

globals()["cmd_" + sys.argv[1]](*sys.argv[2:])
PY

h() { "$py" "$tmp/h.py" "$@"; }

# run NAME CONFIG [ARGS...]: `train --config CONFIG ARGS` in directory NAME/,
# stdout to NAME/out, stderr to NAME/err; must exit 0 (and, unless resuming, print
# a complete, valid output).
run() {
  local name=$1 config=$2 rc=0
  shift 2
  mkdir -p "$tmp/$name"
  (cd "$tmp/$name" && timeout 80 "$bin" train --config "$config" "$@" >out 2>err) || rc=$?
  [ "$rc" = 0 ] || fail "$name: train exited $rc, expected 0: $(tail -c 600 "$tmp/$name/err")"
  case " $* " in
  *" --resume "*) ;; # the caller validates: steps start after the checkpoint
  *) h validate "$tmp/$name/out" ;;
  esac
}

# drive NAME CONFIG SIGNAL EVENT N [ARGS...]: like run, but sends SIGNAL after the
# N-th EVENT line; prints the exit status.
drive() {
  local name=$1 config=$2 sig=$3 event=$4 n=$5
  shift 5
  mkdir -p "$tmp/$name"
  (cd "$tmp/$name" && h drive "$bin" out "$sig" "$event" "$n" train --config "$config" "$@")
}

# model + data shared by most configs: 2 layers, d 32, 2 heads, 32 tokens,
# the default synthetic corpus (26 letters -> vocab 27).
model='"model":{"n_layer":2,"d_model":32,"n_head":2,"seq_len":32}'

# ---- 1. determinism ----------------------------------------------------------
cat >det.json <<EOF
{$model,"train":{"batch_size":8,"micro_batch_size":4,"tokens":20480,"lr":0.003},
 "eval":{"every_tokens":5120,"tokens":1024},"threads":1}
EOF
run det1 "$tmp/det.json"
run det2 "$tmp/det.json"
h same det1/out det2/out "determinism (threads 1)" config,step,eval,done
grep -q '"event":"eval"' det1/out || fail "det1: no eval event"
sed 's/"tokens":20480/"tokens":5120/; s/"threads":1/"threads":2/' det.json >det_t2.json
run det_t2a "$tmp/det_t2.json"
run det_t2b "$tmp/det_t2.json"
h same det_t2a/out det_t2b/out "determinism (threads 2)" config,step,eval,done
echo "ok 1 determinism"

# ---- 2. kill and resume, bit for bit -------------------------------------------
# Checkpoints every 10 steps, into ck/ relative to each run's own directory, so the
# config and checkpoint events of all runs are comparable text.
# resume_case TAG CONFIG: an uninterrupted run; one stopped by SIGTERM after its
# 7th step (exit 143, a checkpoint at the step it stopped after) and resumed; one
# killed by SIGKILL after its 2nd periodic checkpoint and resumed from that.
resume_case() {
  local tag=$1 config=$2 rc s0
  run "$tag.full" "$config"
  rc=$(drive "$tag.term" "$config" SIGTERM step 7)
  [ "$rc" = 143 ] || fail "$tag: SIGTERM'd run exited $rc, expected 143: $(cat "$tmp/$tag.term/out.err")"
  grep -q '"event":"checkpoint"' "$tag.term/out" || fail "$tag: no checkpoint event after SIGTERM"
  [ -f "$tag.term/ck/checkpoint.bin" ] || fail "$tag: SIGTERM left no ck/checkpoint.bin"
  h validate "$tag.term/out" 1 0
  cp -r "$tag.term" "$tag.term_resumed"
  run "$tag.term_resumed" "$config" --resume ck
  s0=$(h resume "$tag.full/out" "$tag.term/out" "$tag.term_resumed/out" term)
  h validate "$tag.term_resumed/out" $((s0 + 1)) 1
  echo "  $tag: SIGTERM after step $s0, resumed: identical"

  rc=$(drive "$tag.kill" "$config" SIGKILL checkpoint 2)
  [ "$rc" = 137 ] || fail "$tag: SIGKILL'd run exited $rc, expected 137 (did it finish first?)"
  cp -r "$tag.kill" "$tag.kill_resumed"
  run "$tag.kill_resumed" "$config" --resume ck
  s0=$(h resume "$tag.full/out" "$tag.kill/out" "$tag.kill_resumed/out" kill 20)
  h validate "$tag.kill_resumed/out" $((s0 + 1)) 1
  echo "  $tag: SIGKILL, resumed from the periodic checkpoint at step $s0: identical"
}

# fp32, 4 micro-batches per step (accumulation and the noise-scale state), 160 steps
cat >r_fp32.json <<EOF
{$model,"train":{"batch_size":8,"micro_batch_size":2,"tokens":40960,"lr":0.003},
 "eval":{"every_tokens":2560,"tokens":512},"checkpoint":{"dir":"ck","every_tokens":2560},
 "threads":1}
EOF
resume_case r_fp32 "$tmp/r_fp32.json"
grep -q '"b_noise"' r_fp32.full/out || fail "r_fp32: no b_noise in the accumulating run"

cat >r_bf16.json <<EOF
{$model,"train":{"batch_size":8,"micro_batch_size":4,"tokens":40960,"lr":0.003},
 "optimizer":{"name":"adamw8bit"},"precision":"bf16",
 "eval":{"every_tokens":2560,"tokens":512},"checkpoint":{"dir":"ck","every_tokens":2560},
 "threads":1}
EOF
resume_case r_bf16 "$tmp/r_bf16.json"

# fp16: the loss scale and its step counters are part of the checkpoint
sed 's/"optimizer":{"name":"adamw8bit"},"precision":"bf16"/"precision":"fp16"/' \
  r_bf16.json >r_fp16.json
resume_case r_fp16 "$tmp/r_fp16.json"

# the llama family (QK-norm, untied head) under muP at fp32, bf16 with 8-bit
# AdamW, and fp16: determinism at 2 threads, and kill and resume bit for bit
llama='"family":"llama","qk_norm":true,"parametrization":"mup","base_width":16'
for f in r_fp32 r_bf16 r_fp16; do
  sed "s/\"seq_len\":32}/\"seq_len\":32,$llama}/" $f.json >l_$f.json
  grep -q '"family":"llama"' l_$f.json || fail "l_$f.json: the llama model did not go in"
  resume_case l_$f "$tmp/l_$f.json"
done
grep -q '"family":"llama"' l_r_fp32.full/out || fail "l_r_fp32: the config event has no llama family"
sed 's/"threads":1/"threads":2/' l_r_bf16.json >l_det.json
run l_det1 "$tmp/l_det.json"
run l_det2 "$tmp/l_det.json"
h same l_det1/out l_det2/out "llama determinism (threads 2)" config,step,eval,done
echo "ok 2b llama: determinism, kill and resume at fp32, bf16, fp16"

# SIGTERM without checkpoint.dir: exit 143, nothing saved
rc=$(drive term_nodir "$tmp/det.json" SIGTERM step 3)
[ "$rc" = 143 ] || fail "SIGTERM without checkpoint.dir: exit $rc, expected 143"
! grep -q '"event":"checkpoint"' term_nodir/out || fail "checkpoint event without checkpoint.dir"

# Resuming a run whose last checkpoint is at its final step (a worker killed after
# the last checkpoint but before it saw done) must finish with the same done line.
cp -r r_fp32.full r_fp32.again
rc=0
(cd r_fp32.again && timeout 80 "$bin" train --config "$tmp/r_fp32.json" --resume ck >out 2>err) ||
  rc=$?
if [ "$rc" != 0 ] || ! h same r_fp32.full/out r_fp32.again/out "resume at the final step" "done" \
  2>r_fp32.again/why; then
  fail "--resume from a checkpoint written at the final step: exit $rc," \
    "$(grep -o '"event":"done","final_val_loss":[^,]*' r_fp32.again/out || echo 'no done line')" \
    "(uninterrupted: $(grep -o '"final_val_loss":[^,]*' r_fp32.full/out))"
fi
# --resume-max-step (the worker passes the last step whose metrics the scheduler
# stored): the newest checkpoint at or before it, here checkpoint.prev.bin (step
# 150, checkpoint.bin is step 160), or a fresh start when both are later; either
# way the same done line as the uninterrupted run.
for case in "155 151" "5 1"; do
  set -- $case
  cp -r r_fp32.full "r_fp32.max$1"
  run "r_fp32.max$1" "$tmp/r_fp32.json" --resume ck --resume-max-step "$1"
  first=$(grep -m1 -o '"event":"step","step":[0-9]*' "r_fp32.max$1/out" | grep -o '[0-9]*$')
  [ "$first" = "$2" ] ||
    fail "--resume-max-step $1: the first step printed is $first, expected $2"
  h same r_fp32.full/out "r_fp32.max$1/out" "--resume-max-step $1" done
done
h same r_fp32.full/out r_fp32.max5/out "--resume-max-step before every checkpoint" step,eval,done
echo "ok 2 kill and resume"

# ---- 3. recompute --------------------------------------------------------------
sed 's/"threads":1/"memory":{"recompute":true},"threads":1/' det.json >recompute.json
run recompute "$tmp/recompute.json"
h same det1/out recompute/out "recompute on vs off" step,eval,done
a_off=$(h field det1/out config activation_bytes)
a_on=$(h field recompute/out config activation_bytes)
[ "$a_on" -lt "$a_off" ] ||
  fail "activation_bytes with recompute $a_on, without $a_off: expected smaller"
echo "ok 3 recompute: identical lines, activation_bytes $a_off -> $a_on"

# ---- 4. gradient accumulation ----------------------------------------------------
# batch 8 in one micro-batch vs four of 2: the same sequences, so the same losses up
# to the order of floating-point sums (not bitwise); 1e-4 relative over 5 steps is
# far above that rounding (~1e-7) and far below a real difference in data or
# scaling.
acc() {
  cat >"acc$1.json" <<EOF
{$model,"train":{"batch_size":8,"micro_batch_size":$1,"tokens":1280,"lr":0.003},
 "eval":{"tokens":256},"threads":1}
EOF
  run "acc$1" "$tmp/acc$1.json"
}
acc 8
acc 2
h accum acc8/out acc2/out 5 1e-4
echo "ok 4 accumulation"

# ---- 7 (first: 5 uses its shard). shards from `data synth` -------------------------
"$bin" data synth --out "$tmp/shards" --tokens 200000 --val-tokens 4096 >synth.out ||
  fail "data synth exited $?"
cat >shards.json <<EOF
{"model":{"n_layer":1,"d_model":16,"n_head":2,"seq_len":16,"vocab_size":27},
 "data":{"train":"$tmp/shards/train_*.bin","val":"$tmp/shards/val_*.bin"},
 "train":{"batch_size":4,"tokens":1280},"eval":{"tokens":256},"threads":1}
EOF
run shards "$tmp/shards.json"
h hashes shards/out "$tmp/shards/train_*.bin" "$tmp/shards/val_*.bin" >shards/hashes
sha256sum --quiet -c shards/hashes >/dev/null 2>&1 ||
  fail "data_hashes do not match sha256sum: $(sha256sum -c shards/hashes 2>&1)"
h config shards/out

# resume on shards, across epochs: a 3000-token training shard is read ~3.5 times
"$bin" data synth --out "$tmp/small" --tokens 3000 --val-tokens 1024 --seed 7 >/dev/null ||
  fail "data synth --tokens 3000 exited $?"
cat >r_shards.json <<EOF
{"model":{"n_layer":1,"d_model":16,"n_head":2,"seq_len":16,"vocab_size":27},
 "data":{"train":"$tmp/small/train_*.bin","val":"$tmp/small/val_*.bin"},
 "train":{"batch_size":4,"micro_batch_size":2,"tokens":10240},
 "eval":{"every_tokens":640,"tokens":256},"checkpoint":{"dir":"ck","every_tokens":640},
 "threads":1}
EOF
resume_case r_shards "$tmp/r_shards.json"
echo "ok 7 shards: data_hashes match sha256sum, resume across epochs"

# ---- 5. bf16 and fp16 train ------------------------------------------------------
# The model must learn more than letter frequencies: its loss must fall well below
# the unigram entropy of the stream (3.09 nats for the default lexicon; note that
# 0.9 ln 27 = 2.97 is *below* it, so it is not an upper bound), measured on the
# `data synth` shard, which draws from the same lexicon (same lexicon_digest).
digest_synth=$(sed -n 's/.*"lexicon_digest": *"\([0-9a-f]*\)".*/\1/p' synth.out)
digest_run=$(h field det1/out config lexicon_digest)
[ "$digest_synth" = "$digest_run" ] ||
  fail "data synth lexicon_digest '$digest_synth' != the trainer's '$digest_run'"
h_uni=$(h unigram "$tmp/shards/train_000000.bin")
for p in fp32 bf16 fp16; do
  cat >"lp_$p.json" <<EOF
{$model,"train":{"batch_size":8,"tokens":51200,"lr":0.01},"precision":"$p",
 "eval":{"every_tokens":12800,"tokens":2048},"threads":1}
EOF
  run "lp_$p" "$tmp/lp_$p.json"
done
# 200 steps take this model from ln 27 = 3.30 to ~2.1; 0.5 nats below the unigram
# entropy leaves room for seeds and rounding but not for a model stuck at unigrams.
h lowprec lp_fp32/out lp_fp32/out "$h_uni" 0.5 fp32 >/dev/null
h lowprec lp_bf16/out lp_fp32/out "$h_uni" 0.5 bf16
h lowprec lp_fp16/out lp_fp32/out "$h_uni" 0.5 fp16
echo "ok 5 bf16 and fp16 train (unigram entropy $h_uni)"

# ---- 6. the config event ---------------------------------------------------------
for o in det1 det_t2a recompute acc2 r_bf16.full lp_fp16; do
  h config "$o/out"
done
echo "ok 6 config event: params, nonembedding_params, flops_per_token, entropy_rate, flops"

# ---- 8. partial config -----------------------------------------------------------
printf '{"model":{"n_layer":1,"d_model":16,"n_head":2,"seq_len":16},"train":{"tokens":4096}}' \
  >partial.json
"$bin" train --config "$tmp/partial.json" --print-config >partial.out 2>partial.err ||
  fail "--print-config exited $?: $(cat partial.err)"
nprocs=$("$py" -c 'import os; print(len(os.sched_getaffinity(0)))')
h partial partial.out "$nprocs"
# the resolved config is complete: resolving it again changes nothing
cp partial.out resolved.json
"$bin" train --config "$tmp/resolved.json" --print-config >resolved.out ||
  fail "--print-config of the resolved config exited $?"
cmp -s partial.out resolved.out ||
  fail "resolving the resolved config changed it:$(diff partial.out resolved.out)"
echo "ok 8 partial config completed"

# ---- 9. --print-memory -------------------------------------------------------------
# The estimate the planner and the worker check (runcfg/memory.c; test_memory
# holds it to the trainer's allocations). GPT-2 124M at B=16, T=1024: on CUDA
# at bf16 the activations are 2-byte values, half of what fp32 takes there
# (fp32 statistics aside); a CPU run's figure is the host's.
g124='"model":{"n_layer":12,"d_model":768,"n_head":12,"seq_len":1024,"vocab_size":50304},"train":{"batch_size":16}'
for v in 'cuda bf16 1' 'cuda fp32 1' 'cpu bf16 1'; do
  set -- $v
  printf '{%s,"backend":"%s","precision":"%s","world_size":%s}' "$g124" "$1" "$2" "$3" >"mem_$1_$2_$3.json"
  "$bin" train --config "$tmp/mem_$1_$2_$3.json" --print-memory >"mem_$1_$2_$3.out" ||
    fail "--print-memory ($v) exited $?"
done
"$py" - <<'PY' || fail "--print-memory"
import json
def m(name):
    e = json.loads(open("mem_%s.out" % name).read())
    parts = sum(e[k] for k in ("params", "grads", "optimizer", "activations", "other"))
    assert e["event"] == "memory" and e["total"] == parts, e
    assert e["text"].endswith(")") and "activations" in e["text"], e
    return e
gb, gf, cb = m("cuda_bf16_1"), m("cuda_fp32_1"), m("cpu_bf16_1")
assert gb["of"] == "gpu" and cb["of"] == "host", (gb["of"], cb["of"])
r = gb["activations"] / gf["activations"]
assert 0.49 < r < 0.52, "CUDA bf16 activations / fp32: %.4f, expected about 0.5" % r
# the rounded weight copy: 2 bytes a parameter on CUDA at bf16, 4 in the CPU's containers
assert gb["params"] / gf["params"] == 1.5 and cb["params"] / gf["params"] == 2.0, (gb, cb, gf)
print("cuda bf16 %s; activations %.3f of fp32's" % (gb["text"], r))
PY
echo "ok 9 --print-memory"

# ---- 10. SCALESWEEP_PROFILE_OPS ----------------------------------------------------
# Each op's row counts the calls the model makes: per micro-batch, 4L + 1
# matrix products forward (CPU: no fused GELU), 2L + 1 LayerNorms; one AdamW
# launch a step; evaluation left out. The run's results do not change.
cat >prof.json <<'JSON'
{"model": {"n_layer": 2, "d_model": 32, "n_head": 2, "seq_len": 16},
 "data": {"synthetic": {"seed": 1}},
 "train": {"batch_size": 8, "micro_batch_size": 4, "tokens": 1280, "lr": 0.003},
 "eval": {"every_tokens": 640, "tokens": 64}, "threads": 1}
JSON
"$bin" train --config "$tmp/prof.json" >prof_plain.out || fail "profile baseline exited $?"
SCALESWEEP_PROFILE_OPS=1 "$bin" train --config "$tmp/prof.json" >prof.out 2>prof.err ||
  fail "SCALESWEEP_PROFILE_OPS=1 exited $?: $(tail -3 prof.err)"
"$py" - <<'PY' || fail "SCALESWEEP_PROFILE_OPS: $(head -c 1500 prof.err)"
import json, re
from clilib import untimed
assert untimed("prof.out") == untimed("prof_plain.out"), "the profile changed the run's output"
text = open("prof.err").read()
m = re.search(r"op times over (\d+) training steps", text)
assert m, "no op table"
steps, L, micro = int(m.group(1)), 2, 2
assert steps == 10, steps
rows = {}
for line in text.splitlines():
    r = re.match(r"  (\S.*?)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)%$", line)
    if r:
        rows[r.group(1)] = (int(r.group(2)), float(r.group(3)), float(r.group(5)))
calls = lambda prefix: sum(c for k, (c, _, _) in rows.items() if k.startswith(prefix))
assert calls("matmul_forward ") == steps * micro * (4 * L + 1), rows
assert calls("matmul_backward ") == steps * micro * (4 * L + 1), rows
assert "matmul_forward 64x32x27" in rows, sorted(rows)  # the head: N = B*T, C, V
assert calls("layernorm_forward") == steps * micro * (2 * L + 1), rows
assert calls("adamw_fused") == steps, rows
assert calls("softmax_xent") == steps * micro, rows
share = sum(s for _, _, s in rows.values())
assert abs(share - 100) < 0.1, share
assert re.search(r"all ops .* of the steps' [\d.]+ ms", text), text[-300:]
print("ok: %d rows, %d steps" % (len(rows), steps))
PY
echo "ok 10 SCALESWEEP_PROFILE_OPS"

echo "run time: $((SECONDS - started)) s"
echo "all checks passed"

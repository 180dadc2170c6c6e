"""Training data as the built-in trainer reads it (trainer/synth.c,
trainer/loader.c, common/shardpath.c): the synthetic Zipf lexicon with its
entropy rate, window floor and digest, its token streams, and llm.c token
shards read front to back (wrapping around).

A loader is a token stream: next(n) returns the next n tokens (numpy int64)
and advances by n. get_pos()/set_pos() save and restore the whole position
(a dict of plain values) for checkpoints.
"""
import glob as globmod
import hashlib
import math
import os
import stat as statmod
import sys

import numpy as np

from ssrng import Xoshiro

SHARD_MAGIC = 20240520
SHARD_VERSION = 1
SHARD_HEADER_INTS = 256
HEADER_BYTES = SHARD_HEADER_INTS * 4
LEXICON_MAX_WORDS = 1 << 24
LEXICON_MAX_LEN = 64
M64 = (1 << 64) - 1


class DataError(Exception):
    """Invalid data (exit 2): the message says which file or parameter."""


def synth_train_seed(seed):
    return (seed ^ 0x7472616E) & M64  # "tran" (trainer/prepare.h)


def synth_val_seed(seed):
    return (seed ^ 0x76616C00) & M64  # "val"


# ---- Neumaier's compensated sum, as synth.c's ksum ---------------------------


class KSum:
    __slots__ = ("s", "c")

    def __init__(self):
        self.s = 0.0
        self.c = 0.0

    def add(self, x):
        s = self.s
        t = s + x
        if abs(s) >= abs(x):
            self.c += (s - t) + x
        else:
            self.c += (x - t) + s
        self.s = t

    def get(self):
        return self.s + self.c


def _neg_plogp(p):
    return -p * math.log(p) if p > 0 else 0.0


def _fnv1a(h, data):
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & M64
    return h


# ---- the lexicon -------------------------------------------------------------


def _check_params(p):
    if not 1 <= p["letters"] <= 255:
        raise DataError("letters: %d, expected 1..255 (tokens 1..letters are letters, 0 the "
                        "separator, all in uint16 shards)" % p["letters"])
    if not 1 <= p["words"] <= LEXICON_MAX_WORDS:
        raise DataError("words: %d, expected 1..%d" % (p["words"], LEXICON_MAX_WORDS))
    if not 1 <= p["min_len"] <= LEXICON_MAX_LEN:
        raise DataError("min_len: %d, expected 1..%d" % (p["min_len"], LEXICON_MAX_LEN))
    if not p["min_len"] <= p["max_len"] <= LEXICON_MAX_LEN:
        raise DataError("max_len: %d, expected min_len (%d)..%d"
                        % (p["max_len"], p["min_len"], LEXICON_MAX_LEN))
    if not (p["zipf"] > 0 and math.isfinite(p["zipf"])):
        raise DataError("zipf: %g, expected a finite number > 0" % p["zipf"])
    need, have, per_len = 2 * p["words"], 0, 1
    for ln in range(1, p["max_len"] + 1):
        if have >= need:
            break
        per_len = need if per_len > need // p["letters"] else per_len * p["letters"]
        if ln >= p["min_len"]:
            have = need if have + per_len > need else have + per_len
    if have < need:
        raise DataError("words: %d needs at least %d possible distinct words (twice as many), "
                        "but letters=%d with lengths %d..%d allow only %d; raise letters or "
                        "max_len, or lower words"
                        % (p["words"], need, p["letters"], p["min_len"], p["max_len"], have))


class Lexicon:
    """trn_lexicon: words[k] (bytes of letters 1..letters), p[k], and the
    exact entropy rate, window floor and digest."""

    def __init__(self, params):
        _check_params(params)
        self.letters = params["letters"]
        self.nwords = params["words"]
        self.min_len = params["min_len"]
        self.max_len = params["max_len"]
        rng = Xoshiro(params["seed"])
        span = self.max_len - self.min_len + 1
        words, seen = [], set()
        uni = rng.uniform
        letters, min_len = self.letters, self.min_len
        for _ in range(self.nwords):
            while True:  # a duplicate is redrawn, length and letters both
                ln = min_len + int(uni() * span)
                w = bytes(1 + int(uni() * letters) for _ in range(ln))
                if w not in seen:
                    seen.add(w)
                    words.append(w)
                    break
        self.words = words
        self.lens = [len(w) for w in words]
        zipf = params["zipf"]
        p = [0.0] * self.nwords
        norm = KSum()
        for k in range(self.nwords - 1, -1, -1):
            p[k] = math.pow(float(k) + 1, -zipf)
            norm.add(p[k])
        z = norm.get()
        hw, mlen = KSum(), KSum()
        h = 0xCBF29CE484222325
        for k in range(self.nwords):
            p[k] /= z
            hw.add(_neg_plogp(p[k]))
            mlen.add(p[k] * (self.lens[k] + 1))
            h = _fnv1a(h, words[k] + b"\0")
        self.p = p
        self.entropy_rate = hw.get() / mlen.get()
        self.digest = h

    # -- the window floor (synth.c: the same sums in the same order) --

    def window_floor(self, seq_len):
        if seq_len < 1:
            return float("nan")
        zs = KSum()
        for k in range(self.nwords):
            zs.add(self.p[k] * (self.lens[k] + 1))
        z = zs.get()
        hn = self._block_entropy(seq_len + 1, z)
        return (hn - self._token_entropy(z)) / seq_len

    def _token_entropy(self, z):
        mass = [KSum() for _ in range(256)]
        for k in range(self.nwords):
            w = self.words[k] + b"\0"
            pk = self.p[k]
            for c in w:
                mass[c].add(pk)
        h = KSum()
        for c in range(256):
            h.add(_neg_plogp(mass[c].get() / z))
        return h.get()

    def _sorted(self, strs, scale):
        """strs: list of (word index, offset); sorted as synth.c's
        multikey quicksort leaves them, with prob and lcp."""
        text = [w + b"\0" for w in self.words]
        a = list(strs)
        _sort_strs(a, 0, len(a), 0, text)
        prob = [self.p[k] * scale for k, _ in a]
        lcp = [0] * len(a)
        for i in range(1, len(a)):
            k0, j0 = a[i - 1]
            k1, j1 = a[i]
            lcp[i] = _common_prefix(text[k0], j0, text[k1], j1)
        return prob, lcp

    def _block_entropy(self, n, z):
        maxl = self.max_len + 1
        nw = self.nwords
        q = [KSum() for _ in range(maxl + 1)]
        wstrs, sstrs = [], []
        for k in range(nw):
            wstrs.append((k, 0))
            for j in range(self.lens[k] + 1):
                sstrs.append((k, j))
            q[self.lens[k] + 1].add(self.p[k])
        wprob, wlcp = self._sorted(wstrs, 1.0)
        sprob, slcp = self._sorted(sstrs, 1.0 / z)
        hcut = [0.0] * (maxl + 1)
        for r in range(1, maxl + 1):
            hcut[r] = _cut_entropy(wprob, wlcp, r)
        g = [0.0] * n
        for r in range(1, n):
            acc = KSum()
            acc.add(hcut[r if r < maxl else maxl])
            for ln in range(2, min(maxl, r) + 1):
                acc.add(q[ln].get() * g[r - ln])
            g[r] = acc.get()
        h = KSum()
        cut = n if n < maxl else maxl
        h.add(_cut_entropy(sprob, slcp, cut))
        for ln in range(1, min(maxl, n) + 1):
            at_least = KSum()
            for ll in range(ln, maxl + 1):
                at_least.add(q[ll].get())
            h.add(at_least.get() / z * g[n - ln])
        return h.get()


def _common_prefix(a, i, b, j):
    """synth.c common_prefix of the C strings a[i:] and b[j:]: the length of
    the common prefix, or a huge number when they are equal."""
    n = 0
    while a[i + n] == b[j + n]:
        if a[i + n] == 0:
            return sys.maxsize
        n += 1
    return n


def _cut_entropy(prob, lcp, r):
    h = KSum()
    g = prob[0]
    for i in range(1, len(prob)):
        if lcp[i] >= r:
            g += prob[i]
        else:
            h.add(_neg_plogp(g))
            g = prob[i]
    h.add(_neg_plogp(g))
    return h.get()


def _sort_strs(a, lo, n, d, text):
    """synth.c sort_strs (Bentley-Sedgewick multikey quicksort) on
    a[lo:lo+n], strings (word, offset) into text, agreeing on their first d
    tokens; the same swaps, so equal strings end in the same order."""
    stack = [(lo, n, d)]
    while stack:
        lo, n, d = stack.pop()
        while n > 1:
            if n < 12:
                for i in range(lo + 1, lo + n):
                    j = i
                    while j > lo:
                        k0, o0 = a[j - 1]
                        k1, o1 = a[j]
                        if text[k0][o0 + d:].split(b"\0", 1)[0] <= \
                                text[k1][o1 + d:].split(b"\0", 1)[0]:
                            break
                        a[j - 1], a[j] = a[j], a[j - 1]
                        j -= 1
                break
            a[lo], a[lo + n // 2] = a[lo + n // 2], a[lo]
            k, o = a[lo]
            v = text[k][o + d]
            lt, i, gt = 0, 0, n
            while i < gt:
                k, o = a[lo + i]
                c = text[k][o + d]
                if c < v:
                    a[lo + lt], a[lo + i] = a[lo + i], a[lo + lt]
                    lt += 1
                    i += 1
                elif c > v:
                    gt -= 1
                    a[lo + i], a[lo + gt] = a[lo + gt], a[lo + i]
                else:
                    i += 1
            # the C code recurses on [0, lt) and [lt, gt) in that order, then
            # loops on [gt, n): order among these independent ranges does not
            # change the result, only the swaps inside each
            stack.append((lo, lt, d))
            if v != 0:
                stack.append((lo + lt, gt - lt, d + 1))
            lo += gt
            n -= gt


# ---- loaders -------------------------------------------------------------------


class SynthLoader:
    """The synthetic stream (loader.c next_synth): words drawn independently
    from p (the first k with u < cdf[k]), each followed by the separator 0.
    Words are drawn ahead in blocks; the position is the generator state
    after the drawn block plus the tokens drawn but not yet handed out."""

    def __init__(self, lex, stream_seed):
        self.lex = lex
        c = 0.0  # the C loop's running sum, in its order
        out = []
        for pk in lex.p:
            c += pk
            out.append(c)
        cdf = np.array(out, dtype=np.float64)
        cdf[-1] = 1.0
        self.cdf = cdf
        lens = np.array(lex.lens, dtype=np.int64) + 1
        self.word_tokens = [np.frombuffer(w + b"\0", dtype=np.uint8).astype(np.int64)
                            for w in lex.words]
        self.word_len1 = lens
        self.rng = Xoshiro(stream_seed)
        self.pending = np.zeros(0, dtype=np.int64)
        self.offset = 0

    def _draw(self, nwords):
        u = self.rng.uniforms(nwords)
        ks = np.searchsorted(self.cdf, u, side="right")  # first k with u < cdf[k]
        return np.concatenate([self.word_tokens[k] for k in ks.tolist()])

    def next(self, n):
        parts, have = [self.pending], len(self.pending)
        while have < n:
            mean_len = 1 + (self.lex.min_len + self.lex.max_len) / 2
            nw = max(64, int((n - have) / mean_len * 1.1) + 1)
            t = self._draw(nw)
            parts.append(t)
            have += len(t)
        allt = np.concatenate(parts) if len(parts) > 1 else parts[0]
        self.pending = allt[n:].copy()
        self.offset += n
        return allt[:n].copy()

    def get_pos(self):
        return {"kind": "synthetic", "rng": list(self.rng.s), "pending": self.pending.tolist(),
                "offset": self.offset}

    def set_pos(self, pos):
        if pos.get("kind") != "synthetic":
            raise DataError("the checkpoint's data position is not a synthetic stream's")
        if not any(pos["rng"]):
            raise DataError("the checkpoint's generator state is all zeros (corrupt)")
        self.rng.s = list(pos["rng"])
        self.pending = np.array(pos["pending"], dtype=np.int64)
        self.offset = pos["offset"]


def _is_under(path, d):
    if d == "/":
        return path.startswith("/")
    return path == d or path.startswith(d + "/")


def _tidy(p):
    while "//" in p:
        p = p.replace("//", "/")
    while len(p) > 1 and p.endswith("/"):
        p = p[:-1]
    return p


OUTSIDE = "outside the allowed data directories"


def expand_shards(pattern, dirs):
    """common/shardpath.c spath_expand: [(match, resolved)], sorted. dirs
    None: unconfined. Raises DataError (refused, no match)."""
    if dirs is not None:
        if not dirs:
            raise DataError("no data directories are allowed here, so no token shards are read "
                            "(expected synthetic data, or an operator's --data-dir DIR)")
        if not pattern:
            raise DataError("an empty path, expected a token-shard file or pattern")
        slash = pattern.rfind("/")
        if slash >= 0 and slash == len(pattern) - 1:
            raise DataError("ends with '/', expected a file name or pattern after the directory")
        for comp in pattern.split("/"):
            if comp in (".", ".."):
                raise DataError("has a '%s' component, expected a path without . or .." % comp)
        dirpart = pattern[:slash] if slash > 0 else ("/" if slash == 0 else "")
        for ch in "*?[\\":
            if slash >= 0 and ch in pattern[:slash]:
                raise DataError("has a wildcard or escape ('%s') in a directory component, "
                                "expected literal directories (only the file name may be a "
                                "pattern)" % ch)
        real_dirs = [os.path.realpath(d) if d and os.path.exists(d) else None for d in dirs]
        text_dirs = [_tidy(d) for d in dirs]
        full = dirpart if pattern.startswith("/") else os.getcwd() + "/" + dirpart
        full = _tidy(full)
        if not any((t and _is_under(full, t)) or (r and _is_under(full, r))
                   for t, r in zip(text_dirs, real_dirs)):
            raise DataError(OUTSIDE)
        if not os.path.exists(full):
            raise DataError("no files match (expected token shards)")
        real = os.path.realpath(full)
        if not any(r and _is_under(real, r) for r in real_dirs):
            raise DataError(OUTSIDE)
    matches = sorted(globmod.glob(pattern), key=lambda s: s.encode())
    if not matches:
        raise DataError("no files match (expected token shards)")
    out = []
    for m in matches:
        real = os.path.realpath(m)
        if dirs is not None:
            if not any(r and _is_under(real, r) for r in real_dirs):
                raise DataError("a match resolves " + OUTSIDE)
            try:
                st = os.stat(real)
            except OSError:
                st = None
            if st is None or not statmod.S_ISREG(st.st_mode):
                raise DataError("'%s' matches, but is not a regular file" % m[:200])
        out.append((m, real))
    return out


class ShardLoader:
    """Token shards (llm.c format) matching a pattern, read front to back as
    one stream that wraps around at the end (loader.c next_shards)."""

    def __init__(self, pattern, dirs, vocab_size):
        self.files = []  # (path as matched, sha256 hex, tokens as numpy uint16)
        for match, real in expand_shards(pattern, dirs):
            self.files.append(self._open(match, real, dirs, vocab_size))
        self.tokens = np.concatenate([t for _, _, t in self.files]).astype(np.int64)
        if len(self.tokens) == 0:
            raise DataError("'%s': the %d matching shard(s) hold no tokens"
                            % (pattern, len(self.files)))
        self.offset = 0

    @staticmethod
    def _open(path, real, dirs, vocab_size):
        try:
            fd = os.open(real, os.O_RDONLY | (os.O_NOFOLLOW if dirs is not None else 0))
        except OSError as e:
            raise DataError("%s: cannot open: %s" % (path, e.strerror))
        with os.fdopen(fd, "rb") as f:
            if dirs is not None:
                where = os.path.realpath("/proc/self/fd/%d" % f.fileno())
                if os.path.exists("/proc/self/fd") and not any(
                        _is_under(where, os.path.realpath(d)) for d in dirs if d):
                    raise DataError("%s: resolves outside the allowed data directories" % path)
            data = f.read()
        if len(data) < HEADER_BYTES:
            raise DataError("%s: truncated: file has %d bytes, shorter than the %d-byte header "
                            "(not an llm.c token shard?)" % (path, len(data), HEADER_BYTES))
        hdr = np.frombuffer(data[:HEADER_BYTES], dtype="<i4")
        if int(hdr[0]) != SHARD_MAGIC:
            raise DataError("%s: byte 0: magic number is %d, expected %d (not an llm.c token "
                            "shard?)" % (path, int(hdr[0]) & 0xFFFFFFFF, SHARD_MAGIC))
        if int(hdr[1]) != SHARD_VERSION:
            raise DataError("%s: byte 4: version is %d, expected %d (a shard format this build "
                            "does not read)" % (path, int(hdr[1]) & 0xFFFFFFFF, SHARD_VERSION))
        count = int(hdr[2])
        if count < 0:
            raise DataError("%s: byte 8: token count is %d, expected >= 0" % (path, count))
        have = len(data) - HEADER_BYTES
        if have != 2 * count:
            raise DataError("%s: %s: header says %d tokens (%d bytes after the %d-byte header), "
                            "file has %d" % (path, "truncated" if have < 2 * count
                                             else "trailing bytes", count, 2 * count,
                                             HEADER_BYTES, have))
        toks = np.frombuffer(data[HEADER_BYTES:], dtype="<u2")
        if vocab_size <= 65535 and len(toks):
            bad = np.nonzero(toks >= vocab_size)[0]
            if len(bad):
                i = int(bad[0])
                raise DataError("%s: token %d (byte %d) is %d, expected < vocab_size %d"
                                % (path, i, HEADER_BYTES + 2 * i, int(toks[i]), vocab_size))
        return (path, hashlib.sha256(data).hexdigest(), toks)

    def next(self, n):
        total = len(self.tokens)
        out = np.empty(n, dtype=np.int64)
        done = 0
        while done < n:
            take = min(n - done, total - self.offset)
            out[done:done + take] = self.tokens[self.offset:self.offset + take]
            done += take
            self.offset += take
            if self.offset == total:
                self.offset = 0
        return out

    def get_pos(self):
        return {"kind": "shards", "offset": self.offset}

    def set_pos(self, pos):
        if pos.get("kind") != "shards" or not 0 <= pos["offset"] < len(self.tokens):
            raise DataError("data position %s does not fit the training data" % pos.get("offset"))
        self.offset = pos["offset"]

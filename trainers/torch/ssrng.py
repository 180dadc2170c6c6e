"""The built-in trainer's random numbers (trainer/rng.h), bit for bit.

xoshiro256** seeded through splitmix64; uniform doubles from the top 53 bits
of each output; Box-Muller normals as trainer/model.c's normal().

Two ways to draw: Xoshiro.next() is plain Python (one output at a time);
Xoshiro.uniforms(n) draws n outputs at once with numpy. The state update of
xoshiro256** is linear over GF(2) (shifts, rotations and xors of the 256
state bits), so the state K outputs ahead is a fixed 256x256 bit matrix
A^K times the state. uniforms() computes the states at 0, K, 2K, ... with
that matrix (lane starts), then steps all lanes together with numpy for K
steps; lane j's outputs are outputs j*K .. j*K+K-1 of the one sequence.
Nothing about the sequence changes: only how fast it is computed.
"""
import math

import numpy as np

M64 = (1 << 64) - 1


def splitmix64(x):
    """One splitmix64 step: (new x, output)."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return x, z ^ (z >> 31)


def seed_state(seed):
    """trn_rng_seed: four words from splitmix64 of seed."""
    x = seed & M64
    s = []
    for _ in range(4):
        x, z = splitmix64(x)
        s.append(z)
    return s


def _rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M64


def _step(s0, s1, s2, s3):
    """The state update alone (no output), on Python ints."""
    t = (s1 << 17) & M64
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    s3 = _rotl(s3, 45)
    return s0, s1, s2, s3


def _pack(s):
    return s[0] | (s[1] << 64) | (s[2] << 128) | (s[3] << 192)


def _unpack(v):
    return [v & M64, (v >> 64) & M64, (v >> 128) & M64, (v >> 192) & M64]


def _apply(cols, v):
    """The bit matrix with columns cols (256 ints of 256 bits) times v."""
    r = 0
    b = 0
    while v:
        if v & 1:
            r ^= cols[b]
        v >>= 1
        b += 1
    return r


_JUMP = {}  # K -> columns of A^K


def _jump_cols(k):
    """Columns of A^k (A: one state update), by repeated squaring."""
    if k in _JUMP:
        return _JUMP[k]
    a = [_pack(_step(*_unpack(1 << b))) for b in range(256)]
    result = None
    p = a
    e = k
    while e:
        if e & 1:
            result = p if result is None else [_apply(p, c) for c in result]
        e >>= 1
        if e:
            p = [_apply(p, c) for c in p]
    _JUMP[k] = result
    return result


_LANE = 1024  # outputs per lane in uniforms()
_VECTOR_MIN = 16384  # below this many outputs, plain Python is as fast


class Xoshiro:
    """xoshiro256** with its four-word state (trn_rng_seed / trn_rng_next)."""

    def __init__(self, seed=None, state=None):
        self.s = list(state) if state is not None else seed_state(seed)

    def next(self):
        s0, s1, s2, s3 = self.s
        result = (_rotl((s1 * 5) & M64, 7) * 9) & M64
        self.s = list(_step(s0, s1, s2, s3))
        return result

    def uniform(self):
        """trn_rng_uniform: a double on [0, 1), a multiple of 2^-53."""
        return (self.next() >> 11) * (2.0 ** -53)

    def outputs(self, n):
        """The next n outputs as a numpy uint64 array (the state advances by n)."""
        if n < _VECTOR_MIN:
            return np.array([self.next() for _ in range(n)], dtype=np.uint64)
        k = _LANE
        cols = _jump_cols(k)
        nlanes = (n + k - 1) // k
        starts = []
        v = _pack(self.s)
        for _ in range(nlanes + 1):
            starts.append(_unpack(v))
            v = _apply(cols, v)
        st = np.array(starts[:nlanes], dtype=np.uint64)
        s0, s1, s2, s3 = (st[:, i].copy() for i in range(4))
        out = np.empty((nlanes, k), dtype=np.uint64)
        u5, u9 = np.uint64(5), np.uint64(9)
        sh7, sh57 = np.uint64(7), np.uint64(57)
        sh17, sh45, sh19 = np.uint64(17), np.uint64(45), np.uint64(19)
        with np.errstate(over="ignore"):
            for i in range(k):
                x = s1 * u5
                out[:, i] = ((x << sh7) | (x >> sh57)) * u9
                t = s1 << sh17
                s2 ^= s0
                s3 ^= s1
                s1 ^= s2
                s0 ^= s3
                s2 ^= t
                s3 = (s3 << sh45) | (s3 >> sh19)
        # the state after n outputs: lane n // K's start, stepped n % K times
        self.s = starts[n // k]
        for _ in range(n % k):
            self.s = list(_step(*self.s))
        return out.reshape(-1)[:n]

    def uniforms(self, n):
        """The next n uniforms (trn_rng_uniform each) as float64."""
        return (self.outputs(n) >> np.uint64(11)).astype(np.float64) * (2.0 ** -53)


def _libm_normals(u1, u2):
    two_pi = 2.0 * math.pi
    log, cos, sqrt = math.log, math.cos, math.sqrt
    return np.fromiter((sqrt(-2.0 * log(a)) * cos(two_pi * b) for a, b in zip(u1, u2)),
                       dtype=np.float64, count=len(u1))


def normals(rng, n):
    """n draws of model.c's normal(), as float64: Box-Muller on u1 = 1 -
    uniform (in (0, 1]) and u2 = uniform, two uniforms per draw, the cosine
    branch only; log and cos are libm's (math.*), as the C code calls them."""
    u = rng.uniforms(2 * n)
    return _libm_normals((1.0 - u[0::2]).tolist(), u[1::2].tolist())


_CHUNK = 1 << 21


def normals_f32(rng, n, std):
    """(float)(normal() * std) for n draws, as trn_model_init_weights stores
    them. numpy's log and cos may differ from libm's in the last bits of the
    double (they are not correctly rounded either way), which changes the
    float only when the double lies next to a float rounding boundary: such
    draws (a few in a billion) are recomputed with libm's, the rest is
    numpy's, so the result is libm's bit for bit, fast."""
    out = np.empty(n, dtype=np.float32)
    two_pi = 2.0 * math.pi
    for lo in range(0, n, _CHUNK):
        m = min(_CHUNK, n - lo)
        u = rng.uniforms(2 * m)
        u1, u2 = 1.0 - u[0::2], u[1::2]
        x = np.sqrt(-2.0 * np.log(u1)) * np.cos(two_pi * u2) * std
        f = x.astype(np.float32)
        # distance to the nearer float rounding boundary around x, in units of
        # the double's spacing: numpy's log and cos are within a few ulps
        up = np.nextafter(f, np.float32(np.inf)).astype(np.float64)
        down = np.nextafter(f, np.float32(-np.inf)).astype(np.float64)
        fd = f.astype(np.float64)
        d = np.minimum(np.abs(x - (fd + up) / 2), np.abs(x - (fd + down) / 2))
        near = np.nonzero(d <= 256.0 * np.spacing(np.abs(x)))[0]
        if len(near):
            exact = _libm_normals(u1[near].tolist(), u2[near].tolist()) * std
            f[near] = exact.astype(np.float32)
        out[lo:lo + m] = f
    return out

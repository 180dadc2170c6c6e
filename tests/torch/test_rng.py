#!/usr/bin/python3
"""trainers/torch/ssrng.py computes the built-in's random numbers two ways;
both must be the same numbers: numpy's lanes (uniforms) against xoshiro256**
one output at a time, and the fast initialisation draws (numpy's log and
cos, libm's only next to a float rounding boundary) against libm's for every
draw, bit for bit, over 3 million draws (numpy's log and cos differ from
libm's in the last bit of the double for a large share of them, so the
boundary cases are exercised). The built-in's own numbers are checked by
test_agreement.py (the initial weights).
Usage: test_rng.py [SCALESWEEP_BINARY]   (the binary is not used)
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sstest as t  # noqa: E402


def main():
    t.need_torch()
    import numpy as np
    import ssrng
    a, b = ssrng.Xoshiro(12345), ssrng.Xoshiro(12345)
    fast = a.outputs(100003)
    slow = np.array([b.next() for _ in range(100003)], dtype=np.uint64)
    t.check((fast == slow).all() and a.s == b.s, "vectorised outputs differ from next()")
    t.check(ssrng.seed_state(0) != [0, 0, 0, 0], "seed 0 gives the zero state")
    a, b = ssrng.Xoshiro(7), ssrng.Xoshiro(7)
    t0 = time.time()
    f = ssrng.normals_f32(a, 3000000, 0.02)
    t1 = time.time()
    g = (ssrng.normals(b, 3000000) * 0.02).astype(np.float32)
    t2 = time.time()
    t.check((f == g).all() and a.s == b.s, "normals_f32 differs from libm's in %d draws"
            % (f != g).sum())
    print("3M draws: fast %.2f s, libm %.2f s, identical" % (t1 - t0, t2 - t1))
    print("ok")


if __name__ == "__main__":
    main()

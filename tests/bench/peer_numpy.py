#!/usr/bin/python3
"""tests/bench/peer_numpy.py — the numpy peer of bench_core (a benchmark, not a test).

numpy's softmax(Q K^T * scale) V, written as ../shared/bench/attn_bench.py writes it
(scores, shifted exp, normalised weights, output; what a numpy user runs), timed in
this process. bench_core starts it with OPENBLAS_NUM_THREADS=2 (both cores, as
attnd uses them) and reads its lines.

usage: OPENBLAS_NUM_THREADS=2 /usr/bin/python3 peer_numpy.py [reps] NxLxD[:cold] ...
Prints one line per shape:  peer numpy n=N L=L d=D mode=hot|cold median_ms=X
"cold" rotates through enough K/V pairs to exceed 128 MiB (4x the L3), as
bench_core's cold decode does. Samples last >= 20 ms each; median of reps.
"""
import math
import statistics
import sys
import time

import numpy as np


def attn_numpy(q, k, v, scale):
    s = q @ k.T
    s *= scale
    w = s - s.max(axis=1, keepdims=True)
    np.exp(w, out=w)
    w /= w.sum(axis=1, keepdims=True)
    return w @ v


def median_ms(fn, reps):
    fn()
    t0 = time.perf_counter()
    fn()
    inner = max(1, int(0.02 / max(time.perf_counter() - t0, 1e-7)))
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        out.append((time.perf_counter() - t0) / inner)
    return statistics.median(out) * 1e3


def main():
    args = sys.argv[1:]
    reps = 5
    if args and args[0].isdigit():
        reps = int(args.pop(0))
    rng = np.random.default_rng(0)
    for spec in args:
        shape, _, mode = spec.partition(":")
        n, L, d = (int(x) for x in shape.split("x"))
        mode = mode or "hot"
        q = rng.standard_normal((n, d)).astype(np.float32)
        npairs = max(2, math.ceil((128 << 20) / (2 * L * d * 4))) if mode == "cold" else 1
        kv = [(rng.standard_normal((L, d)).astype(np.float32),
               rng.standard_normal((L, d)).astype(np.float32)) for _ in range(npairs)]
        state = [0]

        def call():
            k, v = kv[state[0]]
            state[0] = (state[0] + 1) % npairs
            attn_numpy(q, k, v, 1.0 / math.sqrt(d))

        ms = median_ms(call, reps)
        print(f"peer numpy n={n} L={L} d={d} mode={mode} median_ms={ms:.4f}", flush=True)


if __name__ == "__main__":
    main()

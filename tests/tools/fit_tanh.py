#!/usr/bin/env python3
"""tests/tools/fit_tanh.py: the coefficients of core/simd_tanh.h.

tanh(x) ~ x * P(x^2) / Q(x^2) on [0, 9], P and Q of degree 4 in x^2 with
Q(0) = 1, fitted to the least maximum relative error by Lawson's iteratively
reweighted least squares around a Sanathanan-Koerner linearisation (each
step solves x*P - tanh(x)*Q = 0 weighted by 1/(tanh(x)*Q_previous)). The
printed coefficients are rounded to float, highest degree first, as the
header holds them, with the rounded fit's error measured in float64.
tests/unit/test_simd_x86.c checks the float evaluation against tanhl.

Usage: fit_tanh.py [DEG_P DEG_Q X]  (default 4 4 9); needs numpy
(Debian python3-numpy).
"""
import sys

import numpy as np


def fit(m, n, X, iters=200):
    x = np.unique(np.concatenate([np.linspace(1e-4, X, 20000),
                                  X * (0.5 - 0.5 * np.cos(np.linspace(0, np.pi, 20000)))]))
    x = x[x > 0]
    t, z = np.tanh(x), x * x
    w = np.full_like(x, 1.0 / len(x))
    q_prev = np.ones_like(x)
    for it in range(iters):
        A = np.hstack([x[:, None] * z[:, None] ** np.arange(m + 1),
                       -(t[:, None] * z[:, None] ** np.arange(1, n + 1))])
        s = np.sqrt(w) / (t * q_prev)
        As = A * s[:, None]
        norms = np.linalg.norm(As, axis=0)
        c = np.linalg.lstsq(As / norms, t * s, rcond=None)[0] / norms
        p, q = c[:m + 1], np.concatenate([[1.0], c[m + 1:]])
        q_prev = np.polyval(q[::-1], z)
        err = (x * np.polyval(p[::-1], z) / q_prev - t) / t
        if it >= 10:                      # Lawson: weight by the error
            w = w * np.abs(err)
            w /= w.sum()
    return p, q, np.abs(err).max()


def main():
    m, n, X = (int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])) \
        if len(sys.argv) > 3 else (4, 4, 9.0)
    p, q, e = fit(m, n, X)
    pf, qf = p.astype(np.float32), q.astype(np.float32)
    x = np.linspace(0, X, 2000001)[1:]
    z = x * x
    r = x * np.polyval(pf.astype(np.float64)[::-1], z) / np.polyval(qf.astype(np.float64)[::-1], z)
    rel = np.abs(r / np.tanh(x) - 1).max()
    print(f"fit: max relative error {e:.3g}; with float coefficients {rel:.3g} "
          f"({rel * 2**24:.2f} * 2^-24)")
    print("p:", ", ".join(f"{float(v)!r}f" for v in pf[::-1]))
    print("q:", ", ".join(f"{float(v)!r}f" for v in qf[::-1]))


if __name__ == "__main__":
    main()

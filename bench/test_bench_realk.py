"""Benchmarks for the real-k landscape tools, side by side with a finite-difference NumPy reference.

Run: .venv/bin/python -m pytest bench/test_bench_realk.py --benchmark-only -s

- Isotypic spectrum of the ΔS_{k-1} critical point at k = 6.5 (trivial + standard eigenvalues):
  YoungProblem.spectrum (exact Hessians of the refined fixed-point spaces) vs central-difference Hessians
  (h = 1e-4 over h = 1e-6 gradients, the previous implementation) of the same restricted risk on the
  (k-1, 1) and (k-2, 1, 1) spaces with a generalised eigensolver. The reference is ~1e-6 accurate.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import twolayer as tl  # noqa: E402
from twolayer.landscape import YoungProblem  # noqa: E402

K = 6.5
X6 = [0.986704, -0.050413, -0.601512, 0.308011, 0.224516]


def _point():
    prob = YoungProblem(2)
    x, _, ok = prob.solve(X6, [K - 1.0, 1.0])
    assert ok
    return prob, x


def _fd_grad(f, x, h=1e-6):
    E = np.eye(x.size) * h
    return np.array([(f(x + e) - f(x - e)) / (2 * h) for e in E])


def _fd_hess(f, x, h=1e-4):
    H = np.array([_fd_grad(f, x + h * e) - _fd_grad(f, x - h * e) for e in np.eye(x.size)]) / (2 * h)
    return 0.5 * (H + H.T)


def _pencil(H, G):
    L = np.linalg.cholesky(G)
    Li = np.linalg.inv(L)
    return np.linalg.eigvalsh(Li @ H @ Li.T)


def _fd_spectrum(x):
    s2, s3 = np.array([K - 1.0, 1.0]), np.array([K - 2.0, 1.0, 1.0])
    risk = tl.landscape.reduced_risk
    a, b, f, c, e = x
    x3 = np.array([a, b, a, f, b, c, b, c, e, e])  # the same matrix in the Δ(S_{k-2} × S_1 × S_1) space
    G2, G3 = np.diag(YoungProblem(2).metric(s2)), np.diag(YoungProblem(3).metric(s3))
    triv = _pencil(_fd_hess(lambda z: risk(z, s2), np.asarray(x)), G2)
    both = list(_pencil(_fd_hess(lambda z: risk(z, s3), x3), G3))
    for t in triv:
        both.pop(int(np.argmin(np.abs(np.array(both) - t))))
    return np.sort(triv), np.sort(both)


@pytest.mark.quick
def test_isotypic_spectrum_twolayer(benchmark, record):
    benchmark.group = f"isotypic spectrum k={K}"
    prob, x = _point()
    spec = benchmark.pedantic(lambda: prob.spectrum(x, [K - 1.0, 1.0]), rounds=5)
    record(benchmark, unit="spectrum", ref="test_isotypic_spectrum_fd_reference")
    assert spec.eigenvalues["standard[0]"].size == 5


@pytest.mark.quick
def test_isotypic_spectrum_fd_reference(benchmark, record):
    benchmark.group = f"isotypic spectrum k={K}"
    prob, x = _point()
    triv, std = benchmark.pedantic(lambda: _fd_spectrum(x), rounds=3)
    record(benchmark, unit="spectrum")
    exact = prob.spectrum(x, [K - 1.0, 1.0])
    err = max(np.abs(triv - exact.eigenvalues["trivial"]).max(), np.abs(std - exact.eigenvalues["standard[0]"]).max())
    print(f"\nfinite-difference reference: max eigenvalue error {err:.2e}")
    assert err < 1e-4

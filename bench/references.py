"""Straightforward NumPy implementations of the hot paths, the side-by-side references of the benchmarks."""

from __future__ import annotations

from typing import Any

import numpy as np


def erf_i4_numpy(C: Any, xp: Any = np) -> Any:
    """Vectorised erf I4 (DESIGN.md section 4) over C of shape (..., 4, 4); ``xp``: the array module (NumPy, or
    jax.numpy for the GPU benchmarks)."""
    c = lambda i, j: C[..., i - 1, j - 1]  # noqa: E731
    lam4 = (1 + c(1, 1)) * (1 + c(2, 2)) - c(1, 2) ** 2
    lam0 = (lam4 * c(3, 4) - c(2, 3) * c(2, 4) * (1 + c(1, 1)) - c(1, 3) * c(1, 4) * (1 + c(2, 2))
            + c(1, 2) * c(1, 3) * c(2, 4) + c(1, 2) * c(1, 4) * c(2, 3))
    lam1 = (lam4 * (1 + c(3, 3)) - c(2, 3) ** 2 * (1 + c(1, 1)) - c(1, 3) ** 2 * (1 + c(2, 2))
            + 2 * c(1, 2) * c(1, 3) * c(2, 3))
    lam2 = (lam4 * (1 + c(4, 4)) - c(2, 4) ** 2 * (1 + c(1, 1)) - c(1, 4) ** 2 * (1 + c(2, 2))
            + 2 * c(1, 2) * c(1, 4) * c(2, 4))
    return 4 / xp.pi**2 / xp.sqrt(lam4) * xp.arcsin(lam0 / xp.sqrt(lam1 * lam2))


def relu_gradient_numpy(W: np.ndarray, V: np.ndarray) -> np.ndarray:
    """Population gradient for ReLU, lambda = w.x, unit second layers (DESIGN.md section 4):
    dL/dw_i = w_i/2 + sum_{j != i} g(w_i, w_j) - sum_r g(w_i, v_r),
    g(u, v) = [(pi - theta) v + |v| sin(theta) u/|u|] / (2 pi)."""

    def g_sum(U: np.ndarray, X: np.ndarray, skip_diagonal: bool) -> np.ndarray:
        nu, nx = np.linalg.norm(U, axis=1), np.linalg.norm(X, axis=1)
        cos = np.clip((U @ X.T) / np.outer(nu, nx), -1.0, 1.0)
        theta = np.arccos(cos)
        coef_x = (np.pi - theta) / (2 * np.pi)
        coef_u = nx[None, :] * np.sin(theta) / (2 * np.pi) / nu[:, None]
        if skip_diagonal:
            np.fill_diagonal(coef_x, 0.0)
            np.fill_diagonal(coef_u, 0.0)
        return coef_x @ X + coef_u.sum(axis=1)[:, None] * U

    return W / 2 + g_sum(W, W, True) - g_sum(W, V, False)

"""Shared test helpers: Monte Carlo means with standard errors from one fixed Gaussian sample."""

from __future__ import annotations

import signal
from collections.abc import Callable

import numpy as np
import pytest

# A shell starts a background job (`cmd &`) with SIGINT ignored, and Python then keeps it ignored: the Ctrl-C tests
# send SIGINT to this process and need Python's usual handler, as in a foreground run.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)



def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` skip cleanly, with the reason, where the CUDA backend or a GPU is missing."""
    gpu = [item for item in items if "gpu" in item.keywords]
    if not gpu:
        return
    from twolayer._validation import cuda_unavailable

    why = cuda_unavailable()
    if why is not None:
        for item in gpu:
            item.add_marker(pytest.mark.skip(reason=why))


MC_SAMPLES = 10_000_000
MC_CHUNK = 1_000_000


class MonteCarlo:
    """E[f(l)] for l ~ N(0, C) over MC_SAMPLES draws, streamed in chunks; returns (mean, standard error)."""

    def __init__(self, C: np.ndarray, seed: int = 12345, samples: int = MC_SAMPLES, chunk: int = MC_CHUNK) -> None:
        w, V = np.linalg.eigh(C)
        self.factor = V * np.sqrt(np.clip(w, 0.0, None))  # works for singular C too
        self.seed, self.samples, self.chunk = seed, samples, chunk

    def chunks(self):
        rng = np.random.default_rng(self.seed)
        done = 0
        while done < self.samples:
            n = min(self.chunk, self.samples - done)
            yield rng.standard_normal((n, self.factor.shape[0])) @ self.factor.T
            done += n

    def means(self, fns: dict[str, Callable[[np.ndarray], np.ndarray]]) -> dict[str, tuple[float, float]]:
        """(mean, standard error) of each f(l) in ``fns``."""
        def chunk_sums(X: np.ndarray) -> dict:
            values = {k: f(X) for k, f in fns.items()}
            return {k: (v.sum(), (v * v).sum()) for k, v in values.items()}

        return {k: (float(m), float(se)) for k, (m, se) in self.sums(chunk_sums).items()}

    def sums(self, chunk_sums: Callable[[np.ndarray], dict]) -> dict:
        """(mean, standard error) per key from per-chunk sums: ``chunk_sums(X)`` gives {key: (sum of f, sum of f^2)}
        over the chunk's rows X (arrays of sums give arrays of means, e.g. a whole kernel table from one GEMM)."""
        s1: dict = {}
        s2: dict = {}
        for X in self.chunks():
            for k, (a, b) in chunk_sums(X).items():
                s1[k] = s1.get(k, 0.0) + a
                s2[k] = s2.get(k, 0.0) + b
        out = {}
        for k in s1:
            m = s1[k] / self.samples
            var = np.maximum(s2[k] / self.samples - m * m, 0.0)
            out[k] = (m, np.sqrt(var / self.samples))
        return out


def assert_mc(value: float, mean_se: tuple[float, float], n_se: float = 5.0, what: str = "") -> None:
    """|value - mean| <= n_se standard errors (plus round-off)."""
    mean, se = mean_se
    assert abs(value - mean) <= n_se * se + 1e-12 * (1 + abs(mean)), (
        f"{what}: closed form {value!r} vs Monte Carlo {mean!r} +- {se!r} ({(value - mean) / max(se, 1e-300):.1f} SE)")


def assert_ode_follows_sgd(ens, ref, d: int) -> None:
    """The mean of Q, M and the risk of an SGD ensemble within 4 standard errors plus 0.2 / sqrt(d) + 2 / d of the
    ODE ``ref`` at the same times (test_sgd_ode.py's allowance)."""
    for name in ("Q", "M", "risk"):
        x, y = getattr(ens, name), getattr(ref, name)
        tol = 4.0 * x.std(axis=0, ddof=1) / np.sqrt(x.shape[0]) + 0.2 / np.sqrt(d) + 2.0 / d
        assert np.all(np.abs(x.mean(0) - y) <= tol), (name, np.abs(x.mean(0) - y).max())


@pytest.fixture(scope="session")
def random_cov4() -> np.ndarray:
    """A fixed, generic 4x4 covariance with unequal variances and sizeable correlations."""
    rng = np.random.default_rng(2024)
    A = rng.standard_normal((4, 4))
    return A @ A.T / 4 + 0.1 * np.eye(4)

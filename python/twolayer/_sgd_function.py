"""SGD on a :class:`~twolayer.targets.FunctionTarget` (a NumPy function of the k projections), in NumPy.

The same update as :func:`twolayer.sgd.simulate` (module docstring there): per step B fresh samples (online), or with
``n_samples=n`` B samples of one training set drawn per run (labels and their noise fixed), visited at positions p =
step B + j in epochs of n, each epoch in its own random order unless ``shuffle=False`` (as the core's simulator; the
order comes from NumPy's stream, not Philox), w_i += (lr sqrt(s) / d) mean_batch[c a_i sigma'(l_i) E x], a_i +=
(lr_readout / d) mean_batch[c sigma(l_i) E], b_i += (lr_bias / d) mean_batch[c a_i sigma'(l_i) E] (student biases: l_i
= w_i . x / sqrt(s) + b_i; recorded as ``Trajectory.bias`` in a run with biases), spherical projection optional, t =
steps / d. The labels come from Python, so this is much slower than the core's simulator (one NumPy step costs tens of
microseconds); the random streams are NumPy's (seed, run), not the core's Philox streams, and the recorded risk is a
Monte Carlo estimate on a fixed test set of ``n_test`` samples (``meta["risk_method"]``): no closed form exists for an
arbitrary function.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from . import _core
from ._grid import record_steps
from ._validation import INT32_MAX, boolean, integer, positive, run_indices, seed_arg
from .activations import ActivationName, sigma
from .activations import derivative as dsigma
from .networks import Network, check_network
from .results import Status, Trajectory
from .targets import FunctionTarget

_N_TEST = 20_000


def _divergence(W: Any, a: Any, Wt: Any, s: float, P: Any, v: Any, start: tuple[Any, Any, Any]) -> str:
    """Why the run at weights (W, a) has diverged by the rule of every engine (divergence.hpp), '' if not."""
    with np.errstate(all="ignore"):
        return _core.divergence(W @ W.T / s, W @ Wt.T / s, a, P, v, *start)


@dataclass(frozen=True)
class _Setup:
    """The checked arguments of one :func:`simulate_function_target` call, shared by its runs."""

    act: ActivationName
    d: int
    s: float
    c: float
    lr: float
    lr_readout: float
    lr_bias: float
    noise: float
    B: int
    n: int
    shuffle: bool
    spherical: bool
    train_first_layer: bool
    seed: int
    biased: bool
    rec: NDArray[np.int64]
    steps: int


def _setup(student: Any, target: FunctionTarget, *, lr: Any, lr_readout: Any, noise: Any, batch_size: int,
           spherical: bool, t_max: float | None, times: Any, seed: int, n_samples: int | None, n_records: int,
           train_first_layer: bool, shuffle: bool, lr_bias: Any) -> _Setup:
    """The arguments of :func:`simulate_function_target`, checked (errors name them)."""
    if not isinstance(student, Network):
        raise TypeError("student: a FunctionTarget takes a single initial Network")
    check_network(student, "student", biases=True)
    if target.d != student.d or target.scaling != student.scaling:
        raise ValueError(f"teacher: the target's d = {target.d}, scaling {target.scaling!r} do not match the "
                         f"student's d = {student.d}, scaling {student.scaling!r}")
    if student.activation == "step" and train_first_layer:
        raise ValueError("activation: the step activation has a delta derivative, so SGD cannot train the first "
                         "layer")
    lr_ = positive(lr, "lr")
    lr_a = positive(lr_readout, "lr_readout", allow_zero=True)
    noise_ = positive(noise, "noise", allow_zero=True)
    lr_b = positive(lr_bias, "lr_bias", allow_zero=True)
    B = integer(batch_size, "batch_size", 1, INT32_MAX)
    n = 0 if n_samples is None else integer(n_samples, "n_samples", 1, 2**32 - 1)
    if n and B > n:
        raise ValueError(f"batch_size: {B} exceeds the training set size n_samples={n}")
    shuffle_ = boolean(shuffle, "shuffle")
    spherical_ = boolean(spherical, "spherical")
    train_first = boolean(train_first_layer, "train_first_layer")
    seed_ = seed_arg(seed)
    d = student.d
    rec = record_steps(d, t_max, times, n_records)
    steps = int(rec[-1]) if t_max is None else max(int(round(positive(t_max, "t_max") * d)), int(rec[-1]))
    return _Setup(student.activation, d, student.scale, student.readout_factor, lr_, lr_a, lr_b, noise_, B, n,
                  shuffle_, spherical_, train_first, seed_, student.has_bias or lr_b > 0, rec, steps)


class _Samples:
    """One run's samples: B fresh ones per step (online), or batches of a training set drawn once (labels and their
    noise fixed), visited in epochs, each in its own random order unless ``shuffle=False``."""

    def __init__(self, u: _Setup, target: FunctionTarget, rng: np.random.Generator) -> None:
        self.u, self.target, self.rng = u, target, rng
        self.Xn, self.yn, self.order, self.epoch = np.empty((0, u.d)), np.empty(0), np.arange(u.n), -1
        if u.n:
            self.Xn = rng.standard_normal((u.n, u.d))
            self.yn = self.labels(self.Xn)
            if u.noise > 0:
                self.yn = self.yn + math.sqrt(u.noise) * rng.standard_normal(u.n)

    def labels(self, X: NDArray[np.float64]) -> NDArray[np.float64]:
        """The target's labels y = f(W* x / sqrt(s)) of the rows of X."""
        return np.asarray(self.target.function(X @ self.target.directions.T / math.sqrt(self.u.s)))

    def batch(self, step: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The inputs and labels of step ``step`` (a training-set batch may cross into the next epoch)."""
        u, rng = self.u, self.rng
        if not u.n:
            X = rng.standard_normal((u.B, u.d))
            y = self.labels(X)
            if u.noise > 0:
                y = y + math.sqrt(u.noise) * rng.standard_normal(u.B)
            return X, y
        pos = step * u.B + np.arange(u.B)
        idx = np.empty(u.B, dtype=np.int64)
        for e in np.unique(pos // u.n):
            if e != self.epoch:
                self.order = rng.permutation(u.n) if u.shuffle and u.B < u.n else np.arange(u.n)
                self.epoch = int(e)
            sel = pos // u.n == e
            idx[sel] = self.order[pos[sel] % u.n]
        return self.Xn[idx], self.yn[idx]


def _run(u: _Setup, student: Network, target: FunctionTarget, run: int, Xt: NDArray[np.float64],
         yt: NDArray[np.float64]) -> Trajectory:
    """One run: the SGD steps with records on the grid and the divergence rule of every engine."""
    d, s, c, act, rec = u.d, u.s, u.c, u.act, u.rec
    Wt = target.directions
    samples = _Samples(u, target, np.random.default_rng([u.seed, int(run)]))
    W, a, b = student.W.copy(), student.effective_a.copy(), student.bias.copy()
    if u.spherical:
        W *= math.sqrt(s) / np.linalg.norm(W, axis=1, keepdims=True)
    Qs, Ms, As, Rs, Bs = [], [], [], [], []
    nxt = 0
    P, v = np.eye(target.k), np.zeros(target.k)
    start = (W @ W.T / s, W @ Wt.T / s, a.copy())
    why, stop = "", -1
    for step in range(u.steps + 1):
        if step % d == 0 or (nxt < len(rec) and rec[nxt] == step):
            why = _divergence(W, a, Wt, s, P, v, start)
            if why:
                stop = step
                break
        if nxt < len(rec) and rec[nxt] == step:
            nxt += 1
            Qs.append(W @ W.T / s)
            Ms.append(W @ Wt.T / s)
            As.append(a.copy())
            Bs.append(b.copy())
            pre = Xt @ W.T / math.sqrt(s)
            pred = sigma(act, pre + b if u.biased else pre) @ a
            Rs.append(0.5 * float(np.mean((yt - pred) ** 2)))
        if step == u.steps:
            break
        X, y = samples.batch(step)
        lam = X @ W.T / math.sqrt(s)
        if u.biased:
            lam = lam + b
        err = y - sigma(act, lam) @ a
        g = a[None, :] * dsigma(act, lam) * err[:, None]  # (B, K): a_i sigma'(l_i) E
        W_new = W + u.lr * math.sqrt(s) / (d * u.B) * (g.T @ X) if u.train_first_layer else W
        if u.lr_bias > 0:
            b = b + u.lr_bias / (d * u.B) * g.sum(axis=0)
        if u.lr_readout > 0:
            a = a + u.lr_readout * c * c / (d * u.B) * (sigma(act, lam).T @ err)
        W = W_new
        if u.spherical:
            W *= math.sqrt(s) / np.linalg.norm(W, axis=1, keepdims=True)
        if not (np.all(np.isfinite(W)) and np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
            why, stop = _divergence(W, a, Wt, s, P, v, start), step + 1
            break
    T = len(Rs)
    return Trajectory(t=rec[:T] / d, Q=np.array(Qs), M=np.array(Ms), a=np.array(As), risk=np.array(Rs),
                      status=Status.diverged if why else Status.completed,
                      message=(_core.diverged_message(stop / d, why) if why else
                               f"{u.steps} NumPy SGD steps on a FunctionTarget"
                               + (f" (training set of {u.n})" if u.n else "")), time_unit="t = steps / d",
                      stop_time=stop / d if why else math.nan,
                      # as the core's simulator: the final weights of runs that succeeded (a diverged run's are
                      # not finite)
                      student=None if why else student.with_weights(W, a / c, bias=b),
                      bias=np.array(Bs).reshape(T, student.K) if u.biased else None,
                      meta={"batch_size": u.B, "d": d, "seed": u.seed, "run": int(run), "lr": u.lr,
                            "lr_readout": u.lr_readout, "noise": u.noise,
                            **({"lr_bias": u.lr_bias} if u.biased else {}), "activation": act,
                            "teacher_activation": "function", "regime": "online",
                            **({"n_samples": u.n, "shuffle": u.shuffle} if u.n else {}),
                            "risk_method": f"Monte Carlo ({_N_TEST} test samples)"},
                      P=np.eye(target.k), v=np.zeros(target.k))


def simulate_function_target(student: Any, target: FunctionTarget, *, lr: Any, lr_readout: Any,
                             noise: Any, batch_size: int, spherical: bool, t_max: float | None, times: Any, seed: int,
                             seeds: Any, n_samples: int | None, n_records: int,
                             train_first_layer: bool, shuffle: bool = True,
                             lr_bias: Any = 0.0) -> tuple[list[Trajectory], dict[str, Any]]:
    """The runs of ``twolayer.sgd.simulate(student, target, ...)`` (arguments as there; ``seeds=None``: one run)
    and the other fields of their :class:`~twolayer.Ensemble`, which ``sgd.simulate`` builds."""
    u = _setup(student, target, lr=lr, lr_readout=lr_readout, noise=noise, batch_size=batch_size,
               spherical=spherical, t_max=t_max, times=times, seed=seed, n_samples=n_samples, n_records=n_records,
               train_first_layer=train_first_layer, shuffle=shuffle, lr_bias=lr_bias)
    run_ids = np.array([0]) if seeds is None else run_indices(seeds)
    Xt = np.random.default_rng([u.seed, 2**32 + 1]).standard_normal((_N_TEST, u.d))
    yt = target.function(Xt @ target.directions.T / math.sqrt(u.s))
    with np.errstate(over="ignore", invalid="ignore"):  # weights leaving the double range: reported as divergence
        runs = [_run(u, student, target, int(run), Xt, yt) for run in run_ids]
    R = len(runs)
    params = {"lr": np.full(R, u.lr), "lr_readout": np.full(R, u.lr_readout), "noise": np.full(R, u.noise),
              "risk_tol": np.full(R, np.nan), "risk_rtol": np.full(R, np.nan),
              **({"lr_bias": np.full(R, u.lr_bias)} if u.biased else {})}
    return runs, {"run_ids": run_ids.astype(np.int64), "t": u.rec / u.d, "seed": u.seed,
                  "meta": {"d": u.d, "batch_size": u.B, "risk_method": runs[0].meta["risk_method"]}, "params": params}

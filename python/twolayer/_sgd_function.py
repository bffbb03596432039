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
from typing import Any

import numpy as np

from . import _core
from ._grid import record_steps
from ._validation import INT32_MAX, boolean, integer, positive, run_indices, seed_arg
from .activations import derivative as dsigma
from .activations import sigma
from .networks import Network, check_network
from .results import Status, Trajectory
from .targets import FunctionTarget

_N_TEST = 20_000


def _divergence(W: Any, a: Any, Wt: Any, s: float, P: Any, v: Any, start: tuple[Any, Any, Any]) -> str:
    """Why the run at weights (W, a) has diverged by the rule of every engine (divergence.hpp), '' if not."""
    with np.errstate(all="ignore"):
        return _core.divergence(W @ W.T / s, W @ Wt.T / s, a, P, v, *start)


def simulate_function_target(student: Any, target: FunctionTarget, *, lr: Any, lr_readout: Any,  # noqa: C901 (23)
                             noise: Any, batch_size: int, spherical: bool, t_max: float | None, times: Any, seed: int,
                             seeds: Any, n_samples: int | None, n_records: int,
                             train_first_layer: bool, shuffle: bool = True,
                             lr_bias: Any = 0.0) -> tuple[list[Trajectory], dict[str, Any]]:
    """The runs of ``twolayer.sgd.simulate(student, target, ...)`` (arguments as there; ``seeds=None``: one run)
    and the other fields of their :class:`~twolayer.Ensemble`, which ``sgd.simulate`` builds."""
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
    biased = student.has_bias or lr_b > 0
    B = integer(batch_size, "batch_size", 1, INT32_MAX)
    n = 0 if n_samples is None else integer(n_samples, "n_samples", 1, 2**32 - 1)
    if n and B > n:
        raise ValueError(f"batch_size: {B} exceeds the training set size n_samples={n}")
    shuffle = boolean(shuffle, "shuffle")
    spherical = boolean(spherical, "spherical")
    train_first_layer = boolean(train_first_layer, "train_first_layer")
    seed_ = seed_arg(seed)
    d, s, c = student.d, student.scale, student.readout_factor
    rec = record_steps(d, t_max, times, n_records)
    steps = int(rec[-1]) if t_max is None else max(int(round(positive(t_max, "t_max") * d)), int(rec[-1]))
    run_ids = np.array([0]) if seeds is None else run_indices(seeds)
    Wt = target.directions
    act = student.activation
    test_rng = np.random.default_rng([seed_, 2**32 + 1])
    Xt = test_rng.standard_normal((_N_TEST, d))
    yt = target.function(Xt @ Wt.T / math.sqrt(s))
    runs = []
    for run in run_ids:
        rng = np.random.default_rng([seed_, int(run)])
        Xn, yn, order, epoch = np.empty((0, d)), np.empty(0), np.arange(n), -1
        if n:  # the run's training set: inputs, labels and label noise drawn once
            Xn = rng.standard_normal((n, d))
            yn = target.function(Xn @ Wt.T / math.sqrt(s))
            if noise_ > 0:
                yn = yn + math.sqrt(noise_) * rng.standard_normal(n)
        W = student.W.copy()
        a = student.effective_a.copy()
        b = student.bias.copy()
        if spherical:
            W *= math.sqrt(s) / np.linalg.norm(W, axis=1, keepdims=True)
        Qs, Ms, As, Rs, Bs = [], [], [], [], []
        nxt = 0
        P, v = np.eye(target.k), np.zeros(target.k)
        start = (W @ W.T / s, W @ Wt.T / s, a.copy())
        why, stop = "", -1
        for step in range(steps + 1):
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
                pred = sigma(act, pre + b if biased else pre) @ a
                Rs.append(0.5 * float(np.mean((yt - pred) ** 2)))
            if step == steps:
                break
            if n:
                pos = step * B + np.arange(B)
                idx = np.empty(B, dtype=np.int64)
                for e in np.unique(pos // n):  # a batch may cross into the next epoch
                    if e != epoch:
                        order, epoch = (rng.permutation(n) if shuffle and B < n else np.arange(n)), int(e)
                    sel = pos // n == e
                    idx[sel] = order[pos[sel] % n]
                X, y = Xn[idx], yn[idx]
            else:
                X = rng.standard_normal((B, d))
                y = target.function(X @ Wt.T / math.sqrt(s))
                if noise_ > 0:
                    y = y + math.sqrt(noise_) * rng.standard_normal(B)
            lam = X @ W.T / math.sqrt(s)
            if biased:
                lam = lam + b
            err = y - sigma(act, lam) @ a
            g = a[None, :] * dsigma(act, lam) * err[:, None]  # (B, K): a_i sigma'(l_i) E
            W_new = W + lr_ * math.sqrt(s) / (d * B) * (g.T @ X) if train_first_layer else W
            if lr_b > 0:
                b = b + lr_b / (d * B) * g.sum(axis=0)
            if lr_a > 0:
                a = a + lr_a * c * c / (d * B) * (sigma(act, lam).T @ err)
            W = W_new
            if spherical:
                W *= math.sqrt(s) / np.linalg.norm(W, axis=1, keepdims=True)
            if not (np.all(np.isfinite(W)) and np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
                why, stop = _divergence(W, a, Wt, s, P, v, start), step + 1
                break
        T = len(Rs)
        runs.append(Trajectory(t=rec[:T] / d, Q=np.array(Qs), M=np.array(Ms), a=np.array(As), risk=np.array(Rs),
                               status=Status.diverged if why else Status.completed,
                               message=(_core.diverged_message(stop / d, why) if why else
                                        f"{steps} NumPy SGD steps on a FunctionTarget"
                                        + (f" (training set of {n})" if n else "")), time_unit="t = steps / d",
                               stop_time=stop / d if why else math.nan,
                               student=student.with_weights(W, a / c, bias=b),
                               bias=np.array(Bs).reshape(T, student.K) if biased else None,
                               meta={"batch_size": B, "d": d, "seed": seed_, "run": int(run), "lr": lr_,
                                     "lr_readout": lr_a, "noise": noise_, **({"lr_bias": lr_b} if biased else {}),
                                     "activation": act,
                                     "teacher_activation": "function", "regime": "online",
                                     **({"n_samples": n, "shuffle": shuffle} if n else {}),
                                     "risk_method": f"Monte Carlo ({_N_TEST} test samples)"},
                               P=np.eye(target.k), v=np.zeros(target.k)))
    R = len(runs)
    params = {"lr": np.full(R, lr_), "lr_readout": np.full(R, lr_a), "noise": np.full(R, noise_),
              "risk_tol": np.full(R, np.nan), "risk_rtol": np.full(R, np.nan),
              **({"lr_bias": np.full(R, lr_b)} if biased else {})}
    return runs, {"run_ids": run_ids.astype(np.int64), "t": rec / d, "seed": seed_,
                  "meta": {"d": d, "batch_size": B, "risk_method": runs[0].meta["risk_method"]}, "params": params}

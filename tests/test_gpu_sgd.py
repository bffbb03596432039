"""tl.sgd.simulate(device="cuda"): SGD ensembles and grids on the GPU against the CPU path.

The GPU draws the same Philox samples (rng.hpp's box_muller, one source; bitwise where the host has FMA, which the
vectorised generator implies) and uses the CPU's per-sample arithmetic (sgd_sample.hpp); only the sums over d (the
pre-activations, the spherical norms and the overlaps) are taken in another order. Over the few hundred steps of
these runs that reassociation stays near 1e-13, so the rows must agree to RTOL / ATOL; statuses, stop steps and
divergence reasons must be identical. The GPU tests need the CUDA backend and a GPU (marked ``gpu``); the refusals
run everywhere.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import twolayer as tl

# Reassociation of sums over d <= 200 over <= 2000 steps of non-chaotic runs: below 3e-13 relative in an emulation of
# the kernels on the host (the CUDA sources run by OS threads), far below these.
RTOL = 1e-9
ATOL = 1e-11


def _pair(K: int, M: int, d: int, act: Any, seed: int = 1) -> tuple[tl.networks.Network, tl.networks.Network]:
    return tl.networks.teacher_student(K, M, d, act, seed=seed)


def _both(student: Any, teacher: Any, **kw: Any) -> tuple[Any, Any]:
    return (tl.sgd.simulate(student, teacher, device="cpu", **kw),
            tl.sgd.simulate(student, teacher, device="cuda", **kw))


def _assert_same(cpu: tl.sgd.Ensemble, gpu: tl.sgd.Ensemble) -> None:
    assert gpu.status == cpu.status
    for c, g in zip(cpu, gpu, strict=True):
        assert g.meta.get("stop_step") == c.meta.get("stop_step")
        # converged: the message holds the interpolated crossing time, whose last digits may differ
        assert g.message == c.message or g.status == "converged"
        assert len(g) == len(c)
        for name in ("Q", "M", "a", "risk", "bias"):
            if getattr(c, name) is None:  # bias: runs without biases
                assert getattr(g, name) is None
                continue
            np.testing.assert_allclose(getattr(g, name), getattr(c, name), rtol=RTOL, atol=ATOL, err_msg=name)
        if c.student is not None:
            np.testing.assert_allclose(g.student.W, c.student.W, rtol=RTOL, atol=ATOL)
            np.testing.assert_allclose(g.student.a, c.student.a, rtol=RTOL, atol=ATOL)
            np.testing.assert_allclose(g.student.bias, c.student.bias, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(gpu.stop_time, cpu.stop_time, rtol=1e-9, equal_nan=True)


# ---- on the GPU --------------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("act, B, spherical", [("erf", 1, False), ("relu", 3, True), ("tanh", 2, False)])
def test_gpu_sgd_with_biases_matches_the_cpu(act: str, B: int, spherical: bool) -> None:
    """Student and teacher biases, the student's trained (lr_bias per run) or fixed: the same rows and biases."""
    s, t = _pair(3, 2, 150, act, seed=4)
    s = s.with_weights(s.W, bias=[0.3, -0.5, 0.1])
    t = t.with_weights(t.W, bias=[-0.2, 0.4])
    cpu, gpu = _both(s, t, lr=1.0, lr_readout=0.3, noise=0.05, batch_size=B, spherical=spherical, t_max=3.0,
                     n_records=7, seeds=[0, 1, 2], lr_bias=[0.0, 0.5, 1.0])
    _assert_same(cpu, gpu)
    assert np.all(cpu[0].bias == s.bias) and not np.allclose(cpu[2].bias[-1], s.bias)


@pytest.mark.gpu
def test_gpu_sgd_risk_and_early_stop_with_biases() -> None:
    """With biases the GPU driver's recorded risk (on the host, from the device's state rows) is the exact risk with
    means: early stop by risk_rtol stops the CPU and GPU runs at the same record, and the last risk is
    population.risk of the final weights."""
    s, t = _pair(2, 2, 150, "erf", seed=4)
    s = s.with_weights(s.W, bias=[0.3, -0.5])
    t = t.with_weights(t.W, bias=[-0.2, 0.4])
    cpu, gpu = _both(s, t, lr=1.0, lr_readout=0.3, t_max=10.0, n_records=21, seeds=[0, 1], lr_bias=[0.5, 1.0],
                     risk_rtol=0.6)
    _assert_same(cpu, gpu)
    for g in gpu:
        assert g.status == "converged" and np.all(np.isfinite(g.risk))
        np.testing.assert_allclose(g.risk[-1], tl.population.risk(g.student, t), rtol=1e-12, atol=1e-14)


@pytest.mark.gpu
@pytest.mark.parametrize("first", [0, 5, 31, 32, 1000, 2**33 + 7])
@pytest.mark.parametrize("one_by_one", [False, True])
def test_gpu_gaussians_are_the_cpu_gaussians(first: int, one_by_one: bool) -> None:
    n = 10_000
    for stream in (1, 2):
        cpu = tl._core.rng_gaussians(11, 7, stream, first, n)
        gpu = tl._core.rng_gaussians(11, 7, stream, first, n, scalar=one_by_one, device="cuda")
        if tl._core.rng_vectorised():  # the host has FMA, as the device: the same bits
            np.testing.assert_array_equal(gpu, cpu)
        else:  # the host's a b + c rounds twice in single precision (rng.hpp)
            np.testing.assert_allclose(gpu, cpu, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("act", "K", "M", "d", "kw"),
    [
        ("erf", 2, 2, 100, dict(noise=0.1, lr_readout=0.5)),
        ("erf", 4, 1, 64, dict(batch_size=3)),
        ("relu", 3, 2, 80, dict(lr_readout=0.2)),
        ("quadratic", 2, 1, 50, dict(noise=0.05)),
        ("linear", 1, 3, 40, dict(batch_size=2, noise=0.3)),
        ("erf", 2, 2, 60, dict(spherical=True)),
        ("relu", 2, 3, 60, dict(spherical=True, batch_size=4, lr_readout=0.3)),
        ("erf", 8, 8, 200, dict(train_first_layer=False, lr_readout=1.0)),
    ],
)
def test_gpu_ensemble_matches_cpu(act: str, K: int, M: int, d: int, kw: dict[str, Any]) -> None:
    student, teacher = _pair(K, M, d, act)
    lr = {"quadratic": 0.05, "linear": 0.3}.get(act, 1.0)
    cpu, gpu = _both(student, teacher, lr=lr, t_max=3, n_records=7, seeds=4, **kw)
    assert all(s == "completed" for s in cpu.status)
    _assert_same(cpu, gpu)


@pytest.mark.gpu
def test_gpu_grid_with_per_run_starts_matches_cpu() -> None:
    students = [_pair(2, 2, 100, "erf", seed=s)[0] for s in range(6)]
    teacher = _pair(2, 2, 100, "erf")[1]
    g = tl.sgd.grid(3, lr=[0.5, 1.5])
    cpu, gpu = _both(students, teacher, t_max=2, n_records=5, **g)
    _assert_same(cpu, gpu)


@pytest.mark.gpu
def test_gpu_statuses_match_cpu() -> None:
    # quadratic: members whose sample error overflows within a step (at different steps)
    student, teacher = _pair(2, 2, 100, "quadratic", seed=2)
    cpu, gpu = _both(student, teacher, lr=np.array([0.05, 0.5, 5.0, 50.0]), t_max=5, n_records=6, seeds=[0, 1, 2, 3])
    assert cpu.status == ["completed", "diverged", "diverged", "diverged"]
    _assert_same(cpu, gpu)
    # relu: members that break the growth rule at a check (every d steps)
    student, teacher = _pair(2, 2, 100, "relu", seed=2)
    cpu, gpu = _both(student, teacher, lr=np.array([0.5, 3.0, 10.0]), t_max=5, n_records=6, seeds=[0, 1, 2])
    assert cpu.status == ["completed", "diverged", "diverged"]
    _assert_same(cpu, gpu)
    # erf: a converged member (early stop at a record) beside a completed one. (Not lr = 30: that run is chaotic,
    # reassociation differences grow ~10-fold per unit of time, measured in an emulation of the kernels.)
    student, teacher = _pair(2, 2, 100, "erf", seed=2)
    cpu, gpu = _both(student, teacher, lr=np.array([0.5, 2.0]), t_max=20, n_records=21, seeds=[0, 1], risk_rtol=0.05)
    assert cpu.status == ["converged", "completed"]
    _assert_same(cpu, gpu)


@pytest.mark.gpu
def test_gpu_sgd_is_interruptible() -> None:
    from test_interrupt import DEADLINE, interrupt

    student, teacher = _pair(2, 2, 200, "erf", seed=0)
    tl.sgd.simulate(student, teacher, lr=0.5, t_max=1, device="cuda")  # the CUDA context exists before the signal
    exc, latency = interrupt(lambda: tl.sgd.simulate(student, teacher, lr=0.5, t_max=5e5, seeds=64, n_records=50,
                                                     device="cuda"), after=1.0)
    assert latency < DEADLINE
    ens = exc.partial
    assert all(r.status == "interrupted" for r in ens)
    assert all(len(r) > 0 and np.all(np.isfinite(r.risk)) for r in ens)


# ---- everywhere --------------------------------------------------------------------------------------------------


def test_cuda_without_backend_is_unavailable() -> None:
    if tl.build_info()["cuda"]:
        pytest.skip("this build has the CUDA backend")
    student, teacher = _pair(2, 2, 50, "erf")
    with pytest.raises(tl.DeviceUnavailable, match="no CUDA backend"):
        tl.sgd.simulate(student, teacher, lr=1.0, t_max=1, device="cuda")
    with pytest.raises(tl.DeviceUnavailable, match="no CUDA backend"):
        tl._core.rng_gaussians(0, 0, 1, 0, 10, device="cuda")


@pytest.mark.parametrize(
    ("kw", "named"),
    [
        (dict(n_samples=100), "n_samples"),
        (dict(schedule=tl.schedules.inverse_time(1.0)), "schedule"),
    ],
)
def test_cuda_refuses_what_it_does_not_run(kw: dict[str, Any], named: str) -> None:
    student, teacher = _pair(2, 2, 50, "erf")
    with pytest.raises(tl.DeviceUnavailable, match=named):
        tl.sgd.simulate(student, teacher, lr=1.0, t_max=1, device="cuda", **kw)


def test_cuda_refuses_targets() -> None:
    student, _ = _pair(2, 2, 50, "erf")
    hermite = tl.targets.hermite({(1, 1): 1.0}, d=50, seed=0)
    with pytest.raises(tl.DeviceUnavailable, match="HermiteTarget"):
        tl.sgd.simulate(student, hermite, lr=1.0, t_max=1, device="cuda")
    function = tl.targets.function(lambda z: z[..., 0] * z[..., 1], k=2, d=50, seed=0)
    with pytest.raises(tl.DeviceUnavailable, match="FunctionTarget"):
        tl.sgd.simulate(student, function, lr=1.0, t_max=1, device="cuda")


def test_device_is_checked() -> None:
    student, teacher = _pair(2, 2, 50, "erf")
    with pytest.raises(ValueError, match="device"):
        tl.sgd.simulate(student, teacher, lr=1.0, t_max=1, device="gpu")  # type: ignore[call-overload]

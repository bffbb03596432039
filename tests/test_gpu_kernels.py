"""device="cuda" for the batched Gaussian kernels (tl.kernels.i2 / i3 / j2 / i4): the GPU against the CPU.

Both devices evaluate the same TWOLAYER_HD formulas (gaussian_kernels.hpp). They differ only in rounding: the CPU
build contracts a*b + c into fused multiply-adds where GCC chooses (-std=gnu++17, -march=x86-64-v3), the GPU build
does not (-fmad=false), and device libm's acos / atan / asinh / expm1 differ from glibc's by an ulp or two. The
formulas amplify these by their conditioning, so the tolerance is relative to the kernel's natural size
(max(|value|, product of the units' typical sizes)) times, for the step student (whose derivatives condition exactly
on l1 = l2 = 0), kappa = C11 C22 / det C[:2, :2]:

    |gpu - cpu| <= 1e-11 * kappa * max(|cpu|, scale)   on each of 10^6 random covariances.

Measured with the same formulas compiled for the host without FMA (a scratch emulation of the device code against the
CPU build, on these 10^6 covariances per combination): at most 2.7e-14 kappa (6e-13 before kappa, step students;
2e-14 for every other kernel), 99.9% of the matrices within 1e-14: the bound leaves a factor ~400 for device libm.
The covariances are random Wishart matrices with variances from 1e-2 to 1e2, 1% exactly singular (a copy of another
unit, or its negative), 0.5% with a unit of variance 0, and 0.2% with extreme variances (1e+-65 times), which the
device hands back to the host's rescaling: those must be bitwise the CPU's.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import twolayer as tl

ACTS = ("linear", "erf", "relu", "step", "quadratic")
N_COV = 1_000_000
RTOL = 1e-11
DEGREE = {"linear": 1, "relu": 1, "quadratic": 2, "step": 0}


def random_covariances(n: int, m: int, rng: np.random.Generator, singular_ok: bool = True) -> np.ndarray:
    """m valid n x n covariances: Wishart (n + 1 degrees of freedom) with standard deviations scaled by 10^U(-1, 1);
    1% exactly singular (the last unit +-a copy of another), 0.5% with one unit of variance 0, 0.1% each times 1e65
    and 1e-65. singular_ok=False keeps C[:2, :2] non-singular (the step student's delta functions need it)."""
    A = rng.standard_normal((m, n, n + 1))
    C = A @ A.transpose(0, 2, 1) / (n + 1)
    d = 10.0 ** rng.uniform(-1.0, 1.0, (m, n))
    C *= d[:, :, None] * d[:, None, :]
    k = m // 100
    if singular_ok or n > 2:
        # I3's l3 = +-l1 would make E[s'(l1) l2 b(l3)] a delta times a step at the same point (ill-posed): copy l2
        j = 0 if singular_ok and n != 3 else n - 2
        sign = np.where(np.arange(k) % 2 == 0, 1.0, -1.0)
        C[:k, n - 1, :] = sign[:, None] * C[:k, j, :]
        C[:k, :, n - 1] = sign[:, None] * C[:k, :, j]
        C[:k, n - 1, n - 1] = C[:k, j, j]
    first = 0 if singular_ok else 2
    if first < n:
        rows = np.arange(k, k + k // 2)
        zero = rng.integers(first, n, rows.size)
        C[rows, zero, :] = 0.0
        C[rows, :, zero] = 0.0
    e = m // 1000
    C[2 * k : 2 * k + e] *= 1e65
    C[2 * k + e : 2 * k + 2 * e] *= 1e-65
    return np.ascontiguousarray(C[rng.permutation(m)])


def natural_scale(units: list[tuple[str, str]], C: np.ndarray) -> np.ndarray:
    """The product over the units of each one's typical size for l_i ~ N(0, C_ii): the size of its activation
    ("sigma"), of its derivative ("deriv") or of l_i itself ("id")."""
    out = np.ones(C.shape[0])
    for i, (act, use) in enumerate(units):
        v = C[:, i, i]
        sd = np.sqrt(v)
        if use == "id":
            out *= sd
        elif use == "sigma":
            out *= np.minimum(1.0, sd) if act == "erf" else sd ** DEGREE[act]
        elif act == "quadratic":
            out *= sd
        elif act == "step":
            out /= np.where(sd > 0, sd, np.inf)
        elif act == "erf":
            out /= np.sqrt(1.0 + v)
    return out


def _cases() -> list[tuple[str, tuple[str, ...], list[tuple[str, str]], bool]]:
    """(kernel, activations, units, singular_ok) for every combination the GPU implements."""
    cases = []
    for a, b in itertools.product(ACTS, ACTS):
        cases.append(("i2", (a, b), [(a, "sigma"), (b, "sigma")], True))
        cases.append(("i3", (a, b), [(a, "deriv"), ("linear", "id"), (b, "sigma")], True))
    for s in ACTS:
        cases.append(("j2", (s,), [(s, "deriv"), (s, "deriv")], s != "step"))
    for s, a, b in itertools.product(ACTS, ACTS, ACTS):
        if s == "relu" and not {a, b} <= {"linear", "relu"}:
            continue  # orthant moments: CPU only (test_gpu_unsupported_combination)
        cases.append(("i4", (s, a, b), [(s, "deriv"), (s, "deriv"), (a, "sigma"), (b, "sigma")], s != "step"))
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def covariances() -> dict[tuple[int, bool], np.ndarray]:
    return {}


def _batch(cache: dict[tuple[int, bool], np.ndarray], n: int, singular_ok: bool) -> np.ndarray:
    if (n, singular_ok) not in cache:
        rng = np.random.default_rng(100 * n + singular_ok)
        cache[(n, singular_ok)] = random_covariances(n, N_COV, rng, singular_ok)
    return cache[(n, singular_ok)]


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("kind", "acts", "units", "singular_ok"), CASES, ids=[f"{c[0]}-{'-'.join(c[1])}" for c in CASES]
)
def test_gpu_matches_cpu(
    covariances: dict[tuple[int, bool], np.ndarray],
    kind: str,
    acts: tuple[str, ...],
    units: list[tuple[str, str]],
    singular_ok: bool,
) -> None:
    C = _batch(covariances, len(units), singular_ok)
    fn = getattr(tl.kernels, kind)
    cpu = fn(*acts, C)
    gpu = fn(*acts, C, device="cuda")
    assert gpu.shape == cpu.shape and np.all(np.isfinite(gpu))
    kappa = np.ones(len(C))
    if acts[0] == "step" and kind in ("j2", "i4"):
        det = C[:, 0, 0] * C[:, 1, 1] - C[:, 0, 1] ** 2
        kappa = C[:, 0, 0] * C[:, 1, 1] / det
    bound = RTOL * kappa * np.maximum(np.abs(cpu), natural_scale(units, C))
    diff = np.abs(gpu - cpu)
    worst = int(np.argmax(diff / np.maximum(bound, 1e-300)))
    assert np.all(diff <= bound), (
        f"{kind}{acts}: {int(np.sum(diff > bound))} of {len(C)} beyond the tolerance; worst C[{worst}] = "
        f"{C[worst].tolist()}: cpu {cpu[worst]!r}, gpu {gpu[worst]!r}"
    )
    # the matrices with extreme variances were finished on the host, by the CPU's own rescaling
    var = np.diagonal(C, axis1=1, axis2=2)
    extreme = np.any((var > 1e60) | ((var > 0) & (var < 1e-60)), axis=1)
    assert extreme.sum() >= N_COV // 1000
    np.testing.assert_array_equal(gpu[extreme], cpu[extreme])


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (np.diag([1.0, -1.0, 1.0, 1.0]), "positive semi-definite"),
        (np.eye(4) + np.triu(np.ones((4, 4)), 1) * 0.5, "symmetric"),
        (np.full((4, 4), np.nan), "finite"),
    ],
)
def test_gpu_invalid_covariance_same_error(bad: np.ndarray, message: str) -> None:
    C = random_covariances(4, 300_000, np.random.default_rng(1))
    C[123_456] = bad
    errors = []
    for device in ("cpu", "cuda"):
        with pytest.raises(ValueError, match=message) as info:
            tl.kernels.i4("erf", "relu", "erf", C, device=device)
        errors.append(str(info.value))
    assert errors[0] == errors[1] and errors[1].startswith("C[123456]: ")


@pytest.mark.gpu
def test_gpu_singular_step_same_error() -> None:
    C = random_covariances(2, 100_000, np.random.default_rng(2), singular_ok=False)
    C[77_777] = [[1.0, 1.0], [1.0, 1.0]]  # E[delta(l1) delta(l2)] with l1 = l2: infinite
    errors = []
    for device in ("cpu", "cuda"):
        with pytest.raises(ValueError, match="non-singular") as info:
            tl.kernels.j2("step", C, device=device)
        errors.append(str(info.value))
    assert errors[0] == errors[1]


@pytest.mark.gpu
def test_gpu_unsupported_combination() -> None:
    C = np.eye(4)[None]
    with pytest.raises(tl.DeviceUnavailable, match=r"\(relu, erf, step\)"):
        tl.kernels.i4("relu", "erf", "step", C, device="cuda")
    assert np.isfinite(tl.kernels.i4("relu", "erf", "step", C))


@pytest.mark.gpu
def test_gpu_shapes() -> None:
    # empty batches, a scalar (no batch axis), a leading shape, and a batch of several chunks (2^18 per chunk)
    assert tl.kernels.i2("erf", "erf", np.zeros((0, 2, 2)), device="cuda").shape == (0,)
    C = np.array([[1.0, 0.5], [0.5, 1.0]])
    assert tl.kernels.i2("step", "step", C, device="cuda") == pytest.approx(1.0 / 3.0, rel=1e-15)
    B = random_covariances(3, 6, np.random.default_rng(3)).reshape(2, 3, 3, 3)
    np.testing.assert_allclose(
        tl.kernels.i3("erf", "relu", B, device="cuda"), tl.kernels.i3("erf", "relu", B), rtol=1e-13, atol=1e-15
    )
    big = np.tile(np.array([[2.0, 0.3], [0.3, 1.0]]), (3 * 2**18 + 5, 1, 1))
    big[-1] = [[1.0, 0.2], [0.2, 3.0]]
    out = tl.kernels.i2("relu", "erf", big, device="cuda")
    assert np.all(out[:-1] == out[0]) and out[-1] == pytest.approx(tl.kernels.i2("relu", "erf", big[-1]), rel=1e-14)


def test_device_cuda_without_backend() -> None:
    if tl.build_info()["cuda"]:
        pytest.skip("this build has the CUDA backend")
    C2, C3, C4 = np.eye(2)[None], np.eye(3)[None], np.eye(4)[None]
    calls = [
        lambda: tl.kernels.i2("erf", "erf", C2, device="cuda"),
        lambda: tl.kernels.i3("erf", "erf", C3, device="cuda"),
        lambda: tl.kernels.j2("erf", C2, device="cuda"),
        lambda: tl.kernels.i4("erf", "erf", "erf", C4, device="cuda"),
    ]
    for call in calls:
        with pytest.raises(tl.DeviceUnavailable, match="no CUDA backend"):
            call()


def test_device_name_checked() -> None:
    with pytest.raises(ValueError, match="device"):
        tl.kernels.i2("erf", "erf", np.eye(2), device="gpu")
    with pytest.raises(ValueError, match="device"):
        tl.kernels.i4("erf", "erf", "erf", np.eye(4), device="GPU")
    # (2 / pi) (1 + C11 + C22 + C11 C22 - C12^2)^(-1/2) = 1 / pi at C = I
    assert tl.kernels.j2("erf", np.eye(2), device="cpu") == pytest.approx(1 / np.pi, rel=1e-15)

"""Small runs of every GPU path, for compute-sanitizer (.ci/gpu-check): each kernel with odd sizes, early stops,
a diverging member and max_steps, so that every branch that writes device memory runs once.

    python .ci/gpu_smoke.py                 # every section: ode, sgd, kernels
    python .ci/gpu_smoke.py sgd kernels     # those sections, in that order
"""

import sys

import numpy as np
import twolayer as tl


def ode() -> None:

    # every kernel family (fixed sizes and run-time sizes, each activation's lanes) once, with few members and steps:
    # memcheck runs each thread's code some hundred times slower
    for act, K, M in (("erf", 1, 1), ("erf", 2, 3), ("relu", 2, 2), ("quadratic", 4, 4), ("linear", 8, 8)):
        teacher = tl.Network.random(M, 40, act, seed=1)
        ovs = [tl.Overlaps.from_networks(tl.Network.random(K, 40, act, seed=s), teacher) for s in range(3)]
        for method in ("euler", "rk4", "adaptive"):
            b = tl.ode.integrate_batch(ovs, act, lr=[0.05, 0.1, 0.1], lr_readout=[0, 0.2, 1e3],
                                       risk_tol=[0, 0.01, 0], method=method, dt=0.1, t_max=2, n_records=5,
                                       max_steps=10 if method == "rk4" else 10**8, device="cuda")
            print("ode", act, K, M, method, list(b.status), flush=True)


def sgd() -> None:
    # SGD (cpp/cuda/sgd.cu): single samples, batches, spherical, readout only, a diverging member, an early stop, the
    # Gaussians of both draw paths
    s, t = tl.networks.teacher_student(2, 3, 37, "erf", seed=1)
    for kw in ({}, {"batch_size": 3, "noise": 0.1}, {"spherical": True}, {"spherical": True, "batch_size": 2},
               {"train_first_layer": False, "lr_readout": 1.0}):
        e = tl.sgd.simulate(s, t, lr=[0.5, 1.0, 2.0], t_max=2, n_records=5, seeds=3, risk_rtol=[1e-9, 0.5, 1e-9],
                            device="cuda", **kw)
        print("sgd", kw, e.status, flush=True)
    # biases: fixed teacher biases, trained student biases, one run per lr_bias
    sb, tb = s.with_weights(s.W, bias=[0.3, -0.1]), t.with_weights(t.W, bias=[0.2, 0.0, -0.4])
    print("sgd biases", tl.sgd.simulate(sb, tb, lr=[0.5, 1.0], lr_bias=[0.0, 0.5], t_max=2, n_records=5, seeds=2,
                                        batch_size=2, device="cuda").status, flush=True)
    s, t = tl.networks.teacher_student(2, 2, 40, "quadratic", seed=2)
    print("sgd diverging", tl.sgd.simulate(s, t, lr=[0.05, 50.0], t_max=2, seeds=2, device="cuda").status)
    for one in (False, True):
        tl._core.rng_gaussians(1, 2, 1, 5, 1000, scalar=one, device="cuda")


def kernels() -> None:
    # The batched Gaussian kernels (cpp/cuda/kernels.cu): every kernel instantiation on an odd batch size, the matrices
    # handed back to the host (extreme variances, a singular step covariance), an invalid matrix (the error path after
    # the device ran), an unsupported pair, and a batch of two chunks (both slots and streams).
    rng = np.random.default_rng(0)
    C = {}
    for n in (2, 3, 4):
        A = rng.standard_normal((1001, n, n + 1))
        C[n] = A @ np.swapaxes(A, 1, 2) / (n + 1)
        C[n][7] *= 1e65
    acts = ("linear", "erf", "relu", "step", "quadratic")
    for s in acts:
        tl.kernels.j2(s, C[2], device="cuda")
        tl.kernels.i2(s, "relu", C[2], device="cuda")
        tl.kernels.i3(s, "erf", C[3], device="cuda")
        tl.kernels.i4(s, "relu", "linear" if s == "relu" else "erf", C[4], device="cuda")
    bad = C[4].copy()
    bad[500, 0, 1] = np.nan
    for Cx, call in ((bad, lambda x: tl.kernels.i4("erf", "erf", "erf", x, device="cuda")),
                     (np.ones((3, 2, 2)), lambda x: tl.kernels.j2("step", x, device="cuda")),
                     (C[4][:3], lambda x: tl.kernels.i4("relu", "erf", "erf", x, device="cuda"))):
        try:
            call(Cx)
        except (ValueError, tl.DeviceUnavailable) as exc:
            print("kernels: expected error:", type(exc).__name__, str(exc)[:60], flush=True)
    two = np.tile(np.eye(2), (2**18 + 3, 1, 1))
    assert np.all(tl.kernels.i2("erf", "erf", two, device="cuda") == tl.kernels.i2("erf", "erf", two[:1])[0])
    print("kernels smoke done")


for name in sys.argv[1:] or ["ode", "sgd", "kernels"]:
    {"ode": ode, "sgd": sgd, "kernels": kernels}[name]()
print("gpu smoke done")

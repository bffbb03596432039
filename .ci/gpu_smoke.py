"""Small runs of every GPU path, for compute-sanitizer (.ci/gpu-check): each kernel with odd sizes, early stops,
a diverging member and max_steps, so that every branch that writes device memory runs once."""

import numpy as np

import twolayer as tl

for K, M in ((1, 1), (2, 2), (3, 3), (8, 8), (2, 3)):
    teacher = tl.Network.random(M, 40, "erf", seed=1)
    ovs = [tl.Overlaps.from_networks(tl.Network.random(K, 40, "erf", seed=s), teacher) for s in range(5)]
    for method in ("euler", "rk4", "adaptive"):
        b = tl.ode.integrate_batch(ovs, "erf", lr=[0.5, 1.0, 1.5, 2.0, 1.0], lr_readout=[0, 0.2, 0, 0, 1e3],
                                   risk_tol=[0, 0.05, 0, 0, 0], method=method, dt=0.05, t_max=5, n_points=11,
                                   max_steps=30 if method == "rk4" else 10**8,
                                   device="cuda")
        print("ode", K, M, method, list(b.status), flush=True)
# SGD (cpp/cuda/sgd.cu): single samples, batches, spherical, readout only, a diverging member, an early stop, the
# Gaussians of both draw paths
s, t = tl.networks.teacher_student(2, 3, 37, "erf", seed=1)
for kw in ({}, {"batch_size": 3, "noise": 0.1}, {"spherical": True}, {"spherical": True, "batch_size": 2},
           {"train_first_layer": False, "lr_readout": 1.0}):
    e = tl.sgd.simulate(s, t, lr=[0.5, 1.0, 2.0], t_max=2, records=5, seeds=3, risk_rtol=[1e-9, 0.5, 1e-9],
                        device="cuda", **kw)
    print("sgd", kw, e.status, flush=True)
s, t = tl.networks.teacher_student(2, 2, 40, "quadratic", seed=2)
print("sgd diverging", tl.sgd.simulate(s, t, lr=[0.05, 50.0], t_max=2, seeds=2, device="cuda").status)
for one in (False, True):
    tl._core.rng_gaussians(1, 2, 1, 5, 1000, scalar=one, device="cuda")
print("gpu smoke done")

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
print("gpu smoke done")

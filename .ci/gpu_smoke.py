"""Small runs of every GPU path, for compute-sanitizer (.ci/gpu-check): each kernel with odd sizes, early stops,
a diverging member and max_steps, so that every branch that writes device memory runs once."""

import numpy as np

import twolayer as tl

# every kernel family (fixed sizes and run-time sizes, each activation's lanes) once, with few members and steps:
# memcheck runs each thread's code some hundred times slower
for act, K, M in (("erf", 1, 1), ("erf", 2, 3), ("relu", 2, 2), ("quadratic", 4, 4), ("linear", 8, 8)):
    teacher = tl.Network.random(M, 40, act, seed=1)
    ovs = [tl.Overlaps.from_networks(tl.Network.random(K, 40, act, seed=s), teacher) for s in range(3)]
    for method in ("euler", "rk4", "adaptive"):
        b = tl.ode.integrate_batch(ovs, act, lr=[0.05, 0.1, 0.1], lr_readout=[0, 0.2, 1e3],
                                   risk_tol=[0, 0.01, 0], method=method, dt=0.1, t_max=2, n_points=5,
                                   max_steps=10 if method == "rk4" else 10**8, device="cuda")
        print("ode", act, K, M, method, list(b.status), flush=True)
print("gpu smoke done")

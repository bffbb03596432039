"""Population gradient flow of step units (sigma = 1(s > 0), Mariantoni & Chizat) in overlap space, through alignment.

:func:`twolayer.ode.integrate` and :func:`twolayer.ode.integrate_batch` integrate step students and teachers in
the gradient-flow regime by the method below, in the core (``cpp/src/step_flow.cpp``), whatever ``method``; the
trajectory's ``meta["method"]`` is then ``"step_events"``. This module documents it; it has no functions.

The order-parameter ODE of step units has a right-hand side that is discontinuous where two units align (or become
antipodal): the angle kernel I2 = (pi - theta) / (2 pi) has a cusp there, so the risk grows linearly with the
angle and a student reaches its teacher in finite time. Generic integrators stall there ("lost positive
semi-definiteness"). The flow is exact population gradient flow, so it agrees with weight-space descent
(:func:`twolayer.landscape.step_gradient_flow` with a decaying schedule) as the step goes to 0.

Method (event location and Filippov sliding):

1. Weight realisation: Omega = [[P, M^T], [M, Q]] = X X^T, rows in R^(K+M). The flow depends on the weights only
   through Omega, so it is solved for these vectors: unit directions u_i with constant norms (the gradient of
   step units is tangent) and (w_c = v_r for teachers, -a_k for students)::

       du_i/dt = lr s(t) a_i F_i / (2 pi Q_ii),   F_i = sum_{u != i} w_u e(i -> u),
       da_i/dt = lr_readout s(t) (sum_r v_r I2_ir - sum_k a_k I2_ik),   I2 = (pi - theta) / (2 pi),

   e(i -> u) the unit tangent at u_i pointing to u_u: the population gradient of
   :func:`twolayer.population.gradient`, whose step pairs take their angle from the chords of the unit vectors,
   theta = atan2(``|u - v| |u + v|``, (``|u + v|^2 - |u - v|^2``) / 2), accurate to ~eps / theta (the cosine of
   the overlaps resolves no angle below ~1.5e-8).
2. Dormand-Prince 5(4) steps with error control ``rtol``, ``atol`` on (u, a), each also limited to half the time any
   free unit needs to reach the nearest unit it approaches (to angle 0 or pi; 0.98 of it within 1e-3 rad), so
   that a step never jumps over a meeting; within 1e-4 rad the error of an approaching unit is measured relative
   to 5 % of its distance, so that the arrival takes a few steps per decade. Near a meeting point the risk is
   smooth but for the cusp of the two bodies that meet there (a body: a free student, a cluster, or a teacher
   with the students on it; cusp weight A = sum_i sigma_i a_i, minus v_r for a teacher, mass sum_i Q_ii), which
   pulls them together at the angular speed c = lr s(t) ``|A A'|`` (1/mass + 1/mass') / (2 pi), in a direction
   that turns on the length scale of their distance phi. While the cusp holds the pair (c exceeds the rest of
   their relative velocity) each step is also kept below phi / c, whether the pair closes in or not: longer
   explicit steps sit at the stability limit of the method and chatter around the meeting point instead of
   reaching it (the risk then rose between records, at ~700 steps per unit time, for a student held by its
   teacher against a smooth force nearly as strong as the cusp). Cusps that cancel (an antipodal pair with equal
   readouts is a constant function) bound nothing.
3. Meetings (events): units within 1e-10 rad of each other or of each other's antipode are merged into a cluster
   set exactly onto one direction, u_i = sigma_i u_C with sigma_i = +-1: onto the teacher when one is in it
   (teachers are fixed), else onto the members' mean direction weighted by Q_ii. A cluster moves as one (Filippov
   sliding): on a teacher it stays; without one it follows the gradient flow restricted to it,
   du_C/dt = sum_i sigma_i Q_ii v_i / sum_i Q_ii (v_i: the velocity member i would have alone). The cusps hold it
   together while every member's constraint force is within their reach: a_i c_i > 0 and
   ``|sigma_i du_C - v_i| <= lr s |a_i c_i| / (2 pi Q_ii)``, c_i = sum over the other members u of
   sigma_i sigma_u w_u (an antipodal unit acts with the opposite sign). A member that fails it leaves along v_i
   (moved off by 1e-9 rad), as the Filippov solution does. This covers students meeting teachers, two students
   with equal readouts pinned at antipodes (1(u.x > 0) + 1(-u.x > 0) = 1, so their repulsive cusp holds them
   there: the pair then moves as one rigid pair), students meeting on a teacher, and students with readouts of
   opposite signs meeting each other. (For clusters of three or more students the per-member condition is
   necessary, not sufficient, for the cluster to stay whole.)
4. The risk from the angles of the unit vectors (exact at alignment: a converged run reports ~1e-16, not the
   ~2e-9 floor of cosines). Output rows between steps interpolate the directions linearly (normalised); an early
   stop (``risk_tol``, ``risk_rtol``) is located on that chord.

The message of a completed run counts the students on a teacher and in clusters of students at the end.

Biases (``lr_bias > 0``; fixed biases are refused). step(w.x + b) is unchanged by scaling (w, b), so in the
coordinates (w, b / kappa), kappa = sqrt(lr_bias / lr), gradient flow is Euclidean at rate lr and each row keeps its
norm (``|w|^2 / lr + b^2 / lr_bias`` is conserved): the method above runs on the rows (x_i, b_i / kappa) of
R^(K+M+1), where two half-spaces meet exactly where these directions meet (the same direction and threshold
b / ``|w|``, or complementary ones at the antipode). Only the cusp changes: it is anisotropic, the symmetric
difference of the half-spaces of u and u + delta having mass phi(beta) / ``|u_w|`` E``|alpha t + s Z|`` to first
order (beta = b / ``|w|``, alpha = sqrt(kappa^2 + beta^2), t the part of delta along the threshold's direction, s
the rest), so the
sliding condition compares the dual norm of a member's constraint force with lr s ``|a_i c_i|`` / ``|w_i|^2``, and
a member that fails it leaves along the direction where its velocity beats the cusp. The forces are
:func:`twolayer.population.gradient`'s with biases, whose step pairs also come from the chords (within a few eps /
theta). Checked against weight-space descent with biases (:func:`twolayer.population.descend`):
``tests/test_step_flow_bias.py``.

Examples
--------
>>> s, t = tl.networks.teacher_student(K=3, M=3, d=20, activation="step", seed=1, scaling="none")
>>> traj = tl.ode.integrate(tl.Overlaps.from_networks(s, t), lr=1.0, regime="gradient_flow", times=[0.0, 250.0])
>>> traj.meta["method"], traj.status
('step_events', <Status.completed: 'completed'>)
>>> sb, tb = s.with_weights(s.W, bias=[0.1, -0.2, 0.0]), t.with_weights(t.W, bias=[0.2, 0.0, -0.1])
>>> traj = tl.ode.integrate(tl.Overlaps.from_networks(sb, tb), lr=1.0, lr_bias=0.5, regime="gradient_flow",
...                         times=[0.0, 250.0])
>>> traj.meta["method"], traj.bias.shape
('step_events', (2, 3))
"""

// Population gradient flow of step units (sigma = 1(s > 0), Mariantoni & Chizat) in overlap space, through alignment.
//
// The order-parameter ODE of step units is discontinuous where two units align (or become antipodal): the angle
// kernel I2 = (pi - theta) / (2 pi) has a cusp there, so the risk grows linearly with the angle and a student reaches
// its teacher in finite time. integrate() hands such models (step student and teacher, gradient flow, not
// spherical, committee teacher; biases trained or none) to step_flow_integrate, which solves the same flow by
//
// 1. Weight realisation: Omega = [[P, M^T], [M, Q]] = X X^T (Jacobi eigendecomposition), rows in R^(K + M). The flow
//    depends on the weights only through Omega, so it is solved for these vectors: unit directions u_i with
//    constant norms |w_i| (the step kernels' gradient is tangent), du_i/dt = -lr s(t) grad_{w_i} R / |w_i| and
//    da/dt = -lr_readout s(t) dR/da from the population gradient (population.hpp, whose step pairs take their angle
//    from the chords of the unit vectors: accurate to ~eps / theta down to the snap).
// 2. Dormand-Prince 5(4) (dormand_prince.hpp) with error control on (u, a), its step also limited to a fraction of
//    the time any free unit needs to reach the nearest unit it approaches (to angle 0 or pi), so that a step never
//    jumps over a meeting, and, while a cusp holds two units (the speed c at which it pulls them together exceeds
//    the rest of their relative velocity), to their distance phi / c: the cusp's field turns on the scale phi, and
//    longer explicit steps chatter around the meeting point instead of reaching it. Near arrival the error of an
//    approaching unit is measured relative to its distance.
// 3. Meetings (events): units within kStepSnap rad of each other (or of each other's antipode) are merged into one
//    cluster, set exactly onto one direction (u_i = sigma_i u_C, sigma_i = +-1): onto the teacher when one is in
//    it (a teacher is fixed), else onto the cluster's norm-weighted mean direction. A cluster moves as one (Filippov
//    sliding): with a teacher it stays, without one it follows the gradient flow restricted to the cluster,
//    du_C/dt = sum_i sigma_i |w_i|^2 v_i / sum_i |w_i|^2 (v_i: the velocity member i would have alone). The cusps
//    hold it together while every member's constraint force is within its cusps' reach:
//    a_i c_i > 0 and |sigma_i du_C - v_i| <= lr s |a_i c_i| / (2 pi |w_i|^2), c_i = sum over the other members u
//    of sigma_i sigma_u w_u (w_u = v_r for a teacher, -a_k for a student; an antipodal unit acts with the opposite
//    sign). A member that fails it leaves along v_i (moved off by 10 kStepSnap), as the Filippov solution does.
//    Two students with equal readouts pinned at antipodes (1(u.x > 0) + 1(-u.x > 0) = 1: their repulsive cusp holds
//    them there) are such a cluster; so are students that met on a teacher, and students with readouts of opposite
//    signs that met each other.
// 4. The risk from the angles of the unit vectors (population_risk: a converged run reports ~1e-16, not the ~2e-9
//    floor of cosines); output rows between steps by normalised linear interpolation of the directions.
//
// Biases (trained, lr_bias > 0; issue 23). step(w.x + b) is unchanged by (w, b) -> c (w, b), c > 0, so the
// population gradient is orthogonal to (w, b / kappa) in the coordinates (w, b / kappa), kappa = sqrt(lr_bias / lr),
// where the flow (dw/dt = -lr dR/dw, db/dt = -lr_bias dR/db) is the Euclidean gradient flow at rate lr: each row
// (x_i, b_i / kappa) of the augmented space R^(K + M + 1) keeps its norm (|w|^2 / lr + b^2 / lr_bias is conserved),
// and two half-spaces meet exactly where their augmented directions do (the same direction and threshold b / |w|, or
// complementary ones at the antipode). The flow above then runs on these rows unchanged but for the cusp, which is
// anisotropic: the mass of the symmetric difference of the half-spaces of u and u + delta (unit rows, delta tangent)
// is, to first order, phi(beta) / |u_w| E|alpha t + s Z|, beta = b / |w|, alpha = sqrt(kappa^2 + beta^2), t = delta
// . e_b along e_b = (-u_b u_w / |u_w|, |u_w|) (the threshold's direction), s = |delta - t e_b| (checked against a
// 30-digit Phi2 to O(delta)), so that a pair of readouts A, A' holds the cusp |A A'| G(delta),
// G = phi(beta) / (2 |u_w|) E|alpha t + s Z| (without biases |delta| / (2 pi)). The sliding condition of a member
// becomes G*(f) <= lr s |a_i c_i| / |w_i|^2 (G* the dual norm of G: a 1-d maximisation over the angle in (e_b, f)),
// a member that fails it leaves along the maximiser (where its velocity beats the cusp), and the step limiter's cusp
// speed and hold test take grad G and G*. The forces are population_gradient_mean's, whose step pairs come from the
// chords (population.cpp step_pair_force_mean; a merged pair at the centre of its subgradient).
#pragma once
#include "twolayer/dynamics.hpp"
#include "twolayer/integrators.hpp"

namespace twolayer {

// rad: units closer than this to each other (or to each other's antipode) are merged.
inline constexpr double kStepSnap = 1e-10;

// Whether integrate() runs the model by step_flow_integrate.
bool is_step_flow(const OdeModel& m);

// The step-unit gradient flow of the module comment from the state y0 = [Q, M, a] (dynamics.hpp) to opt.times, with
// opt's rtol, atol, h_max, max_steps and schedule (opt.method and dt are not used) and the early stop `stop`.
// Throws std::invalid_argument when a unit has zero norm (Q_ii or P_rr = 0: no direction).
IntegrateResult step_flow_integrate(const OdeModel& model, const double* y0, const IntegrateOptions& opt,
                                    const StopRule& stop);

}  // namespace twolayer

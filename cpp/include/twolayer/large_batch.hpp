// The large-batch map of "First order optimization methods in two-layer neural networks training": the d -> infinity
// deterministic map of the overlaps under SGD with fresh batches of n_b = alpha d samples and a step of order one per
// iteration.
//
// Update (the documentation's Conventions page: lambda = w.x / sqrt d, effective second layer a fixed during the step):
//   w_i <- w_i + (lr / sqrt d) (1 / n_b) sum_mu a_i g'(l_i^mu) E^mu x^mu,   lr = gamma0 d.
// Write u_i = g'(l_i) E (E = y - f, label noise included) and, for every unit c (K students, then the teacher or
// target directions), psi_ic = E[u_i l_c] (the online right-hand side's E[g'(l_i) l_c E], dynamics.hpp). Projecting
// the update on w_k / d and w*_r / d, with the batch mean (1 / n_b) sum_mu u_i^mu x^mu = G_i + N_i split into its
// population part G_i = E[u_i x] and a zero-mean fluctuation N_i:
//   * E[x | l] = V^T Omega^+ l / sqrt d (V the stacked weights, Omega = V V^T / d), so G_i = V^T Omega^+ psi_i / sqrt d
//     lies in the span of the weights and G_i . G_k = psi_i^T Omega^+ psi_k (psi_i lies in the range of Omega:
//     Stein, psi_i = Omega E[grad u_i], so any generalised inverse gives the same number);
//   * N_i . w / sqrt d = O(1 / sqrt(n_b)) -> 0, N_i . N_k -> E[u_i u_k |x|^2] / n_b -> E[u_i u_k] / alpha;
//   * the batch means of u_i l_c concentrate on psi_ic.
// Hence, at d -> infinity (gamma0 = lr / d of the simulator, t = iteration):
//   M_ir <- M_ir + gamma0 a_i psi_{i,K+r}
//   Q_ik <- Q_ik + gamma0 (a_i psi_ik + a_k psi_ki)
//                + gamma0^2 a_i a_k (psi_i^T Omega^+ psi_k + phiHD_ik / alpha),  phiHD_ik = E[g'(l_i) g'(l_k) E^2]
// (phiHD with the label noise: E[g'g'E^2] + Delta E[g'g']). The last two are the paper's eq. (6) double sum over
// pairs of samples (nu != nu': the squared population gradient; nu = nu': |z|^2 ~ d, the 1/alpha term). Spherical
// (the paper's eq. 7): each w_i is then rescaled to |w_i|^2 = d, Q_ik <- Q_ik / sqrt(Q_ii Q_kk), M_ir <- M_ir / sqrt(Q_ii).
#pragma once
#include <vector>

#include "twolayer/dynamics.hpp"
#include "twolayer/integrators.hpp"

namespace twolayer {

// The map's input, the interface any target plugs into: for K students and n = K + k units (students, then k
// teacher units or target directions),
//   omega (n x n): the overlaps [[Q, M], [M^T, P]];
//   psi   (K x n): psi[i n + c] = E[g'(l_i) l_c E];
//   hd    (K x K): hd[i K + k] = E[g'(l_i) g'(l_k) E^2] (+ Delta E[g'(l_i) g'(l_k)] with label noise), symmetric;
//   a     (K):     the effective second layer.
// Writes the new Q (K x K) and M (K x k). ws: scratch of at least large_batch_workspace(n) doubles.
std::size_t large_batch_workspace(int n);
void large_batch_update(int K, int n, const double* omega, const double* psi, const double* hd, const double* a,
                        double gamma0, double alpha, bool spherical, double* Q_new, double* M_new, double* ws);

// Options of a run of the map.
struct LargeBatchOptions {
  long long steps = 1;     // iterations
  double gamma0 = 1.0;     // step (the simulator's lr / d)
  double alpha = 1.0;      // batch size / d
  bool spherical = false;  // rescale every |w_i|^2 to d after each step (needs diag(Q) = 1 at the start)
  // The students' biases b (K; empty for none): lambda_i = l_i + b_i. The map is the same with every expectation
  // taken at the means: psi_ic = E[g'(lambda_i) l_c E] (l_c centred), E[g'(lambda_i) g'(lambda_k) E^2]. With a
  // polynomial target the target's parts come through TargetRhs with biases and the committee's through
  // gaussian_mean.hpp (i3_mean, i4_mean, j2_mean, i2_mean for the risk); with a committee teacher from the online
  // right-hand side with means (OdeRhs, dynamics.hpp "Biases"), whose state, and the recorded rows, then end with b.
  std::vector<double> bias;
  // A committee teacher's fixed biases b* (M; empty for zero; with `bias` only).
  std::vector<double> teacher_bias;
  // Trained biases (needs bias): b_i <- b_i + lr_bias a_i E[g'(lambda_i) E] after each step (simultaneous with the
  // weights'), the limit of sgd.simulate(lr_bias = lr_bias * d): its batch mean of a scalar has no 1/alpha term.
  double lr_bias = 0.0;
};

// Iterates the map for a committee teacher: the expectations come from the online right-hand side of `model`
// (OdeRhs: psi() and second_moment(); model.lr, lr_readout and regime are ignored, the noise is the label noise).
// Rows are recorded at every iteration t = 0..steps (t as a double), the state y = [Q, M, a] with a fixed; a state
// that is not finite or leaves the PSD cone stops the run with status "diverged" (stop_time = its iteration),
// Ctrl-C with "interrupted"; n_rhs counts expectation evaluations, n_steps iterations.
// With model.target (a polynomial target, M = k, v = 0, P = I_k), psi and hd are the committee part's (the student
// units against themselves) plus TargetRhs::add_raw's exact target terms; the risk includes the target's part.
// With opt.bias and a target, and with a target for the smooth activations without closed-form kernels, the
// committee part comes from the kernels with means instead (iterate_biased); bias_rows (optional): the biases of
// every recorded row (T x K), filled when opt.bias is given. With opt.bias and a committee teacher the rows are
// [Q, M, a, b] (bias_rows unused).
IntegrateResult iterate_large_batch(const OdeModel& model, const double* y0, const LargeBatchOptions& opt,
                                    int n_threads, std::vector<double>* bias_rows = nullptr);

}  // namespace twolayer

// Dynamical mean-field theory (DMFT) of full-batch gradient descent on n = alpha d reused samples, d -> infinity
// (the equations: docs/layers/dmft.rst and python/twolayer/dmft.py). Student of p units with a fixed readout a, a
// target of k orthonormal directions given through its labels at Monte Carlo draws of the teacher fields z.
//
// Per iteration t the solver advances G independent groups of S samples of the effective single-sample process
//   h^t = b^t + M^t z + w^t + sum_{s<t} R_theta(t, s) g^s,   g^t = a * sigma'(h^t) (y - a . sigma(h^t)),
// w a centred Gaussian process of covariance C_theta (drawn as w = L zeta, L the Cholesky factor of C_theta and
// zeta iid N(0, 1) from Philox streams keyed by (seed, group)), and the deterministic single-coordinate (weight)
// process: propagator K, C_theta, M, and the student biases b^{t+1} = b^t + lr_bias E[g^t] (deterministic: the
// full-batch step (lr_bias / n) sum_mu g_mu concentrates; one sample moves b by O(1/n)). Response
// R_g(t, s) = E[d g^t / d w^s] by Gaussian integration by parts, E[g^t zeta^T] = R_g L (no derivative of sigma:
// valid for ReLU). Cost per iteration t: O(G S t p^2) for the
// sample pass (memory terms), O(t^2 p^3 + (t p)^2) for the deterministic part.
#pragma once
#include <cstdint>

#include "twolayer/activation.hpp"

namespace twolayer {

struct DmftProblem {
  int p = 0, k = 0;             // student units, target directions
  std::int64_t n_groups = 1;    // G independent replicas (Monte Carlo error bars)
  std::int64_t n_mc = 0;        // S samples per group
  int n_steps = 0;              // T: records at iterations 0..T
  Activation act = Activation::Relu;
  const double* a = nullptr;       // (p) fixed effective readout
  const double* z = nullptr;       // (G, S, k) teacher fields of the training draws
  const double* y = nullptr;       // (G, S) their labels (with label noise)
  const double* z_test = nullptr;  // (G, S, k) fresh teacher fields (test risk)
  const double* y_test = nullptr;  // (G, S) their noise-free labels
  const double* M0 = nullptr;      // (p, k)
  const double* C0 = nullptr;      // (p, p) Q0 - M0 M0^T
  double lr = 0.0, ridge = 0.0, alpha = 1.0;
  std::uint64_t seed = 0;
  const double* b0 = nullptr;  // (p) initial student biases (null: zero)
  double lr_bias = 0.0;        // step of the biases (0: fixed)
};

// Caller-allocated outputs, group first: M (G, T+1, p, k), Q (G, T+1, p, p), train/test risk (G, T+1), the
// biases (G, T+1, p), and the kernels C_theta, R_theta, C_g, R_g (G, T+1, T+1, p, p), each (t, s) block a p x p
// matrix.
struct DmftOut {
  double *M = nullptr, *Q = nullptr, *train = nullptr, *test = nullptr, *bias = nullptr;
  double *Ctheta = nullptr, *Rtheta = nullptr, *Cg = nullptr, *Rg = nullptr;
  int steps_done = 0;     // iterations 0..steps_done-1 are recorded
  bool diverged = false;  // a non-finite value stopped the run
};

// Solves the DMFT; stops early (out.steps_done < T + 1) on a cancellation request or divergence.
void dmft_solve(const DmftProblem& prob, DmftOut& out, int n_threads);

}  // namespace twolayer

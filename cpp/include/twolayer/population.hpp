// Population (infinite-data) risk, gradient and Hessian of a two-layer student against a two-layer teacher.
//
//   f(x) = sum_i a_i s(l_i),  y = sum_r v_r t(l*_r),  l = W x / sqrt(scale),  x ~ N(0, I_d)
//   R = 1/2 E[(y - f)^2] = 1/2 sum_ik a_i a_k I2(s,s; Q) - sum_ir a_i v_r I2(s,t; Q,M,P) + 1/2 sum_rt v_r v_t I2(t,t; P)
//   Q = W W^T / scale, M = W W*^T / scale, P = W* W*^T / scale  (scale = d: "sqrt_d", scale = 1: "none").
// Excess risk: output noise adds Delta/2 and is not included. Gradients use dC/dW through the Gram matrices:
// the W-gradient is (diag(alpha) W + B W + E W*) / scale with kernel-derivative weights (two GEMMs).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "twolayer/activation.hpp"
#include "twolayer/schedule.hpp"

namespace twolayer {

struct Layer {
  const double* W;  // (units x d), row-major
  const double* a;  // (units)
  int units;
  Activation act;
};

struct Population {
  Layer student, teacher;
  int d;
  double scale;  // C = Gram / scale
};

// Gram blocks (row-major): Q (K x K), M (K x M), P (M x M).
void gram(const double* A, int na, const double* B, int nb, int d, double scale, double* out, int n_threads);

// Excess risk from the overlaps alone: Q (K x K), M (K x Mt), P (Mt x Mt) row-major, effective second layers a, v.
double overlap_risk(const double* Q, const double* M, const double* P, const double* a, const double* v, int K,
                    int Mt, Activation student, Activation teacher);

// The same with biases, l_i = w_i.x/sqrt(scale) + b_i, l*_r = w*_r.x/sqrt(scale) + bt_r (b, bt: K and Mt entries,
// null: zeros): every I2 the kernel with means (gaussian_mean.hpp i2_mean) on the pair's block of (Q, M, P) and mean
// (b_i, b_k), ... Host only; no checks (the overlaps come from weights).
double overlap_risk_mean(const double* Q, const double* M, const double* P, const double* a, const double* v,
                         const double* b, const double* bt, int K, int Mt, Activation student, Activation teacher);

double population_risk(const Population& p, int n_threads);

// dW (K x d), da (K).
void population_gradient(const Population& p, double* dW, double* da, int n_threads);

// The risk and the gradient (dW, da) from one pass over the kernel Jets (what iterative minimisers need).
double population_risk_gradient(const Population& p, double* dW, double* da, int n_threads);

// Hessian on [vec(W) row-major, a] (size K d + K), or on vec(W) only when train_readout is false.
void population_hessian(const Population& p, bool train_readout, double* H, int n_threads);

// With biases, l_i = w_i.x/sqrt(scale) + b_i and l*_r = w*_r.x/sqrt(scale) + bt_r (null: zeros; the a of the layers
// are the effective second layers). Every expectation is a pair moment E[s^(p)(l_i) g^(q)(l_k)] of the kernels with
// means (gaussian_mean.hpp pair_moment) on the pair's block of (Q, M, P), and Stein's lemma on x gives
//   dR/dw_i = a_i / s [rho2_i w_i + sum_k a_k E[s'(l_i) s'(l_k)] w_k - sum_r v_r E[s'(l_i) t'(l*_r)] w*_r],
//   dR/db_i = a_i rho1_i,  dR/da_i = rho0_i,  rho_n_i = E[(f - y) s^(n)(l_i)]
// (relu'' = step' = delta integrated out exactly), a unit with itself as one unit's expectations E[(s^2)^(n)(l_i)]
// (the deltas of relu and step units combined first: step^2 = step). Host only.
struct Biases {
  const double* student = nullptr;  // K
  const double* teacher = nullptr;  // M
};

// The risk with biases: the Gram blocks, then overlap_risk_mean (what SGD records).
double population_risk_mean(const Population& p, const Biases& b, int n_threads);

// dW (K x d), da (K, with respect to the effective a), db (K); not checked for finiteness (the caller does).
void population_gradient_mean(const Population& p, const Biases& b, double* dW, double* da, double* db,
                              int n_threads);

// The Hessian with biases on [vec(W) row-major, a (train_readout), b (train_bias)] (a with respect to the effective
// a), pair moments of orders p + q <= 4. Exactly symmetric.
void population_hessian_mean(const Population& p, const Biases& b, bool train_readout, bool train_bias, double* H,
                             int n_threads);

// Gradient descent on the population risk in weight space; W, a (and b) are updated in place.
struct DescentResult {
  std::vector<double> Q, M, a, risk, bias;  // recorded at each record step, time first (bias: with biases only)
  std::size_t recorded = 0;
  std::string status = "completed";
  long long stop_step = -1;  // step at which a divergence was detected
};
DescentResult population_descend(double* W, double* a, const Population& p, double lr, double lr_readout,
                                 long long steps, const std::vector<long long>& record_steps, int n_threads,
                                 const Schedule* schedule = nullptr);  // lr(n) = lr s(n) at iteration n (null: s = 1)

// The same with biases: b (K, the student's) stepped with lr_bias, bt the teacher's (null: zeros); diverged at the
// first non-finite (or out-of-range) gradient or recorded risk.
DescentResult population_descend_mean(double* W, double* a, double* b, const Population& p, const double* bt,
                                      double lr, double lr_readout, double lr_bias, long long steps,
                                      const std::vector<long long>& record_steps, int n_threads,
                                      const Schedule* schedule = nullptr);

}  // namespace twolayer

// Closed dynamics of the order parameters (Q, M, a) of a K-unit student learning an M-unit teacher.
//
// With E over the pre-activations (l, l*) ~ N(0, Omega), Omega = [[Q, M], [M^T, P]], student activation g, teacher
// activation t, effective (readout-scaled) second layers a (student, evolving) and v (teacher, fixed), and the error
// E = sum_r v_r t(l*_r) - sum_j a_j g(l_j) (+ output noise of variance Delta):
//   dM_ir/dt = lr a_i E[g'(l_i) l*_r E]
//   dQ_ik/dt = lr a_i E[g'(l_i) l_k E] + lr a_k E[g'(l_k) l_i E]
//              + [online only] lr^2 a_i a_k (E[g'(l_i) g'(l_k) E^2] + Delta E[g'(l_i) g'(l_k)])
//   da_i/dt  = lr_readout_eff E[g(l_i) E]
// "gradient_flow" (no lr^2 and noise terms) is exact population gradient flow at any finite d >= K + M;
// "online" is the d -> infinity limit of online SGD with t = steps / d (Saad-Solla; Goldt et al.).
// Spherical (projected) SGD, Arnaboldi et al., with Q_ii = 1: with Phi the unconstrained dQ,
//   dM_ir -> dM_ir - M_ir Phi_ii / 2,  dQ_ik -> Phi_ik - Q_ik (Phi_ii + Phi_kk) / 2,  dQ_ii = 0.
//
// One right-hand side for every activation pair, assembled from the Gaussian kernels with per-pair precomputation:
// all the I3 = E[g'(l_i) l_c h(l_u)] share the first derivatives of I2(g, h; l_i, l_u) (Stein + Price:
// I3 = 2 C_ic dI2/dC_ii + C_cu dI2/dC_iu), so E[g'(l_i) l_c E] = 2 Omega_ic A_i + (B Omega)_ic with
// A_i = sum_u w_u dI2_iu/dC_ii and B_iu = w_u dI2_iu/dC_iu — K (K + M) kernel gradients and one small matrix product
// instead of K (K + M)^2 I3 evaluations. The lr^2 term uses I4's symmetries (i <-> k, and the two last
// arguments) and i4_contract (gaussian_tables.hpp), which conditions on (l_i, l_k) once per pair; for a smooth
// student without a closed form (tanh, ...) and smooth teachers it is one Gaussian expectation over all the fields
// instead, every pair at once (smooth::error_square_moments, gaussian_error_square.hpp: K + M > 4 by lattices over
// subsets of at most four fields; the per-I4 path when that cannot certify), with or without biases.
//
// Biases (OdeModel::biased; issue 23). The pre-activations are l_i = c_i + b_i, l*_r = c*_r + b*_r with the centred
// fields (c, c*) = (w.x, w*.x)/sqrt(d) ~ N(0, Omega) and the means (b, b*): student biases b (part of the state,
// trained with lr_bias), teacher biases b* (fixed). Online SGD moves w_i by (lr/sqrt d) a_i g'(l_i) E x and b_i by
// (lr_bias/d) a_i g'(l_i) E (sgd.py), so with E = sum_u w_u h_u(l_u) (w = (-a, v), h_u the unit's activation):
//   dM_ir/dt = lr a_i E[g'(l_i) c*_r E]             (the centred field: Omega, not the second moment)
//   dQ_ik/dt = lr a_i E[g'(l_i) c_k E] + lr a_k E[g'(l_k) c_i E]
//              + [online only] lr^2 a_i a_k (E[g'(l_i) g'(l_k) E^2] + Delta E[g'(l_i) g'(l_k)])
//   db_i/dt  = lr_bias a_i E[g'(l_i) E]
//   da_i/dt  = lr_readout_eff E[g(l_i) E]
//   risk     = 1/2 E[E^2] (without Delta)
// where every expectation sees the means. Stein's lemma on the centred c_c (mean 0) turns the first-order terms into
// pair moments E[g^(p)(l_i) h^(q)(l_u)] (gaussian_mean.hpp pair_moment, the self pair u = i included):
//   Psi_ic = E[g'(l_i) c_c E] = Omega_ic A_i + sum_u B_iu Omega_uc,
//   A_i = sum_u w_u E[g''(l_i) h_u(l_u)],  B_iu = w_u E[g'(l_i) h_u'(l_u)],
// the bias pull E[g'(l_i) E] = sum_u w_u E[g'(l_i) h_u(l_u)], and E[g'(l_i) g'(l_k) E^2] = sum_jl w_j w_l
// I4(g, h_j, h_l) with means (i4_mean; every student but step:
// such online models are refused). Gradient flow is exactly minus the population gradient with biases
// (population.gradient(train_bias=True)) mapped to (Q, M, b, a). With zero biases and lr_bias = 0 a model is not
// "biased" and takes the paths above, bitwise unchanged. Spherical runs project dQ and dM as above (Q_ii fixed; the
// biases are not projected: spherical SGD renormalises the weight rows only). With a polynomial target (v = 0, no
// teacher biases) the committee part is this right-hand side of the students alone and TargetRhs (target.hpp, the
// biases read from the state) adds the target's parts, E = f(z) - fhat: E[g'(l_i) c_c f], the lr^2 term's
// E[g'g' (f^2 - 2 f fhat)], E[g(l_i) f] and the bias pull's E[g'(l_i) f] (relu: orthant moments with means, exact
// for nearly parallel and identical biased units too, target.hpp). Step students with trained biases run in the step
// flow (step_flow.hpp: their right-hand side has cusps where units meet); of the SIMD lanes
// (batch_integrators.hpp) the erf committees' take them (batch_dynamics_bias.hpp: this right-hand side's erf
// arithmetic over the lanes), and the sin and cos committees' (batch_dynamics_trig.hpp: its closed forms).
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "twolayer/activation.hpp"

namespace twolayer {

struct PolyTarget;  // target.hpp
class TargetRhs;

enum class Regime : int { Online = 0, GradientFlow = 1 };

// The most units K + M of one system: the overlap matrix Omega ((K + M)^2 entries) and every table of the
// right-hand side stay below 2^31 entries, so that their int index products cannot overflow. (A right-hand side
// costs O(K^2 (K + M)^2) kernels: systems anywhere near this size are out of reach anyway.)
constexpr int kMaxUnits = 46340;

struct OdeModel {
  Activation student = Activation::Erf, teacher = Activation::Erf;
  int K = 1, M = 1;
  Regime regime = Regime::Online;
  bool spherical = false;
  double lr = 1.0;
  double lr_readout = 0.0;  // on the effective second layer (already multiplied by the readout factor squared)
  double noise = 0.0;       // output-noise variance Delta (online regime only)
  std::vector<double> P;    // M x M teacher overlaps (fixed)
  std::vector<double> v;    // M effective teacher second layer (fixed)
  // A polynomial multi-index target instead of the committee teacher (target.hpp): then M = k, P = I_k, v = 0, and
  // the right-hand side is the student-only committee one plus the exact target terms (TargetRhs).
  std::shared_ptr<const PolyTarget> target;
  // Biases (the header's "Biases"): the state gains the student biases b (K), the teacher's are teacher_bias (M).
  bool biased = false;
  std::vector<double> teacher_bias;  // M entries when biased
  double lr_bias = 0.0;              // learning rate of b (biased only)

  // State y = [Q (K x K, full symmetric, row-major), M (K x M, row-major), a (K)], then b (K) when biased.
  std::size_t state_size() const {
    return static_cast<std::size_t>(K) * K + static_cast<std::size_t>(K) * M +
           static_cast<std::size_t>(K) * (biased ? 2 : 1);
  }
  std::size_t offset_M() const { return static_cast<std::size_t>(K) * K; }
  std::size_t offset_a() const { return static_cast<std::size_t>(K) * K + static_cast<std::size_t>(K) * M; }
  std::size_t offset_b() const { return offset_a() + static_cast<std::size_t>(K); }
};

// Throws std::invalid_argument naming the offending field unless the model is usable (not_implemented, gaussian.hpp,
// for the biased models the right-hand side does not handle yet: validate_bias).
void validate_model(const OdeModel& m);
void validate_bias(const OdeModel& m);

// The teacher-teacher part of the risk with means, 1/2 sum_rq v_r v_q E[t(l*_r) t(l*_q)] (fixed during a run; the
// teacher biases where biased): OdeRhs's risk with biases and the lanes with biases (batch_dynamics_bias.hpp) add it.
double teacher_risk_with_means(const OdeModel& m);

// The right-hand side of one model, with its workspace (not thread-safe: one object per concurrent user).
class OdeRhs {
 public:
  explicit OdeRhs(const OdeModel& model);
  const OdeModel& model() const { return m_; }
  // dy = f(y). n_threads: 1 runs serially; otherwise OpenMP inside (used for large K, M; <= 0: OpenMP default).
  void operator()(const double* y, double* dy, int n_threads = 1) { (this->*eval_)(y, dy, n_threads); }
  // Multiplies lr and lr_readout by s (a learning-rate schedule's value at the time of the next evaluations).
  void set_rate(double s) { rate_ = s; }
  // Excess population risk of state y (the first call with biases caches the teachers' part: not thread-safe either).
  double risk(const double* y) const;
  // Omega = [[Q, M], [M^T, P]] ((K + M) x (K + M), row-major) of state y, into out.
  void omega(const double* y, double* out) const;
  // The expectations of the last evaluation, for maps built from them (large_batch.hpp): psi() row i (K + M
  // entries) is E[g'(l_i) l_c E] for every unit c (students, then teachers); online only, second_moment(p) is
  // E[g'(l_i) g'(l_k) E^2] + Delta J2 for the p-th student pair i <= k (row-major order of the upper triangle).
  const double* psi() const { return psi_.data(); }
  double second_moment(int p) const { return quad_[p] + m_.noise * j2_[p]; }

 private:
  // The right-hand side with K = KC, M = MC fixed at compile time when positive (small systems: every loop
  // unrolls), at run time otherwise; eval_ is the one chosen for this model.
  template <int KC, int MC>
  void eval(const double* y, double* dy, int n_threads);
  using Eval = void (OdeRhs::*)(const double*, double*, int);
  static Eval select_eval(int K, int M);
  // With a target: the committee eval (v = 0, no projection), then the target terms, then the projection.
  void eval_target(const double* y, double* dy, int n_threads);
  // With biases (the header's "Biases"), and its risk.
  void eval_bias(const double* y, double* dy, int n_threads);
  double risk_bias(const double* y) const;
  // the teacher-teacher part of risk_bias (fixed), computed at the first risk() (a right-hand side never needs it)
  mutable double risk_tt_ = 0.0;
  mutable bool risk_tt_ready_ = false;
  bool mean_risk_ = false;  // risk() through risk_bias (biases, or a pair without zero-mean kernels)
  std::vector<double> mu_, A_, G_, V_, J_;  // eval_bias: the means and the per-student pulls
  Eval committee_eval_ = nullptr;
  std::shared_ptr<const TargetRhs> target_;
  bool project_ = false;

  OdeModel m_;
  double rate_ = 1.0;  // schedule multiplier of lr and lr_readout (set_rate)
  Eval eval_;
  int u_;                          // K + M units
  std::vector<Activation> acts_;   // per unit
  std::vector<double> om_, w_, B_, D_, val_, psi_, phi_, wt_, j2_, quad_;
  std::vector<int> pairs_;               // student pairs (i, k), i <= k
  int chunk_ = 1;                        // pairs per I4 table call
  std::size_t ws_size_ = 0;
  bool square_fields_ = false;  // the online term through smooth::error_square_moments
  std::vector<std::vector<double>> ws_;  // per-thread scratch
};

}  // namespace twolayer

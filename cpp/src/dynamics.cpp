// The order-parameter right-hand side: one place for every activation (see dynamics.hpp for the equations).
#include "twolayer/dynamics.hpp"
#include "twolayer/step_flow.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>

#include "twolayer/cancel.hpp"
#include "twolayer/gaussian.hpp"
#include "twolayer/gaussian_error_square.hpp"
#include "twolayer/gaussian_mean.hpp"
#include "twolayer/gaussian_tables.hpp"
#include "twolayer/parallel.hpp"
#include "twolayer/population.hpp"
#include "twolayer/target.hpp"

namespace twolayer {

namespace {
// body(i, ws) for i in [0, n), ws the calling thread's scratch: an OpenMP loop when par (the first exception is
// rethrown after it), a plain loop otherwise (no OpenMP region at all: entering one costs about a microsecond, more
// than a whole K = 2 right-hand side).
template <class Body>
void loop_impl(int n, int threads, bool par, std::vector<std::vector<double>>& ws, Body&& body) {
  if (!par) {
    for (int i = 0; i < n; ++i) body(i, ws[0].data());
    return;
  }
  std::exception_ptr error;
  std::mutex mu;
  (void)threads;
#ifdef TWOLAYER_OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
#endif
  for (int i = 0; i < n; ++i) {
    try {
#ifdef TWOLAYER_OPENMP
      body(i, ws[omp_get_thread_num()].data());
#else
      body(i, ws[0].data());
#endif
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

// Psi = 2 diag(A) Omega[:K] + B Omega (rows i < K), A_i = sum_q w_q D_iq. U > 0: u = U at compile time (whole rows
// in registers).
template <int U>
void psi_rows(int K, int u_rt, const double* om, const double* w, const double* D, const double* B, double* psi) {
  const int u = U > 0 ? U : u_rt;
  for (int i = 0; i < K; ++i) {
    const double* di = D + static_cast<std::size_t>(i) * u;
    const double* bi = B + static_cast<std::size_t>(i) * u;
    double A = 0.0;
    for (int q = 0; q < u; ++q) A += w[q] * di[q];
    double* row = psi + static_cast<std::size_t>(i) * u;
    const double* oi = om + static_cast<std::size_t>(i) * u;
    if constexpr (U > 0) {  // accumulate in registers
      double acc[U];
      for (int c = 0; c < U; ++c) acc[c] = 2.0 * oi[c] * A;
      for (int q = 0; q < U; ++q)
        for (int c = 0; c < U; ++c) acc[c] += bi[q] * om[q * U + c];
      for (int c = 0; c < U; ++c) row[c] = acc[c];
    } else {
      for (int c = 0; c < u; ++c) row[c] = 2.0 * oi[c] * A;
      for (int q = 0; q < u; ++q) {
        const double b = bi[q];
        const double* oq = om + static_cast<std::size_t>(q) * u;
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
        for (int c = 0; c < u; ++c) row[c] += b * oq[c];
      }
    }
  }
}

// The first-order terms from Psi: Phi_ik = lr (a_i Psi_ik + a_k Psi_ki) for i <= k (row-major K x K) and
// dM_ir = lr a_i Psi_i,K+r (both right-hand sides).
inline void first_order_terms(int K, int M, int u, double lr, const double* a, const double* psi, double* phi,
                              double* dM) {
  for (int i = 0; i < K; ++i) {
    for (int k = i; k < K; ++k) phi[i * K + k] = lr * (a[i] * psi[i * u + k] + a[k] * psi[k * u + i]);
    for (int r = 0; r < M; ++r) dM[i * M + r] = lr * a[i] * psi[i * u + K + r];
  }
}

// Assembles dQ (symmetric, row-major K x K) from Phi (its upper triangle); spherical: the projection that keeps
// Q_ii = 1, dQ_ik = Phi_ik - Q_ik (Phi_ii + Phi_kk) / 2 (dQ_ii = 0) and dM_ir -= M_ir Phi_ii / 2 (phi keeps the
// unconstrained Phi; the biases are not projected). Q = y, M = y + offset_M.
inline void assemble_dQ(int K, int M, bool spherical, const double* y, std::size_t offset_M, const double* phi,
                        double* dQ, double* dM) {
  for (int i = 0; i < K; ++i)
    for (int k = i; k < K; ++k) {
      double v = phi[i * K + k];
      if (spherical) v = (i == k) ? 0.0 : v - 0.5 * y[i * K + k] * (phi[i * K + i] + phi[k * K + k]);
      dQ[i * K + k] = dQ[k * K + i] = v;
    }
  if (spherical)
    for (int i = 0; i < K; ++i)
      for (int r = 0; r < M; ++r) dM[i * M + r] -= 0.5 * y[offset_M + i * M + r] * phi[i * K + i];
}
}  // namespace

void validate_model(const OdeModel& m) {
  if (m.K < 1) throw std::invalid_argument("K: need at least one student unit");
  if (m.M < 1) throw std::invalid_argument("M: need at least one teacher unit");
  if (static_cast<long long>(m.K) + m.M > kMaxUnits)
    throw std::invalid_argument("K + M: expected at most " + std::to_string(kMaxUnits) + " units in all, got " +
                                std::to_string(static_cast<long long>(m.K) + m.M));
  if (m.P.size() != static_cast<std::size_t>(m.M) * m.M) throw std::invalid_argument("P: expected M x M entries");
  if (m.v.size() != static_cast<std::size_t>(m.M)) throw std::invalid_argument("v: expected M entries");
  if (!std::isfinite(m.lr) || m.lr < 0.0) throw std::invalid_argument("lr: expected a finite number >= 0");
  if (!std::isfinite(m.lr_readout) || m.lr_readout < 0.0)
    throw std::invalid_argument("lr_readout: expected a finite number >= 0");
  if (!std::isfinite(m.noise) || m.noise < 0.0) throw std::invalid_argument("noise: expected a finite number >= 0");
  if (m.regime == Regime::Online && m.student == Activation::Step)
    throw std::invalid_argument(
        "regime: the step activation's derivative is a delta; only regime='gradient_flow' applies to step units");
  if (m.biased) validate_bias(m);
}

void validate_bias(const OdeModel& m) {
  if (m.teacher_bias.size() != static_cast<std::size_t>(m.M))
    throw std::invalid_argument("teacher_bias: expected M entries");
  for (double b : m.teacher_bias)
    if (!std::isfinite(b)) throw std::invalid_argument("teacher_bias: entries must be finite");
  if (!std::isfinite(m.lr_bias) || m.lr_bias < 0.0)
    throw std::invalid_argument("lr_bias: expected a finite number >= 0");
  if (m.target) {
    for (double b : m.teacher_bias)
      if (b != 0.0) throw std::invalid_argument("teacher_bias: a polynomial target has no teacher biases");
  }
  if (m.student == Activation::Step && !is_step_flow(m))
    throw not_implemented(
        "bias: step students with biases run in the step flow only (regime='gradient_flow', step teachers, not "
        "spherical, lr > 0 and trained biases, lr_bias > 0): a student that reaches its teacher (equal direction and "
        "b/|w|) meets it on a cusp of the risk, which the generic integrator cannot pass; tl.population.descend "
        "trains step units with fixed biases in weight space");
}

OdeRhs::Eval OdeRhs::select_eval(int K, int M) {
  static constexpr Eval small[4][4] = {
      {&OdeRhs::eval<1, 1>, &OdeRhs::eval<1, 2>, &OdeRhs::eval<1, 3>, &OdeRhs::eval<1, 4>},
      {&OdeRhs::eval<2, 1>, &OdeRhs::eval<2, 2>, &OdeRhs::eval<2, 3>, &OdeRhs::eval<2, 4>},
      {&OdeRhs::eval<3, 1>, &OdeRhs::eval<3, 2>, &OdeRhs::eval<3, 3>, &OdeRhs::eval<3, 4>},
      {&OdeRhs::eval<4, 1>, &OdeRhs::eval<4, 2>, &OdeRhs::eval<4, 3>, &OdeRhs::eval<4, 4>}};
  return K <= 4 && M <= 4 ? small[K - 1][M - 1] : &OdeRhs::eval<0, 0>;
}

double teacher_risk_with_means(const OdeModel& m) {
  auto tb = [&](int r) { return m.biased ? m.teacher_bias[r] : 0.0; };
  double risk = 0.0;
  for (int r = 0; r < m.M; ++r)
    for (int q = 0; q < m.M; ++q) {
      const double pm = pair_moment(m.teacher, 0, m.teacher, 0, tb(r), tb(q), m.P[r * m.M + r], m.P[r * m.M + q],
                                    m.P[q * m.M + q]);
      risk += 0.5 * m.v[r] * m.v[q] * pm;
    }
  return risk;
}

OdeRhs::OdeRhs(const OdeModel& model) : m_(model), u_(model.K + model.M) {
  validate_model(m_);
  if (m_.biased && m_.student == Activation::Step)
    throw not_implemented(
        "bias: the right-hand side of step students with biases is not defined where two units meet (a cusp of the "
        "risk); tl.ode.integrate runs them in the step flow, which passes the meetings");
  eval_ = select_eval(m_.K, m_.M);
  const std::size_t u = static_cast<std::size_t>(u_), K = static_cast<std::size_t>(m_.K);
  acts_.assign(u, m_.student);
  for (std::size_t r = K; r < u; ++r) acts_[r] = m_.teacher;
  om_.resize(u * u);
  w_.resize(u);
  D_.resize(K * u);
  B_.resize(K * u);
  val_.resize(K * u);
  psi_.resize(K * u);
  phi_.resize(K * K);
  j2_.resize(K * (K + 1) / 2);
  quad_.resize(K * (K + 1) / 2);
  const int T = u_ * (u_ + 1) / 2;
  wt_.resize(T);
  for (int i = 0; i < m_.K; ++i)
    for (int k = i; k < m_.K; ++k) {
      pairs_.push_back(i);
      pairs_.push_back(k);
    }
  chunk_ = std::max(1, 8192 / T);  // pairs per I4 table call: about 64 KiB of kernel values
  for (int r = 0; r < m_.M; ++r)
    for (int q = 0; q < m_.M; ++q) om_[(m_.K + r) * u_ + m_.K + q] = m_.P[r * m_.M + q];
  // E[g'g' E^2] of smooth units by the lattices over the fields (gaussian_error_square.hpp); polynomial (hermite)
  // students with polynomial teachers keep the I4 tables, whose entries are exact moments
  square_fields_ = smooth::error_square_applies(m_.student, m_.teacher);
  ws_size_ = std::max(i4_contract_workspace(u_, chunk_),
                      i2_grad_table_workspace(u_, m_.K));
  // the risk through the pair moments with means: with biases, and for a pair the zero-mean kernels lack (a relu
  // or step unit with a smooth one; the SDE's mixed moments, sde.hpp, record it)
  mean_risk_ = m_.biased || (!m_.target && !zero_mean_pair(m_.student, m_.teacher));
  if (m_.biased) {
    eval_ = &OdeRhs::eval_bias;
    mu_.resize(u);
    A_.resize(K);
    G_.resize(K);
    V_.resize(K);
    J_.resize(K * K);
  }
  if (m_.target) {
    if (m_.target->k != m_.M) throw std::invalid_argument("target: M must have k = " + std::to_string(m_.target->k) +
                                                          " columns, one per target direction");
    for (double vr : m_.v)
      if (vr != 0.0) throw std::invalid_argument("v: must be 0 with a target (the committee part is the student's)");
    const bool online = m_.regime == Regime::Online;
    target_ = std::make_shared<const TargetRhs>(*m_.target, m_.student, m_.K, online, m_.lr, m_.lr_readout,
                                                std::vector<double>{}, m_.biased);
    project_ = m_.spherical;
    m_.spherical = false;
    committee_eval_ = eval_;
    eval_ = &OdeRhs::eval_target;
  }
}

void OdeRhs::eval_target(const double* y, double* dy, int n_threads) {
  (this->*committee_eval_)(y, dy, n_threads);
  const int K = m_.K, M = m_.M;
  double* dQ = dy;
  double* dM = dy + m_.offset_M();
  target_->add(y, dQ, dM, dy + m_.offset_a(), rate_, n_threads);
  if (m_.biased) {  // db_i = lr_bias a_i E[g'(lambda_i) E]: the target's part E[g'(lambda_i) f] (eval_bias: the rest)
    const double* a = y + m_.offset_a();
    double* db = dy + m_.offset_b();
    std::fill(G_.begin(), G_.end(), 0.0);
    target_->add_bias_raw(y, G_.data());
    for (int i = 0; i < K; ++i) db[i] += m_.lr_bias * rate_ * a[i] * G_[i];
  }
  if (!project_) return;
  for (int i = 0; i < K; ++i) phi_[i] = dQ[i * K + i];  // Phi_ii (phi_ has K^2 >= K entries)
  for (int i = 0; i < K; ++i) {
    for (int r = 0; r < M; ++r) dM[i * M + r] -= 0.5 * y[m_.offset_M() + i * M + r] * phi_[i];
    for (int k = 0; k < K; ++k) dQ[i * K + k] = i == k ? 0.0 : dQ[i * K + k] - 0.5 * y[i * K + k] * (phi_[i] + phi_[k]);
  }
}

void OdeRhs::omega(const double* y, double* o) const {
  const int K = m_.K, M = m_.M, u = u_;
  const double* Q = y;
  const double* Mo = y + m_.offset_M();
  for (int i = 0; i < K; ++i) {
    for (int k = 0; k < K; ++k) o[i * u + k] = Q[i * K + k];
    for (int r = 0; r < M; ++r) o[i * u + K + r] = o[(K + r) * u + i] = Mo[i * M + r];
  }
  for (int r = 0; r < M; ++r)
    for (int s = 0; s < M; ++s) o[(K + r) * u + K + s] = m_.P[r * M + s];
}

double OdeRhs::risk(const double* y) const {
  const double committee = mean_risk_ ? risk_bias(y)
                                      : overlap_risk(y, y + m_.offset_M(), m_.P.data(), y + m_.offset_a(),
                                                     m_.v.data(), m_.K, m_.M, m_.student, m_.teacher);
  return committee + (target_ ? target_->risk_part(y) : 0.0);
}

template <int KC, int MC>
void OdeRhs::eval(const double* y, double* dy, int n_threads) {
  static_assert((KC > 0) == (MC > 0), "both sizes fixed or both at run time");
  const int K = KC > 0 ? KC : m_.K, M = MC > 0 ? MC : m_.M, u = K + M;
  const Activation g = m_.student;
  const double* a = y + m_.offset_a();
  double* om = om_.data();  // its P block was written by the constructor
  {
    const double* Q = y;
    const double* Mo = y + m_.offset_M();
    for (int i = 0; i < K; ++i) {
      for (int k = 0; k < K; ++k) om[i * u + k] = Q[i * K + k];
      for (int r = 0; r < M; ++r) om[i * u + K + r] = om[(K + r) * u + i] = Mo[i * M + r];
    }
  }
  // Unit weights in the error E = sum_u w_u act_u(l_u).
  double* w = w_.data();
  for (int j = 0; j < K; ++j) w[j] = -a[j];
  for (int r = 0; r < M; ++r) w[K + r] = m_.v[r];
  const int threads = resolve_threads(n_threads);
  const bool par = threads > 1 && K >= 8;
  if (static_cast<int>(ws_.size()) < threads) ws_.resize(threads, std::vector<double>(ws_size_));

  // 1. I2(g, act_c; l_i, l_c) with its gradient for every student i and unit c: values (for da),
  //    D_ic = dI2/dC_ii and B_ic = w_c dI2/dC_ic; the self pair through i2_self: E[g'(l_i) l_c g(l_i)] = Omega_ic dS/dq.
  //    Before B is weighted it holds dI2(g, g)/dC_ik = J2(g; l_i, l_k) for the student pairs (Price; the diagonal too):
  //    the online noise term's J2, kept in j2_ when there is noise.
  double *val = val_.data(), *D = D_.data(), *B = B_.data();
  i2_grad_table(g, om, u, K, acts_.data(), val, D, B, ws_[0].data());
  const double noise = m_.regime == Regime::Online ? m_.noise : 0.0;
  const int np = K * (K + 1) / 2;
  for (int p = 0; p < np; ++p) j2_[p] = noise > 0.0 ? B[pairs_[2 * p] * u + pairs_[2 * p + 1]] : 0.0;
  for (int i = 0; i < K; ++i) {
    double* bi = B + i * u;
    for (int c = 0; c < u; ++c) bi[c] *= w[c];
    bi[i] = w[i] * D[i * u + i];  // self pair: dS/dq
    D[i * u + i] = 0.0;
  }
  // 2. Psi_ic = E[g'(l_i) l_c E] = 2 Omega_ic A_i + sum_q B_iq Omega_qc, A_i = sum_{q != i} w_q D_iq.
  //    O(K (K + M)^2) flops: serial (one OpenMP region per right-hand side, for the I4 tables, is enough).
  psi_rows<KC + MC>(K, u, om, w, D, B, psi_.data());
  // 3. First-order terms.
  const double lr = m_.lr * rate_;
  double* dQ = dy;
  double* dM = dy + m_.offset_M();
  double* da = dy + m_.offset_a();
  first_order_terms(K, M, u, lr, a, psi_.data(), phi_.data(), dM);
  // 4. Online: lr^2 a_i a_k (E[g'(l_i) g'(l_k) E^2] + Delta J2) over pairs i <= k. E[g'g' E^2] = sum_{j <= l} W_jl I4_jl
  //    with W_jl = (2 - [j = l]) w_j w_l: I4's symmetries halve the work twice; the table conditions once per pair.
  if (m_.regime == Regime::Online) {
    double* W = wt_.data();
    for (int j = 0; j < u; ++j)
      for (int l = j; l < u; ++l) W[tri(u, j, l)] = (l == j ? 1.0 : 2.0) * w[j] * w[l];
    const int nchunks = (np + chunk_ - 1) / chunk_;
    const double* j2v = j2_.data();
    double* quad = quad_.data();
    if (!(square_fields_ &&
          smooth::error_square_moments(g, u, acts_.data(), om, nullptr, w, pairs_.data(), np, quad, threads)))
      loop_impl(nchunks, threads, par, ws_, [&](int ch, double* ws) {
        throw_if_cancelled();  // smooth I4 by quadrature where the lattices cannot certify: ~0.1-1 s per chunk
        const int p0 = ch * chunk_, cnt = std::min(chunk_, np - p0);
        i4_contract(g, om, u, acts_.data(), &pairs_[2 * p0], cnt, W, quad + p0, ws);
      });
    for (int p = 0; p < np; ++p) {
      const int i = pairs_[2 * p], k = pairs_[2 * p + 1];
      phi_[i * K + k] += lr * lr * a[i] * a[k] * (quad[p] + noise * j2v[p]);
    }
  }
  // 5. Assemble dQ (symmetric), with the spherical projection if asked.
  assemble_dQ(K, M, m_.spherical, y, m_.offset_M(), phi_.data(), dQ, dM);
  // 6. Second layer: da_i = lr_readout E[g(l_i) E].
  for (int i = 0; i < K; ++i) {
    double s = 0.0;
    if (m_.lr_readout != 0.0)
      for (int c = 0; c < u; ++c) s += w[c] * val_[i * u + c];
    da[i] = m_.lr_readout * rate_ * s;
  }
}

double OdeRhs::risk_bias(const double* y) const {
  const int K = m_.K, u = u_;
  std::vector<double> o(static_cast<std::size_t>(u) * u);
  omega(y, o.data());
  const double* a = y + m_.offset_a();
  const double* b = y + m_.offset_b();
  auto wt = [&](int c) { return c < K ? -a[c] : m_.v[c - K]; };
  auto mu = [&](int c) { return !m_.biased ? 0.0 : c < K ? b[c] : m_.teacher_bias[c - K]; };
  if (!risk_tt_ready_) {  // the teachers' block, once
    risk_tt_ = teacher_risk_with_means(m_);
    risk_tt_ready_ = true;
  }
  double r = risk_tt_;  // 1/2 sum_uc w_u w_c E[h_u h_c]: the rows of the students here, the teachers' block fixed
  for (int i = 0; i < K; ++i)
    for (int c = i; c < u; ++c) {
      const double pm = pair_moment(acts_[i], 0, acts_[c], 0, mu(i), mu(c), o[i * u + i], o[i * u + c], o[c * u + c]);
      r += (c == i ? 0.5 : 1.0) * wt(i) * wt(c) * pm;
    }
  return r;
}

// The right-hand side with biases (dynamics.hpp, "Biases"): pair moments per student i and unit c, then I4 with means
// for the online lr^2 term.
void OdeRhs::eval_bias(const double* y, double* dy, int n_threads) {
  const int K = m_.K, M = m_.M, u = u_;
  const Activation g = m_.student;
  const double* a = y + m_.offset_a();
  const double* b = y + m_.offset_b();
  double* om = om_.data();
  omega(y, om);
  double* w = w_.data();  // E = sum_c w_c h_c(l_c)
  for (int j = 0; j < K; ++j) w[j] = -a[j];
  for (int r = 0; r < M; ++r) w[K + r] = m_.v[r];
  double* mu = mu_.data();  // the means (b, b*)
  for (int j = 0; j < K; ++j) mu[j] = b[j];
  for (int r = 0; r < M; ++r) mu[K + r] = m_.teacher_bias[r];
  const int threads = resolve_threads(n_threads);
  const bool par = threads > 1 && K >= 8;
  if (static_cast<int>(ws_.size()) < threads) ws_.resize(threads, std::vector<double>(ws_size_));
  const bool readout = m_.lr_readout != 0.0;
  // 1. Per student i: A_i = sum_c w_c E[g''(l_i) h_c], B_ic = w_c E[g'(l_i) h_c'] (J_ik = E[g'(l_i) g'(l_k)]
  //    unweighted: the noise term), the bias pull G_i = sum_c w_c E[g'(l_i) h_c] and the readout pull
  //    V_i = sum_c w_c E[g(l_i) h_c]; the self pair c = i is a pair moment of one variable.
  double* B = B_.data();
  loop_impl(K, threads, par, ws_, [&](int i, double*) {
    const double x = om[i * u + i];
    double A = 0.0, G = 0.0, V = 0.0;
    static constexpr int kOrders[4][2] = {{2, 0}, {1, 1}, {1, 0}, {0, 0}};
    for (int c = 0; c < u; ++c) {
      double m[4];  // E[g^(p)(l_i) h_c^(q)(l_c)] for the orders (p, q) of kOrders (the last only with a readout)
      pair_moments(g, acts_[c], kOrders, readout ? 4 : 3, mu[i], mu[c], x, om[i * u + c], om[c * u + c], m);
      A += w[c] * m[0];
      B[i * u + c] = w[c] * m[1];
      if (c < K) J_[i * K + c] = m[1];
      G += w[c] * m[2];
      if (readout) V += w[c] * m[3];
    }
    A_[i] = A;
    G_[i] = G;
    V_[i] = V;
  });
  // 2. Psi_ic = E[g'(l_i) c_c E] = Omega_ic A_i + sum_q B_iq Omega_qc (Stein on the centred c_c).
  for (int i = 0; i < K; ++i)
    for (int c = 0; c < u; ++c) {
      double s = om[i * u + c] * A_[i];
      for (int q = 0; q < u; ++q) s += B[i * u + q] * om[q * u + c];
      psi_[i * u + c] = s;
    }
  const double lr = m_.lr * rate_;
  double* dQ = dy;
  double* dM = dy + m_.offset_M();
  double* da = dy + m_.offset_a();
  double* db = dy + m_.offset_b();
  first_order_terms(K, M, u, lr, a, psi_.data(), phi_.data(), dM);
  // 3. Online: lr^2 a_i a_k (sum_{j <= l} (2 - [j = l]) w_j w_l I4(g, h_j, h_l; l_i, l_k, l_j, l_l) + Delta J_ik)
  //    over the pairs i <= k.
  if (m_.regime == Regime::Online) {
    const int np = K * (K + 1) / 2;
    double* quad = quad_.data();
    if (!(square_fields_ &&
          smooth::error_square_moments(g, u, acts_.data(), om, mu, w, pairs_.data(), np, quad, threads)))
      loop_impl(np, threads, par, ws_, [&](int p, double*) {
        throw_if_cancelled();  // I4 with means: up to seconds per pair (Ctrl-C; the driver keeps the rows)
        double s = 0.0;
        for (int j = 0; j < u; ++j)
          for (int l = j; l < u; ++l) {
            if (w[j] == 0.0 || w[l] == 0.0) continue;  // adds a zero (a target's directions: v = 0)
            const int units[4] = {pairs_[2 * p], pairs_[2 * p + 1], j, l};
            double C[16], m4[4];
            for (int r = 0; r < 4; ++r) {
              m4[r] = mu[units[r]];
              for (int q = 0; q < 4; ++q) C[r * 4 + q] = om[units[r] * u + units[q]];
            }
            s += (l == j ? 1.0 : 2.0) * w[j] * w[l] * i4_mean(g, acts_[j], acts_[l], C, m4);
          }
        quad[p] = s;
      });
    for (int p = 0; p < np; ++p) {
      const int i = pairs_[2 * p], k = pairs_[2 * p + 1];
      j2_[p] = J_[i * K + k];
      phi_[i * K + k] += lr * lr * a[i] * a[k] * (quad[p] + m_.noise * j2_[p]);
    }
  }
  // Assemble dQ, spherical: the projection of the weights (Q_ii fixed; the biases are not projected).
  assemble_dQ(K, M, m_.spherical, y, m_.offset_M(), phi_.data(), dQ, dM);
  // 4. Second layer and biases.
  for (int i = 0; i < K; ++i) {
    da[i] = m_.lr_readout * rate_ * V_[i];
    db[i] = m_.lr_bias * rate_ * a[i] * G_[i];
  }
}

}  // namespace twolayer

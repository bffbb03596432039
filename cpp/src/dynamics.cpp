// The order-parameter right-hand side: one place for every activation (see dynamics.hpp for the equations).
#include "twolayer/dynamics.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>

#include "twolayer/gaussian.hpp"
#include "twolayer/parallel.hpp"
#include "twolayer/population.hpp"

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
}  // namespace

void validate_model(const OdeModel& m) {
  if (m.K < 1) throw std::invalid_argument("K: need at least one student unit");
  if (m.M < 1) throw std::invalid_argument("M: need at least one teacher unit");
  if (m.P.size() != static_cast<std::size_t>(m.M) * m.M) throw std::invalid_argument("P: expected M x M entries");
  if (m.v.size() != static_cast<std::size_t>(m.M)) throw std::invalid_argument("v: expected M entries");
  if (!std::isfinite(m.lr) || m.lr < 0.0) throw std::invalid_argument("lr: expected a finite number >= 0");
  if (!std::isfinite(m.lr_readout) || m.lr_readout < 0.0)
    throw std::invalid_argument("lr_readout: expected a finite number >= 0");
  if (!std::isfinite(m.noise) || m.noise < 0.0) throw std::invalid_argument("noise: expected a finite number >= 0");
  if (m.regime == Regime::Online && m.student == Activation::Step)
    throw std::invalid_argument(
        "regime: the step activation's derivative is a delta; only regime='gradient_flow' applies to step units");
}

OdeRhs::OdeRhs(const OdeModel& model) : m_(model), u_(model.K + model.M) {
  validate_model(m_);
  const std::size_t u = static_cast<std::size_t>(u_), K = static_cast<std::size_t>(m_.K);
  acts_.assign(u, m_.student);
  for (std::size_t r = K; r < u; ++r) acts_[r] = m_.teacher;
  om_.resize(u * u);
  w_.resize(u);
  D_.resize(K * u);
  diag_.resize(u);
  B_.resize(K * u);
  val_.resize(K * u);
  psi_.resize(K * u);
  phi_.resize(K * K);
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
  return overlap_risk(y, y + m_.offset_M(), m_.P.data(), y + m_.offset_a(), m_.v.data(), m_.K, m_.M, m_.student,
                      m_.teacher);
}

void OdeRhs::operator()(const double* y, double* dy, int n_threads) {
  const int K = m_.K, M = m_.M, u = u_;
  const Activation g = m_.student;
  const double* a = y + m_.offset_a();
  double* om = om_.data();
  omega(y, om);
  // Unit weights in the error E = sum_u w_u act_u(l_u), and the variances.
  double* w = w_.data();
  for (int j = 0; j < K; ++j) w[j] = -a[j];
  for (int r = 0; r < M; ++r) w[K + r] = m_.v[r];
  double* diag = diag_.data();
  for (int c = 0; c < u; ++c) diag[c] = om[c * u + c];
  const int threads = resolve_threads(n_threads);
  const bool par = threads > 1 && K >= 8;
  const std::size_t wsize = static_cast<std::size_t>(u) * u + 8 * static_cast<std::size_t>(u);
  if (static_cast<int>(ws_.size()) < threads) ws_.resize(threads);
  for (auto& v : ws_)
    if (v.size() < wsize) v.resize(wsize);

  // 1. I2(g, act_c; l_i, l_c) with its gradient for every student i and unit c (student pairs once, i < c):
  //    values (for da), D_ic = dI2/dC_ii and B_ic = w_c dI2/dC_ic; the self pair c = i through i2_self:
  //    E[g'(l_i) l_c g(l_i)] = Omega_ic dS/dq.
  loop_impl(K, threads, par, ws_, [&](int i, double* ws) {
    const double qi = diag[i];
    const Grad s = i2_self(g, g, Grad::variable(qi, 0));
    val_[i * u + i] = s.v;
    B_[i * u + i] = w[i] * s.g[0];
    D_[i * u + i] = 0.0;
    const int n = u - i - 1;
    double *v = ws, *dx = ws + u, *dyy = ws + 2 * u, *dz = ws + 3 * u;
    i2_grad_row(g, qi, &acts_[i + 1], &om[i * u + i + 1], &diag[i + 1], n, v, dx, dyy, dz);
    for (int e = 0; e < n; ++e) {
      const int c = i + 1 + e;
      val_[i * u + c] = v[e];
      B_[i * u + c] = w[c] * dyy[e];
      D_[i * u + c] = dx[e];
      if (c < K) {  // the same pair seen from student c: its variance is the third argument
        val_[c * u + i] = v[e];
        B_[c * u + i] = w[i] * dyy[e];
        D_[c * u + i] = dz[e];
      }
    }
  });
  // 2. Psi_ic = E[g'(l_i) l_c E] = 2 Omega_ic A_i + sum_q B_iq Omega_qc, A_i = sum_{q != i} w_q D_iq.
  loop_impl(K, threads, par, ws_, [&](int i, double*) {
    double A = 0.0;
    const double* di = &D_[static_cast<std::size_t>(i) * u];
    for (int q = 0; q < u; ++q) A += w[q] * di[q];
    double* row = &psi_[static_cast<std::size_t>(i) * u];
    const double* bi = &B_[static_cast<std::size_t>(i) * u];
    for (int c = 0; c < u; ++c) row[c] = 2.0 * om[i * u + c] * A;
    for (int q = 0; q < u; ++q) {
      const double b = bi[q];
      const double* oq = om + static_cast<std::size_t>(q) * u;
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
      for (int c = 0; c < u; ++c) row[c] += b * oq[c];
    }
  });
  // 3. First-order terms.
  const double lr = m_.lr;
  double* dQ = dy;
  double* dM = dy + m_.offset_M();
  double* da = dy + m_.offset_a();
  for (int i = 0; i < K; ++i) {
    for (int k = i; k < K; ++k) phi_[i * K + k] = lr * (a[i] * psi_[i * u + k] + a[k] * psi_[k * u + i]);
    for (int r = 0; r < M; ++r) dM[i * M + r] = lr * a[i] * psi_[i * u + K + r];
  }
  // 4. Online: lr^2 a_i a_k (E[g'(l_i) g'(l_k) E^2] + Delta J2) over pairs i <= k; E[... E^2] is the quadratic form
  //    of w with the I4 block conditioned on (l_i, l_k), whose symmetry in (j, l) halves the work.
  if (m_.regime == Regime::Online) {
    const double noise = m_.noise;
    loop_impl(K * (K + 1) / 2, threads, par, ws_, [&](int p, double* ws) {
      int i = 0, rem = p;
      while (rem >= K - i) {
        rem -= K - i;
        ++i;
      }
      const int k = i + rem;
      double* out = ws;
      double* cab = out + static_cast<std::size_t>(u) * u;
      double* scratch = cab + 2 * u;
      const double caa[3] = {diag[i], om[i * u + k], diag[k]};
      for (int c = 0; c < u; ++c) {
        cab[2 * c] = om[c * u + i];
        cab[2 * c + 1] = om[c * u + k];
      }
      i4_block(g, caa, cab, om, u, acts_.data(), u, out, scratch);
      double t = 0.0;
      for (int j = 0; j < u; ++j) {
        const double* oj = out + static_cast<std::size_t>(j) * u;
        double s = 0.5 * w[j] * oj[j];
        for (int l = j + 1; l < u; ++l) s += w[l] * oj[l];
        t += 2.0 * w[j] * s;
      }
      if (noise > 0.0) {
        const double C2[4] = {caa[0], caa[1], caa[1], caa[2]};
        t += noise * j2(g, C2);
      }
      phi_[i * K + k] += lr * lr * a[i] * a[k] * t;
    });
  }
  // 5. Assemble dQ (symmetric), with the spherical projection if asked (phi_ keeps the unconstrained Phi).
  for (int i = 0; i < K; ++i)
    for (int k = i; k < K; ++k) {
      double v = phi_[i * K + k];
      if (m_.spherical) v = (i == k) ? 0.0 : v - 0.5 * y[i * K + k] * (phi_[i * K + i] + phi_[k * K + k]);
      dQ[i * K + k] = dQ[k * K + i] = v;
    }
  if (m_.spherical)
    for (int i = 0; i < K; ++i)
      for (int r = 0; r < M; ++r) dM[i * M + r] -= 0.5 * y[m_.offset_M() + i * M + r] * phi_[i * K + i];
  // 6. Second layer: da_i = lr_readout E[g(l_i) E].
  for (int i = 0; i < K; ++i) {
    double s = 0.0;
    if (m_.lr_readout != 0.0)
      for (int c = 0; c < u; ++c) s += w[c] * val_[i * u + c];
    da[i] = m_.lr_readout * s;
  }
}

}  // namespace twolayer

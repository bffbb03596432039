// The order-parameter right-hand side: one place for every activation (see dynamics.hpp for the equations).
#include "twolayer/dynamics.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <stdexcept>
#include <string>

#include "twolayer/gaussian.hpp"
#include "twolayer/parallel.hpp"
#include "twolayer/population.hpp"

namespace twolayer {

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
  A_.resize(K);
  B_.resize(K * u);
  val_.resize(K * u);
  psi_.resize(K * u);
  phi_.resize(K * K);
  j2_.resize(K * K);
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
  // Unit weights in the error: E = sum_u w_u act_u(l_u).
  for (int j = 0; j < K; ++j) w_[j] = -a[j];
  for (int r = 0; r < M; ++r) w_[K + r] = m_.v[r];
  const double* w = w_.data();
  const int threads = resolve_threads(n_threads);
  const bool par = threads > 1 && K >= 8;
  (void)par;

  // 1. Kernel gradients of I2(g, act_u; l_i, l_u) for every student i and unit u: A_i, B_iu and the values.
  //    Student-student pairs are evaluated once (i < u) and used from both sides.
#ifdef TWOLAYER_OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (par)
#endif
  for (int i = 0; i < K; ++i) {
    const double qi = om[i * u + i];
    for (int c = i; c < u; ++c) {
      if (c == i) {
        const Grad s = i2_self_grad(g, g, qi);
        B_[i * u + i] = w[i] * s.g[0];  // E[g'(l_i) l_c g(l_i)] = Omega_ic dS/dq
        val_[i * u + i] = s.v;
        continue;
      }
      const Grad k = i2_grad(g, acts_[c], qi, om[i * u + c], om[c * u + c]);
      val_[i * u + c] = k.v;
      B_[i * u + c] = w[c] * k.g[1];
      if (c < K) {  // the same pair seen from c: its own variance is the third argument
        val_[c * u + i] = k.v;
        B_[c * u + i] = w[i] * k.g[1];
      }
      // dI2/dC_ii is accumulated below from the stored pieces; keep it in psi_ as scratch.
      psi_[i * u + c] = k.g[0];
      if (c < K) psi_[c * u + i] = k.g[2];
    }
  }
  for (int i = 0; i < K; ++i) {
    double s = 0.0;
    for (int c = 0; c < u; ++c)
      if (c != i) s += w[c] * psi_[i * u + c];
    A_[i] = s;
  }
  // 2. Psi_ic = E[g'(l_i) l_c E] = 2 Omega_ic A_i + sum_u B_iu Omega_uc.
#ifdef TWOLAYER_OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) if (par)
#endif
  for (int i = 0; i < K; ++i) {
    double* row = &psi_[static_cast<std::size_t>(i) * u];
    const double* bi = &B_[static_cast<std::size_t>(i) * u];
    for (int c = 0; c < u; ++c) row[c] = 2.0 * om[i * u + c] * A_[i];
    for (int q = 0; q < u; ++q) {
      const double b = bi[q];
      const double* oq = om + static_cast<std::size_t>(q) * u;
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
      for (int c = 0; c < u; ++c) row[c] += b * oq[c];
    }
  }
  // 3. First-order terms.
  const double lr = m_.lr;
  double* dQ = dy;
  double* dM = dy + m_.offset_M();
  double* da = dy + m_.offset_a();
  for (int i = 0; i < K; ++i) {
    for (int k = i; k < K; ++k) phi_[i * K + k] = lr * (a[i] * psi_[i * u + k] + a[k] * psi_[k * u + i]);
    for (int r = 0; r < M; ++r) dM[i * M + r] = lr * a[i] * psi_[i * u + K + r];
  }
  // 4. Online: lr^2 a_i a_k (E[g'(l_i) g'(l_k) E^2] + Delta J2), over pairs i <= k.
  if (m_.regime == Regime::Online) {
    const int npairs = K * (K + 1) / 2;
    const double noise = m_.noise;
    const std::size_t wsize = static_cast<std::size_t>(2 * u + u * u + 2 * u);
    if (static_cast<int>(ws_.size()) < threads) ws_.resize(threads);
    for (auto& wsv : ws_)
      if (wsv.size() < wsize + static_cast<std::size_t>(u * u)) wsv.resize(wsize + static_cast<std::size_t>(u * u));
    std::exception_ptr error;
#ifdef TWOLAYER_OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (par)
#endif
    for (int p = 0; p < npairs; ++p) {
      try {
        int i = 0, rem = p;
        while (rem >= K - i) {
          rem -= K - i;
          ++i;
        }
        const int k = i + rem;
#ifdef TWOLAYER_OPENMP
        std::vector<double>& wsv = ws_[par ? omp_get_thread_num() : 0];
#else
        std::vector<double>& wsv = ws_[0];
#endif
        double* out = wsv.data();
        double* cab = out + static_cast<std::size_t>(u) * u;
        double* scratch = cab + 2 * u;
        const double caa[3] = {om[i * u + i], om[i * u + k], om[k * u + k]};
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
      } catch (...) {
#ifdef TWOLAYER_OPENMP
#pragma omp critical(twolayer_rhs_error)
#endif
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
  }
  // 5. Assemble dQ (symmetric), with the spherical projection if asked.
  for (int i = 0; i < K; ++i)
    for (int k = i; k < K; ++k) {
      double v = phi_[i * K + k];
      if (m_.spherical) v = (i == k) ? 0.0 : v - 0.5 * y[i * K + k] * (phi_[i * K + i] + phi_[k * K + k]);
      dQ[i * K + k] = dQ[k * K + i] = v;
    }
  if (m_.spherical)
    for (int i = 0; i < K; ++i)
      for (int r = 0; r < M; ++r) dM[i * M + r] -= 0.5 * y[m_.offset_M() + i * M + r] * phi_[i * K + i];
  // 6. Second layer.
  if (m_.lr_readout != 0.0) {
    for (int i = 0; i < K; ++i) {
      double s = 0.0;
      for (int c = 0; c < u; ++c) s += w[c] * val_[i * u + c];
      da[i] = m_.lr_readout * s;
    }
  } else {
    for (int i = 0; i < K; ++i) da[i] = 0.0;
  }
}

}  // namespace twolayer

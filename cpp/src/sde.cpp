// The SDE of online SGD: increment moments by quadrature and the Euler-Maruyama path simulator (see sde.hpp).
#include "twolayer/sde.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>

#include "twolayer/activation.hpp"
#include "twolayer/cancel.hpp"
#include "twolayer/parallel.hpp"
#include "twolayer/population.hpp"
#include "twolayer/rng.hpp"
#include "twolayer/target.hpp"

namespace twolayer {

namespace {
// In-place lower Cholesky factor of the symmetric n x n matrix A (row-major; the upper part is zeroed). A pivot
// at or below tol * (largest diagonal) is taken as 0 (semi-definite input: its column is dropped). Returns false
// when a pivot is clearly negative (the matrix is not positive semi-definite).
bool cholesky_psd(double* A, int n, double rel_tol) {
  double scale = 0.0;
  for (int i = 0; i < n; ++i) scale = std::max(scale, std::fabs(A[i * n + i]));
  const double tol = rel_tol * scale;
  for (int j = 0; j < n; ++j) {
    double s = A[j * n + j];
    for (int k = 0; k < j; ++k) s -= A[j * n + k] * A[j * n + k];
    if (!(s > tol)) {
      if (s < -1e3 * tol - 1e-300 || !std::isfinite(s)) return false;
      for (int i = j; i < n; ++i) A[i * n + j] = 0.0;
      continue;
    }
    const double r = std::sqrt(s);
    A[j * n + j] = r;
    for (int i = j + 1; i < n; ++i) {
      double t = A[i * n + j];
      for (int k = 0; k < j; ++k) t -= A[i * n + k] * A[j * n + k];
      A[i * n + j] = t / r;
    }
  }
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) A[i * n + j] = 0.0;
  return true;
}
}  // namespace

namespace {
// The Hermite polynomial He_n(l_j) in monomials: He_n = sum_m (-1)^m n! / (m! (n - 2m)! 2^m) l^(n - 2m).
IndicatorPoly hermite_monomials(int j, int n) {
  IndicatorPoly p;
  double c = 1.0;  // the m = 0 coefficient, then the recurrence c_{m+1} = -c_m (n-2m)(n-2m-1) / (2 (m+1))
  for (int m = 0; 2 * m <= n; ++m) {
    p.axpy(c, IndicatorPoly::monomial(j, n - 2 * m, false));
    c *= -static_cast<double>((n - 2 * m) * (n - 2 * m - 1)) / (2.0 * (m + 1));
  }
  return p;
}

bool is_piecewise_polynomial(Activation a) {
  return a == Activation::Linear || a == Activation::Quadratic || a == Activation::Relu || a == Activation::Step;
}

// sigma(l_j) and sigma'(l_j) as piecewise polynomials (step' is a delta: never asked for).
IndicatorPoly unit_poly(Activation a, int j) {
  switch (a) {
    case Activation::Linear: return IndicatorPoly::monomial(j, 1, false);
    case Activation::Quadratic: return IndicatorPoly::monomial(j, 2, false);
    case Activation::Relu: return IndicatorPoly::monomial(j, 1, true);
    case Activation::Step: return IndicatorPoly::monomial(j, 0, true);
    default: throw std::invalid_argument("unit_poly: not a piecewise-polynomial activation");
  }
}
IndicatorPoly unit_dpoly(Activation a, int j) {
  switch (a) {
    case Activation::Linear: return IndicatorPoly::constant(1.0);
    case Activation::Quadratic: return IndicatorPoly::monomial(j, 1, false, 2.0);
    case Activation::Relu: return IndicatorPoly::monomial(j, 0, true);
    default: throw std::invalid_argument("unit_dpoly: no derivative polynomial for this activation");
  }
}
}  // namespace

IncrementMoments::IncrementMoments(const OdeModel& model, std::vector<double> nodes, std::vector<double> weights)
    : m_(model), x_(std::move(nodes)), w_(std::move(weights)), u_(model.K + model.M) {
  validate_model(m_);
  if (m_.regime != Regime::Online) throw std::invalid_argument("regime: the SDE describes online SGD only");
  if (m_.student == Activation::Step)
    throw std::invalid_argument("activation: no diffusion term for 'step' students: sigma' = 0 almost everywhere, so "
                                "online SGD never moves them (the ODE's online drift would need the delta sigma')");
  const Activation teacher = m_.target ? Activation::Linear : m_.teacher;  // a target's committee part has v = 0
  exact_ = m_.student == Activation::Relu || teacher == Activation::Relu || teacher == Activation::Step;
  if (exact_) {
    if (!is_piecewise_polynomial(m_.student) || !is_piecewise_polynomial(teacher))
      throw std::invalid_argument(std::string("activation: the relu diffusion term is exact for relu with linear, "
                                              "quadratic, relu or step units (or a polynomial target); got '") +
                                  activation_name(m_.student) + "' students and '" + activation_name(m_.teacher) +
                                  "' teachers");
    if (u_ > IndicatorPoly::kMaxVars)
      throw std::invalid_argument("K + M: the relu diffusion term is exact (orthant moments) for K + M <= 4 units, got " +
                                  std::to_string(u_));
    if (m_.target) {
      for (const auto& [alpha, c] : m_.target->f) {
        IndicatorPoly term = IndicatorPoly::constant(c);
        for (int r = 0; r < m_.M; ++r)
          if (alpha[static_cast<std::size_t>(r)] > 0) term = term * hermite_monomials(m_.K + r, alpha[r]);
        target_poly_.axpy(1.0, term);
      }
    }
  } else if (x_.empty() || x_.size() != w_.size()) {
    throw std::invalid_argument("nodes: expected as many nodes as weights (at least one)");
  }
  const int K = m_.K, M = m_.M;
  nc_ = K * (K + 1) / 2 + K * M + (m_.lr_readout > 0.0 ? K : 0);
  const std::size_t u = static_cast<std::size_t>(u_), nc = static_cast<std::size_t>(nc_);
  om_.resize(u * u);
  L_.resize(u * u);
  z_.resize(u);
  g_.resize(u);
  dg_.resize(u);
  c0_.resize(nc);
  c1_.resize(nc);
  c2_.resize(nc);
  S_.resize(nc * nc);
  mu_.resize(nc);
  proj_.resize(nc * nc);
  tmp_.resize(nc * nc);
  idx_.resize(u);
  if (exact_) return;
  // The product rule once: every multi-index, the last unit fastest.
  const int n = static_cast<int>(x_.size());
  std::size_t count = 1;
  for (int q = 0; q < u_; ++q) {
    if (count > (std::size_t{1} << 26) / static_cast<std::size_t>(n))
      throw std::invalid_argument("n_nodes: n_nodes^(K + M) quadrature nodes exceed 2^26; use fewer nodes or units");
    count *= static_cast<std::size_t>(n);
  }
  grid_.resize(count * u);
  gw_.resize(count);
  std::fill(idx_.begin(), idx_.end(), 0);
  for (std::size_t p = 0; p < count; ++p) {
    double wt = 1.0;
    for (int q = 0; q < u_; ++q) {
      grid_[p * u + q] = x_[idx_[q]];
      wt *= w_[idx_[q]];
    }
    gw_[p] = wt;
    int q = u_ - 1;
    while (q >= 0 && ++idx_[q] == n) idx_[q--] = 0;
  }
}

void IncrementMoments::raw_quadrature(const double* y) {
  const int K = m_.K, M = m_.M, u = u_, nc = nc_;
  const double* a = y + m_.offset_a();
  const double lr = m_.lr, lra = m_.lr_readout, s = std::sqrt(m_.noise);
  std::fill(S_.begin(), S_.end(), 0.0);
  std::fill(mu_.begin(), mu_.end(), 0.0);
  const std::size_t n_points = gw_.size();
  for (std::size_t p = 0; p < n_points; ++p) {
    const double wt = gw_[p];
    const double* xp = grid_.data() + p * u;
    for (int q = 0; q < u; ++q) {
      double t = 0.0;
      for (int c = 0; c <= q; ++c) t += L_[q * u + c] * xp[c];
      z_[q] = t;
    }
    double e = 0.0;  // noiseless error y* - f at this node
    for (int i = 0; i < K; ++i) {
      g_[i] = sigma(m_.student, z_[i]);
      dg_[i] = dsigma(m_.student, z_[i]);
      e -= a[i] * g_[i];
    }
    if (m_.target) e += m_.target->eval(z_.data() + K);
    else
      for (int r = 0; r < M; ++r) e += m_.v[r] * sigma(m_.teacher, z_[K + r]);
    // xi_alpha = c0 + c1 zeta + c2 zeta^2 with E = e + s zeta.
    int c = 0;
    for (int i = 0; i < K; ++i)
      for (int k = i; k < K; ++k, ++c) {
        const double f1 = lr * (a[i] * dg_[i] * z_[k] + a[k] * dg_[k] * z_[i]);
        const double f2 = lr * lr * a[i] * a[k] * dg_[i] * dg_[k];
        c0_[c] = f1 * e + f2 * e * e;
        c1_[c] = (f1 + 2.0 * f2 * e) * s;
        c2_[c] = f2 * s * s;
      }
    for (int i = 0; i < K; ++i)
      for (int r = 0; r < M; ++r, ++c) {
        const double f1 = lr * a[i] * dg_[i] * z_[K + r];
        c0_[c] = f1 * e;
        c1_[c] = f1 * s;
        c2_[c] = 0.0;
      }
    if (lra > 0.0)
      for (int i = 0; i < K; ++i, ++c) {
        c0_[c] = lra * g_[i] * e;
        c1_[c] = lra * g_[i] * s;
        c2_[c] = 0.0;
      }
    // E_zeta: E[zeta] = E[zeta^3] = 0, E[zeta^2] = 1, E[zeta^4] = 3.
    for (int al = 0; al < nc; ++al) {
      mu_[al] += wt * (c0_[al] + c2_[al]);
      const double a0 = c0_[al], a1 = c1_[al], a2 = c2_[al];
      double* row = S_.data() + static_cast<std::size_t>(al) * nc;
      for (int be = al; be < nc; ++be)
        row[be] += wt * (a0 * c0_[be] + a1 * c1_[be] + a0 * c2_[be] + a2 * c0_[be] + 3.0 * a2 * c2_[be]);
    }
  }
}

void IncrementMoments::raw_exact(const double* y) {
  const int K = m_.K, M = m_.M, nc = nc_;
  const double* a = y + m_.offset_a();
  const double lr = m_.lr, lra = m_.lr_readout, s = std::sqrt(m_.noise);
  IndicatorExpectation E(om_.data(), u_);
  std::vector<IndicatorPoly> g(static_cast<std::size_t>(K)), dg(static_cast<std::size_t>(K));
  IndicatorPoly e = m_.target ? target_poly_ : IndicatorPoly();
  for (int r = 0; r < M && !m_.target; ++r) e.axpy(m_.v[r], unit_poly(m_.teacher, K + r));
  for (int i = 0; i < K; ++i) {
    g[i] = unit_poly(m_.student, i);
    dg[i] = unit_dpoly(m_.student, i);
    e.axpy(-a[i], g[i]);
  }
  const IndicatorPoly e2 = e * e;
  // xi_alpha = c0 + c1 zeta + c2 zeta^2 as piecewise polynomials.
  std::vector<IndicatorPoly> c0(static_cast<std::size_t>(nc)), c1(c0), c2(c0);
  int c = 0;
  for (int i = 0; i < K; ++i)
    for (int k = i; k < K; ++k, ++c) {
      IndicatorPoly f1 = dg[i] * IndicatorPoly::monomial(k, 1, false, lr * a[i]);
      f1.axpy(1.0, dg[k] * IndicatorPoly::monomial(i, 1, false, lr * a[k]));
      IndicatorPoly f2 = dg[i] * dg[k];
      IndicatorPoly f2e = f2 * e;
      c0[c] = f1 * e;
      c0[c].axpy(lr * lr * a[i] * a[k], f2 * e2);
      c1[c].axpy(s, f1);
      c1[c].axpy(2.0 * s * lr * lr * a[i] * a[k], f2e);
      c2[c].axpy(s * s * lr * lr * a[i] * a[k], f2);
    }
  for (int i = 0; i < K; ++i)
    for (int r = 0; r < M; ++r, ++c) {
      const IndicatorPoly f1 = dg[i] * IndicatorPoly::monomial(K + r, 1, false, lr * a[i]);
      c0[c] = f1 * e;
      c1[c].axpy(s, f1);
    }
  if (lra > 0.0)
    for (int i = 0; i < K; ++i, ++c) {
      c0[c].axpy(lra, g[i] * e);
      c1[c].axpy(s * lra, g[i]);
    }
  // E_zeta: E[zeta] = E[zeta^3] = 0, E[zeta^2] = 1, E[zeta^4] = 3.
  for (int al = 0; al < nc; ++al) {
    IndicatorPoly m = c0[al];
    m.axpy(1.0, c2[al]);
    mu_[al] = E(m);
    for (int be = al; be < nc; ++be) {
      IndicatorPoly b0 = c0[be], b2 = c0[be];
      b0.axpy(1.0, c2[be]);
      b2.axpy(3.0, c2[be]);
      IndicatorPoly prod = c0[al] * b0;
      prod.axpy(1.0, c1[al] * c1[be]);
      prod.axpy(1.0, c2[al] * b2);
      S_[static_cast<std::size_t>(al) * nc + be] = E(prod);
    }
  }
}

bool IncrementMoments::operator()(const double* y, double* mean, double* cov) {
  const int K = m_.K, M = m_.M, u = u_, nc = nc_;
  const double* Q = y;
  const double* Mo = y + m_.offset_M();
  for (int i = 0; i < K; ++i) {
    for (int k = 0; k < K; ++k) om_[i * u + k] = Q[i * K + k];
    for (int r = 0; r < M; ++r) om_[i * u + K + r] = om_[(K + r) * u + i] = Mo[i * M + r];
  }
  for (int r = 0; r < M; ++r)
    for (int s = 0; s < M; ++s) om_[(K + r) * u + K + s] = m_.P[r * M + s];
  std::copy(om_.begin(), om_.end(), L_.begin());
  if (!cholesky_psd(L_.data(), u, 1e-13)) return false;
  if (exact_)
    raw_exact(y);
  else
    raw_quadrature(y);
  for (int al = 0; al < nc; ++al)
    for (int be = al; be < nc; ++be) {
      const double v = S_[al * nc + be] - mu_[al] * mu_[be];
      S_[al * nc + be] = S_[be * nc + al] = v;
    }
  if (!m_.spherical) {
    std::copy(mu_.begin(), mu_.end(), mean);
    std::copy(S_.begin(), S_.end(), cov);
    return true;
  }
  // Spherical: xi -> Pi xi (linear), mean Pi mu, covariance Pi S Pi^T.
  std::fill(proj_.begin(), proj_.end(), 0.0);
  auto diag_comp = [K](int i) { return i * K - i * (i - 1) / 2; };  // index of Q_ii among the i <= k pairs
  int c = 0;
  for (int i = 0; i < K; ++i)
    for (int k = i; k < K; ++k, ++c) {
      if (i == k) continue;  // Q_ii is fixed: its row stays 0
      proj_[c * nc + c] = 1.0;
      proj_[c * nc + diag_comp(i)] -= 0.5 * Q[i * K + k];
      proj_[c * nc + diag_comp(k)] -= 0.5 * Q[i * K + k];
    }
  for (int i = 0; i < K; ++i)
    for (int r = 0; r < M; ++r, ++c) {
      proj_[c * nc + c] = 1.0;
      proj_[c * nc + diag_comp(i)] -= 0.5 * Mo[i * M + r];
    }
  for (; c < nc; ++c) proj_[c * nc + c] = 1.0;
  for (int al = 0; al < nc; ++al) {
    double t = 0.0;
    for (int be = 0; be < nc; ++be) t += proj_[al * nc + be] * mu_[be];
    mean[al] = t;
    for (int be = 0; be < nc; ++be) {
      double v = 0.0;
      for (int g = 0; g < nc; ++g) v += proj_[al * nc + g] * S_[g * nc + be];
      tmp_[al * nc + be] = v;
    }
  }
  for (int al = 0; al < nc; ++al)
    for (int be = 0; be < nc; ++be) {
      double v = 0.0;
      for (int g = 0; g < nc; ++g) v += tmp_[al * nc + g] * proj_[be * nc + g];
      cov[al * nc + be] = v;
    }
  return true;
}

namespace {

// One path: Euler-Maruyama with its own workspace.
class Path {
 public:
  Path(const SdeSpec& sp, std::uint32_t run, SdeOut& out)
      : sp_(sp), rhs_(sp.model), mom_(sp.model, sp.nodes, sp.weights), out_(out), stream_{sp.seed, run, kSdeStream} {
    const int nc = mom_.n_components();
    nc_ = nc;
    y_.resize(sp.model.state_size());
    f_.resize(y_.size());
    mean_.resize(static_cast<std::size_t>(nc));
    cov_.resize(static_cast<std::size_t>(nc) * nc);
    dz_.resize(static_cast<std::size_t>(nc));
    buf_.resize(static_cast<std::size_t>(nc) * kBufSteps);
  }

  void go(const double* y0, std::atomic<long long>* progress) {
    std::copy(y0, y0 + y_.size(), y_.begin());
    const OdeModel& m = sp_.model;
    const int K = m.K, M = m.M;
    const double sq = std::sqrt(sp_.dt), inv_d = 1.0 / sp_.d;
    std::size_t next = 0;
    double r_prev = rhs_.risk(y_.data());
    const double thr = std::max(sp_.risk_tol, sp_.risk_rtol >= 0.0 ? sp_.risk_rtol * r_prev : -1.0);
    long long reported = 0;
    for (long long step = 0;; ++step) {
      const bool at_record = next < sp_.record_steps.size() && sp_.record_steps[next] == step;
      const double r = step == 0 ? r_prev : (thr >= 0.0 || at_record) ? rhs_.risk(y_.data()) : 0.0;
      if (!std::isfinite(r)) return stop(1, step);
      const bool crossed = thr >= 0.0 && r <= thr;
      if (crossed || at_record) {
        record(r);
        if (!crossed) ++next;
      }
      if (crossed) {
        out_.status = 3;
        const double t = step * sp_.dt;
        out_.stop_time = step == 0 ? 0.0 : t - sp_.dt * (thr - r) / (r_prev - r);
        return;
      }
      if (step == sp_.steps) break;
      if ((step & 255) == 0) {
        if (cancel_requested()) return stop(2, step);
        if (progress) {
          progress->fetch_add(step - reported, std::memory_order_relaxed);
          reported = step;
        }
      }
      r_prev = r;
      // y += F dt + sqrt(dt / d) chol(Cov xi) z
      rhs_(y_.data(), f_.data(), 1);
      if (!mom_(y_.data(), mean_.data(), cov_.data())) return stop(1, step);
      if (!cholesky_psd(cov_.data(), nc_, 1e-13)) return stop(1, step);
      const long long slot = step % kBufSteps;
      if (slot == 0) rng::gaussians(stream_, static_cast<std::uint64_t>(step) * nc_, buf_.size(), buf_.data());
      const double* z = buf_.data() + slot * nc_;
      for (int al = 0; al < nc_; ++al) {
        double t = 0.0;
        for (int be = 0; be <= al; ++be) t += cov_[al * nc_ + be] * z[be];
        dz_[al] = sq * std::sqrt(inv_d) * t;
      }
      for (std::size_t q = 0; q < y_.size(); ++q) y_[q] += sp_.dt * f_[q];
      int c = 0;
      for (int i = 0; i < K; ++i)
        for (int k = i; k < K; ++k, ++c) {
          y_[i * K + k] += dz_[c];
          if (k != i) y_[k * K + i] = y_[i * K + k];
        }
      for (int i = 0; i < K; ++i)
        for (int rr = 0; rr < M; ++rr, ++c) y_[m.offset_M() + i * M + rr] += dz_[c];
      if (m.lr_readout > 0.0)
        for (int i = 0; i < K; ++i, ++c) y_[m.offset_a() + i] += dz_[c];
      for (double v : y_)
        if (!std::isfinite(v) || std::fabs(v) > 1e12) return stop(1, step + 1);
    }
    if (progress) progress->fetch_add(sp_.steps - reported, std::memory_order_relaxed);
  }

 private:
  static constexpr long long kBufSteps = 256;

  void stop(int status, long long step) {
    out_.status = status;
    out_.stop_time = step * sp_.dt;
  }

  void record(double r) {
    const OdeModel& m = sp_.model;
    const std::size_t t = out_.recorded, KK = static_cast<std::size_t>(m.K) * m.K,
                      KM = static_cast<std::size_t>(m.K) * m.M;
    std::copy(y_.begin(), y_.begin() + KK, out_.Q + t * KK);
    std::copy(y_.begin() + KK, y_.begin() + KK + KM, out_.M + t * KM);
    std::copy(y_.begin() + KK + KM, y_.end(), out_.a + t * m.K);
    out_.risk[t] = r;
    out_.recorded = t + 1;
  }

  const SdeSpec& sp_;
  OdeRhs rhs_;
  IncrementMoments mom_;
  SdeOut& out_;
  rng::StreamId stream_;
  int nc_ = 0;
  std::vector<double> y_, f_, mean_, cov_, dz_, buf_;
};

}  // namespace

void sde_simulate(const SdeSpec& sp, const double* y0, std::size_t y0_stride, const std::uint32_t* runs,
                  std::size_t n_paths, SdeOut* out, int n_threads, std::atomic<long long>* progress) {
  if (sp.d < 1) throw std::invalid_argument("d: must be positive");
  if (!(sp.dt > 0.0) || !std::isfinite(sp.dt)) throw std::invalid_argument("dt: must be a finite number > 0");
  long long prev = -1;
  for (long long s : sp.record_steps) {
    if (s <= prev || s > sp.steps) throw std::invalid_argument("record_steps: must increase strictly within [0, steps]");
    prev = s;
  }
  IncrementMoments check(sp.model, sp.nodes, sp.weights);  // validates the model and the activations
  (void)check;
  std::exception_ptr error;
  std::mutex error_mutex;
  const int threads = resolve_threads(n_threads);
  (void)threads;
#ifdef TWOLAYER_OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1 && n_paths > 1)
#endif
  for (std::ptrdiff_t j = 0; j < static_cast<std::ptrdiff_t>(n_paths); ++j) {
    const std::size_t jj = static_cast<std::size_t>(j);
    out[jj].recorded = 0;
    out[jj].status = 0;
    out[jj].stop_time = std::numeric_limits<double>::quiet_NaN();
    if (cancel_requested()) {
      out[jj].status = 2;
      out[jj].stop_time = 0.0;
      continue;
    }
    try {
      Path path(sp, runs[jj], out[jj]);
      path.go(y0 + jj * y0_stride, progress);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace twolayer

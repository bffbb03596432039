// The SDE of online SGD: increment moments by quadrature and the Euler-Maruyama path simulator (see sde.hpp).
#include "twolayer/sde.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

#include "twolayer/activation.hpp"
#include "twolayer/cancel.hpp"
#include "twolayer/divergence.hpp"
#include "twolayer/gaussian.hpp"
#include "twolayer/parallel.hpp"
#include "twolayer/population.hpp"
#include "twolayer/progress.hpp"
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
    // a smooth (non-piecewise-polynomial) block beside the relu/step units: Gauss-Hermite over it (mixed)
    if (!is_piecewise_polynomial(m_.student)) ng_ = m_.K;
    if (!is_piecewise_polynomial(teacher)) {
      ng_ = m_.M;
      g0_ = m_.K;
    }
    if (u_ - ng_ > IndicatorPoly::kMaxVars)
      throw std::invalid_argument("K + M: the relu diffusion term is exact (orthant moments over the relu, step, "
                                  "linear or quadratic units; a smooth block beside them by quadrature) for K + M <= 4 "
                                  "units, got " + std::to_string(u_ - ng_));
    if (ng_ > 0 && (x_.empty() || x_.size() != w_.size()))
      throw std::invalid_argument("nodes: expected as many nodes as weights (at least one)");
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
  nc_ = K * (K + 1) / 2 + K * M + (m_.lr_readout > 0.0 ? K : 0) + (m_.biased && m_.lr_bias > 0.0 ? K : 0);
  const std::size_t u = static_cast<std::size_t>(u_), nc = static_cast<std::size_t>(nc_);
  om_.resize(u * u);
  L_.resize(u * u);
  z_.resize(u);
  zc_.resize(u);
  mean_.assign(u, 0.0);
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
  const int dims = exact_ ? ng_ : u_;  // the quadrature's dimensions
  if (dims == 0) return;
  // The product rule once: every multi-index, the last unit fastest.
  const int n = static_cast<int>(x_.size());
  std::size_t count = 1;
  for (int q = 0; q < dims; ++q) {
    if (count > (std::size_t{1} << 26) / static_cast<std::size_t>(n))
      throw std::invalid_argument("n_nodes: n_nodes^(K + M) quadrature nodes exceed 2^26; use fewer nodes or units");
    count *= static_cast<std::size_t>(n);
  }
  // reserved and appended, not zero-filled first: a single pass over up to 2 GiB, with Ctrl-C checked per point
  grid_.reserve(count * static_cast<std::size_t>(dims));
  gw_.reserve(count);
  std::fill(idx_.begin(), idx_.end(), 0);
  for (std::size_t p = 0; p < count; ++p) {
    throw_if_cancelled();
    double wt = 1.0;
    for (int q = 0; q < dims; ++q) {
      grid_.push_back(x_[idx_[q]]);
      wt *= w_[idx_[q]];
    }
    gw_.push_back(wt);
    int q = dims - 1;
    while (q >= 0 && ++idx_[q] == n) idx_[q--] = 0;
  }
}

void IncrementMoments::raw_quadrature(const double* y) {
  const int K = m_.K, M = m_.M, u = u_, nc = nc_;
  const double* a = y + m_.offset_a();
  const double lr = m_.lr, lra = m_.lr_readout, s = std::sqrt(m_.noise);
  const bool biased = m_.biased;
  const double lrb = biased ? m_.lr_bias : 0.0;
  if (biased) means(y, mean_.data());
  // l = c + (b, b*) with the centred fields c = L x (zc_; without biases the same as z_)
  const double* zc = biased ? zc_.data() : z_.data();
  std::fill(S_.begin(), S_.end(), 0.0);
  std::fill(mu_.begin(), mu_.end(), 0.0);
  const std::size_t n_points = gw_.size();
  for (std::size_t p = 0; p < n_points; ++p) {
    throw_if_cancelled();  // up to 2^26 points: seconds
    const double wt = gw_[p];
    const double* xp = grid_.data() + p * u;
    for (int q = 0; q < u; ++q) {
      double t = 0.0;
      for (int c = 0; c <= q; ++c) t += L_[q * u + c] * xp[c];
      z_[q] = t;
    }
    if (biased)
      for (int q = 0; q < u; ++q) {
        zc_[q] = z_[q];
        z_[q] += mean_[q];
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
        const double f1 = lr * (a[i] * dg_[i] * zc[k] + a[k] * dg_[k] * zc[i]);
        const double f2 = lr * lr * a[i] * a[k] * dg_[i] * dg_[k];
        c0_[c] = f1 * e + f2 * e * e;
        c1_[c] = (f1 + 2.0 * f2 * e) * s;
        c2_[c] = f2 * s * s;
      }
    for (int i = 0; i < K; ++i)
      for (int r = 0; r < M; ++r, ++c) {
        const double f1 = lr * a[i] * dg_[i] * zc[K + r];
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
    if (lrb > 0.0)
      for (int i = 0; i < K; ++i, ++c) {
        const double f1 = lrb * a[i] * dg_[i];
        c0_[c] = f1 * e;
        c1_[c] = f1 * s;
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
  // l = c + (b, b*): the orthant moments see the means; xi_Q and xi_M carry the centred fields c = l - (b, b*)
  means(y, mean_.data());
  std::fill(mu_.begin(), mu_.end(), 0.0);
  std::fill(S_.begin(), S_.end(), 0.0);
  if (ng_ == 0) return exact_terms(y, 1.0, om_.data(), m_.biased ? mean_.data() : nullptr, nullptr);
  // Mixed: the smooth block g = [g0, g0 + ng) by Gauss-Hermite, l_g = mu_g + Lg u (Omega_gg = Lg Lg^T), and the
  // piecewise-polynomial block x exactly given it: N(mu_x + B u, Omega_xx - B B^T), B = Omega_xg Lg^-T.
  const int u = u_, ng = ng_, nx = u_ - ng_, g0 = g0_, x0 = g0_ == 0 ? ng_ : 0;
  std::vector<double> Lg(static_cast<std::size_t>(ng) * ng), B(static_cast<std::size_t>(nx) * ng),
      Cx(static_cast<std::size_t>(nx) * nx), mx(static_cast<std::size_t>(nx)), zg(static_cast<std::size_t>(ng));
  for (int a = 0; a < ng; ++a)
    for (int b = 0; b < ng; ++b) Lg[a * ng + b] = om_[(g0 + a) * u + g0 + b];
  cholesky_psd(Lg.data(), ng, 1e-13);  // Omega is PSD (factor() checked it)
  for (int r = 0; r < nx; ++r)
    for (int a = 0; a < ng; ++a) {  // forward substitution of Lg B_r^T = Omega_gx_r (a zero pivot: column 0)
      double t = om_[(x0 + r) * u + g0 + a];
      for (int b = 0; b < a; ++b) t -= Lg[a * ng + b] * B[r * ng + b];
      B[r * ng + a] = Lg[a * ng + a] > 0.0 ? t / Lg[a * ng + a] : 0.0;
    }
  for (int r = 0; r < nx; ++r)
    for (int q = 0; q < nx; ++q) {
      double t = om_[(x0 + r) * u + x0 + q];
      for (int a = 0; a < ng; ++a) t -= B[r * ng + a] * B[q * ng + a];
      Cx[r * nx + q] = t;
    }
  for (int r = 0; r < nx; ++r) Cx[r * nx + r] = std::max(Cx[r * nx + r], 0.0);
  const std::size_t n_points = gw_.size();
  for (std::size_t p = 0; p < n_points; ++p) {
    throw_if_cancelled();
    const double* xp = grid_.data() + p * ng;
    for (int a = 0; a < ng; ++a) {
      double t = mean_[g0 + a];
      for (int b = 0; b <= a; ++b) t += Lg[a * ng + b] * xp[b];
      zg[a] = t;
    }
    for (int r = 0; r < nx; ++r) {
      double t = mean_[x0 + r];
      for (int a = 0; a < ng; ++a) t += B[r * ng + a] * xp[a];
      mx[r] = t;
    }
    exact_terms(y, gw_[p], Cx.data(), mx.data(), zg.data());
  }
}

// Adds wt E[xi] and wt E[xi xi^T] (upper triangle) over the piecewise-polynomial fields x ~ N(mx, Cx) into mu_, S_;
// zg (mixed only): the values of the smooth block's fields, constants here.
void IncrementMoments::exact_terms(const double* y, double wt, const double* Cx, const double* mx, const double* zg) {
  const int K = m_.K, M = m_.M, nc = nc_, g0 = g0_, ng = ng_;
  const double* a = y + m_.offset_a();
  const double lr = m_.lr, lra = m_.lr_readout, s = std::sqrt(m_.noise);
  const double lrb = m_.biased ? m_.lr_bias : 0.0;
  IndicatorExpectation E(Cx, u_ - ng, mx);
  const bool smooth_student = ng > 0 && g0 == 0;
  auto in_g = [&](int j) { return ng > 0 && j >= g0 && j < g0 + ng; };
  auto var = [&](int j) { return smooth_student ? j - K : j; };  // the x variable of field j
  auto centred = [&](int j, double c) {
    if (in_g(j)) return IndicatorPoly::constant(c * (zg[j - g0] - mean_[j]));
    IndicatorPoly p = IndicatorPoly::monomial(var(j), 1, false, c);
    p.axpy(-c * mean_[j], IndicatorPoly::constant(1.0));
    return p;
  };
  auto unit = [&](Activation act, int j) {
    return in_g(j) ? IndicatorPoly::constant(sigma(act, zg[j - g0])) : unit_poly(act, var(j));
  };
  auto dunit = [&](Activation act, int j) {
    return in_g(j) ? IndicatorPoly::constant(dsigma(act, zg[j - g0])) : unit_dpoly(act, var(j));
  };
  std::vector<IndicatorPoly> g(static_cast<std::size_t>(K)), dg(static_cast<std::size_t>(K));
  IndicatorPoly e = m_.target ? target_poly_ : IndicatorPoly();
  for (int r = 0; r < M && !m_.target; ++r) e.axpy(m_.v[r], unit(m_.teacher, K + r));
  for (int i = 0; i < K; ++i) {
    g[i] = unit(m_.student, i);
    dg[i] = dunit(m_.student, i);
    e.axpy(-a[i], g[i]);
  }
  const IndicatorPoly e2 = e * e;
  // xi_alpha = c0 + c1 zeta + c2 zeta^2 as piecewise polynomials.
  std::vector<IndicatorPoly> c0(static_cast<std::size_t>(nc)), c1(c0), c2(c0);
  int c = 0;
  for (int i = 0; i < K; ++i)
    for (int k = i; k < K; ++k, ++c) {
      IndicatorPoly f1 = dg[i] * centred(k, lr * a[i]);
      f1.axpy(1.0, dg[k] * centred(i, lr * a[k]));
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
      const IndicatorPoly f1 = dg[i] * centred(K + r, lr * a[i]);
      c0[c] = f1 * e;
      c1[c].axpy(s, f1);
    }
  if (lra > 0.0)
    for (int i = 0; i < K; ++i, ++c) {
      c0[c].axpy(lra, g[i] * e);
      c1[c].axpy(s * lra, g[i]);
    }
  if (lrb > 0.0)
    for (int i = 0; i < K; ++i, ++c) {
      c0[c].axpy(lrb * a[i], dg[i] * e);
      c1[c].axpy(s * lrb * a[i], dg[i]);
    }
  // E_zeta: E[zeta] = E[zeta^3] = 0, E[zeta^2] = 1, E[zeta^4] = 3.
  for (int al = 0; al < nc; ++al) {
    IndicatorPoly m = c0[al];
    m.axpy(1.0, c2[al]);
    mu_[al] += wt * E(m);
    for (int be = al; be < nc; ++be) {
      IndicatorPoly b0 = c0[be], b2 = c0[be];
      b0.axpy(1.0, c2[be]);
      b2.axpy(3.0, c2[be]);
      IndicatorPoly prod = c0[al] * b0;
      prod.axpy(1.0, c1[al] * c1[be]);
      prod.axpy(1.0, c2[al] * b2);
      S_[static_cast<std::size_t>(al) * nc + be] += wt * E(prod);
    }
  }
}

bool IncrementMoments::factor(const double* y, double* L) {
  const int K = m_.K, M = m_.M, u = u_;
  const double* Q = y;
  const double* Mo = y + m_.offset_M();
  for (int i = 0; i < K; ++i) {
    for (int k = 0; k < K; ++k) om_[i * u + k] = Q[i * K + k];
    for (int r = 0; r < M; ++r) om_[i * u + K + r] = om_[(K + r) * u + i] = Mo[i * M + r];
  }
  for (int r = 0; r < M; ++r)
    for (int s = 0; s < M; ++s) om_[(K + r) * u + K + s] = m_.P[r * M + s];
  std::copy(om_.begin(), om_.end(), L);
  return cholesky_psd(L, u, 1e-13);
}

void IncrementMoments::means(const double* y, double* out) const {
  const int K = m_.K, M = m_.M;
  for (int i = 0; i < K; ++i) out[i] = m_.biased ? y[m_.offset_b() + i] : 0.0;
  for (int r = 0; r < M; ++r) out[K + r] = m_.biased ? m_.teacher_bias[r] : 0.0;
}

bool IncrementMoments::operator()(const double* y, double* mean, double* cov) {
  if (!factor(y, L_.data())) return false;
  if (exact_)
    raw_exact(y);
  else
    raw_quadrature(y);
  finish(y, mean, cov);
  return true;
}

void IncrementMoments::finish(const double* y, double* mean, double* cov) {
  const int K = m_.K, M = m_.M, nc = nc_;
  const double* Q = y;
  const double* Mo = y + m_.offset_M();
  for (int al = 0; al < nc; ++al)
    for (int be = al; be < nc; ++be) {
      const double v = S_[al * nc + be] - mu_[al] * mu_[be];
      S_[al * nc + be] = S_[be * nc + al] = v;
    }
  if (!m_.spherical) {
    std::copy(mu_.begin(), mu_.end(), mean);
    std::copy(S_.begin(), S_.end(), cov);
    return;
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
    use_rhs_ = !sp.model.biased && mom_.smooth_dims() == 0;
    if (use_rhs_) f_.resize(y_.size());
    mean_.resize(static_cast<std::size_t>(nc));
    cov_.resize(static_cast<std::size_t>(nc) * nc);
    dz_.resize(static_cast<std::size_t>(nc));
    buf_.resize(static_cast<std::size_t>(nc) * kBufSteps);
  }

  void go(const double* y0, std::atomic<long long>* progress) {
    std::copy(y0, y0 + y_.size(), y_.begin());
    const OdeModel& m = sp_.model;
    const int K = m.K, M = m.M;
    const double bound = divergence_bound(y0, y_.size(), m.P.data(), m.P.size(), m.v.data(), m.v.size());
    std::vector<double> scratch(static_cast<std::size_t>(K + M) * (K + M));
    const double sq = std::sqrt(sp_.dt), inv_d = 1.0 / sp_.d;
    std::size_t next = 0;
    double r_prev = rhs_.risk(y_.data());
    const double thr = std::max(sp_.risk_tol, sp_.risk_rtol >= 0.0 ? sp_.risk_rtol * r_prev : -1.0);
    ProgressReporter report(progress);
    for (long long step = 0;; ++step) {
      const bool at_record = next < sp_.record_steps.size() && sp_.record_steps[next] == step;
      const double r = step == 0 ? r_prev : (thr >= 0.0 || at_record) ? rhs_.risk(y_.data()) : 0.0;
      if (!std::isfinite(r)) return stop(1, step, kRiskNotFinite);
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
      if (cancel_requested()) return stop(2, step);  // every step: one can take milliseconds
      r_prev = r;
      // y += F dt + sqrt(dt / d) chol(Cov xi) z, F = E[xi] (the exact moments': the ODE's right-hand side), or
      // OdeRhs itself where it was before biases (bitwise as then)
      if (!mom_(y_.data(), mean_.data(), cov_.data())) return stop(1, step, kNotPsd);
      if (use_rhs_) rhs_(y_.data(), f_.data(), 1);
      if (!cholesky_psd(cov_.data(), nc_, 1e-13)) return stop(1, step, kNotPsd);
      const long long slot = step % kBufSteps;
      if (slot == 0) rng::gaussians(stream_, static_cast<std::uint64_t>(step) * nc_, buf_.size(), buf_.data());
      const double* z = buf_.data() + slot * nc_;
      for (int al = 0; al < nc_; ++al) {
        double t = 0.0;
        for (int be = 0; be <= al; ++be) t += cov_[al * nc_ + be] * z[be];
        dz_[al] = (use_rhs_ ? 0.0 : sp_.dt * mean_[al]) + sq * std::sqrt(inv_d) * t;
      }
      if (use_rhs_)
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
      if (m.biased && m.lr_bias > 0.0)
        for (int i = 0; i < K; ++i, ++c) y_[m.offset_b() + i] += dz_[c];
      if (const int code = divergence_code(y_.data(), K, M, m.P.data(), bound, scratch.data()))
        return stop(1, step + 1, code);
      report.add(1);
    }
  }

 private:
  static constexpr long long kBufSteps = 256;

  void stop(int status, long long step, int reason = 0) {
    out_.status = status;
    out_.reason = reason;
    out_.stop_time = step * sp_.dt;
  }

  void record(double r) {
    const OdeModel& m = sp_.model;
    const std::size_t t = out_.recorded, KK = static_cast<std::size_t>(m.K) * m.K,
                      KM = static_cast<std::size_t>(m.K) * m.M;
    std::copy(y_.begin(), y_.begin() + KK, out_.Q + t * KK);
    std::copy(y_.begin() + KK, y_.begin() + KK + KM, out_.M + t * KM);
    std::copy(y_.begin() + KK + KM, y_.begin() + KK + KM + m.K, out_.a + t * m.K);
    if (m.biased) std::copy(y_.begin() + m.offset_b(), y_.begin() + m.offset_b() + m.K, out_.b + t * m.K);
    out_.risk[t] = r;
    out_.recorded = t + 1;
  }

  const SdeSpec& sp_;
  OdeRhs rhs_;
  IncrementMoments mom_;
  SdeOut& out_;
  rng::StreamId stream_;
  int nc_ = 0;
  bool use_rhs_ = false;  // the drift from OdeRhs (exact, no biases, no smooth block: as before biases existed)
  std::vector<double> y_, f_, mean_, cov_, dz_, buf_;
};

// W paths in SIMD lanes (quadrature moments): the Gauss-Hermite loop runs over the nodes with the lanes innermost;
// each lane is one path (its own stream, state and step count) and takes the next path when its own ends, so lanes
// never wait for each other. Every lane executes the same instructions whatever the other lanes hold (fixed W, no
// remainder loops, no FMA contraction in this file): a path is bitwise the same in any lane, block or thread.
#if defined(TWOLAYER_OPENMP)
#define SDE_LANES _Pragma("omp simd")
#else
#define SDE_LANES
#endif

class PathBlock {
 public:
  static constexpr int W = 8;

  PathBlock(const SdeSpec& sp, const double* y0, std::size_t y0_stride, const std::uint32_t* runs, SdeOut* out,
            std::atomic<std::size_t>& next_path, std::size_t n_paths)
      : sp_(sp), rhs_(sp.model), mom_(sp.model, sp.nodes, sp.weights), y0_(y0), y0_stride_(y0_stride), runs_(runs),
        out_(out), next_path_(next_path), n_paths_(n_paths) {
    const OdeModel& m = sp.model;
    K_ = m.K;
    M_ = m.M;
    u_ = mom_.n_units();
    nc_ = mom_.n_components();
    ss_ = static_cast<int>(m.state_size());
    const std::size_t u = static_cast<std::size_t>(u_), nc = static_cast<std::size_t>(nc_);
    y_.assign(W * static_cast<std::size_t>(ss_), 0.0);
    scratch_.assign(u * u, 0.0);
    L_.assign(u * u * W, 0.0);
    z_.assign(u * W, 0.0);
    zc_.assign(m.biased ? u * W : 0, 0.0);
    mb_.assign(m.biased ? u * W : 0, 0.0);
    ml_.assign(u, 0.0);
    g_.assign(u * W, 0.0);
    dg_.assign(u * W, 0.0);
    e_.assign(W, 0.0);
    a_.assign(static_cast<std::size_t>(K_) * W, 0.0);
    c0_.assign(nc * W, 0.0);
    c1_.assign(nc * W, 0.0);
    c2_.assign(nc * W, 0.0);
    mu_.assign(nc * W, 0.0);
    S_.assign(nc * nc * W, 0.0);
    Ll_.assign(u * u, 0.0);
    mean_.assign(nc, 0.0);
    cov_.assign(nc * nc, 0.0);
    buf_.assign(W * nc * static_cast<std::size_t>(kBufSteps), 0.0);
    zt_.assign(static_cast<std::size_t>(M_), 0.0);
  }

  // Ctrl-C is checked before every step and between the quadrature points of one (a step costs up to seconds at
  // K + M = 4): the lanes stop at the step they were about to take.
  void go(std::atomic<long long>* progress) {
    ProgressReporter report(progress);
    for (int l = 0; l < W; ++l) refill(l);
    for (;;) {
      bool any = false;
      for (int l = 0; l < W; ++l) any = any || lane_[l].active;
      if (!any) break;
      if (cancel_requested() || !moments()) {
        for (int l = 0; l < W; ++l)
          if (lane_[l].active) stop(l, 2, lane_[l].step);
        return;
      }
      for (int l = 0; l < W; ++l)
        if (lane_[l].active) advance(l);
      report.add(done_steps_);
      done_steps_ = 0;
    }
  }

 private:
  static constexpr long long kBufSteps = 64;
  struct Lane {
    bool active = false;
    std::size_t path = 0;
    long long step = 0;
    std::size_t next = 0;
    double r_prev = 0.0, thr = -1.0;
    double bound = 0.0;  // the path's divergence bound (divergence.hpp)
    rng::StreamId stream{0, 0, kSdeStream};
  };

  double* y(int l) { return y_.data() + static_cast<std::size_t>(l) * ss_; }

  // Takes paths until lane l holds one that needs a step (or none are left: the lane idles with a harmless state).
  void refill(int l) {
    for (;;) {
      const std::size_t j = next_path_.fetch_add(1, std::memory_order_relaxed);
      if (j >= n_paths_) {
        lane_[l].active = false;
        idle(l);
        return;
      }
      Lane& ln = lane_[l];
      ln = Lane{};
      ln.active = true;
      ln.path = j;
      ln.stream = {sp_.seed, runs_[j], kSdeStream};
      SdeOut& o = out_[j];
      o.recorded = 0;
      o.status = 0;
      o.reason = 0;
      o.stop_time = std::numeric_limits<double>::quiet_NaN();
      if (cancel_requested()) {
        stop(l, 2, 0);
        continue;
      }
      std::copy(y0_ + j * y0_stride_, y0_ + j * y0_stride_ + ss_, y(l));
      const OdeModel& m = sp_.model;
      ln.bound = divergence_bound(y(l), static_cast<std::size_t>(ss_), m.P.data(), m.P.size(), m.v.data(), m.v.size());
      ln.r_prev = rhs_.risk(y(l));
      ln.thr = std::max(sp_.risk_tol, sp_.risk_rtol >= 0.0 ? sp_.risk_rtol * ln.r_prev : -1.0);
      if (prepare(l)) return;
    }
  }

  // An idle lane computes on Omega = I, a = 0 (finite, discarded).
  void idle(int l) {
    const int u = u_;
    for (int q = 0; q < u; ++q)
      for (int c = 0; c < u; ++c) L_[(static_cast<std::size_t>(q) * u + c) * W + l] = q == c ? 1.0 : 0.0;
    for (int i = 0; i < K_; ++i) a_[static_cast<std::size_t>(i) * W + l] = 0.0;
    if (sp_.model.biased)
      for (int q = 0; q < u; ++q) mb_[static_cast<std::size_t>(q) * W + l] = 0.0;
  }

  void stop(int l, int status, long long step, int reason = 0) {
    SdeOut& o = out_[lane_[l].path];
    o.status = status;
    o.reason = reason;
    o.stop_time = step * sp_.dt;
    lane_[l].active = false;
  }

  void record(int l, double r) {
    const OdeModel& m = sp_.model;
    SdeOut& o = out_[lane_[l].path];
    const double* yl = y(l);
    const std::size_t t = o.recorded, KK = static_cast<std::size_t>(m.K) * m.K, KM = static_cast<std::size_t>(m.K) * m.M;
    std::copy(yl, yl + KK, o.Q + t * KK);
    std::copy(yl + KK, yl + KK + KM, o.M + t * KM);
    std::copy(yl + KK + KM, yl + KK + KM + m.K, o.a + t * m.K);
    if (m.biased) std::copy(yl + m.offset_b(), yl + m.offset_b() + m.K, o.b + t * m.K);
    o.risk[t] = r;
    o.recorded = t + 1;
  }

  // Records, checks the stop conditions of lane l at its current step and loads its Cholesky factor and second
  // layer into the lanes; false when the path has ended.
  bool prepare(int l) {
    Lane& ln = lane_[l];
    const long long step = ln.step;
    const bool at_record = ln.next < sp_.record_steps.size() && sp_.record_steps[ln.next] == step;
    const double r = step == 0 ? ln.r_prev : (ln.thr >= 0.0 || at_record) ? rhs_.risk(y(l)) : 0.0;
    if (!std::isfinite(r)) {
      stop(l, 1, step, kRiskNotFinite);
      return false;
    }
    const bool crossed = ln.thr >= 0.0 && r <= ln.thr;
    if (crossed || at_record) {
      record(l, r);
      if (!crossed) ++ln.next;
    }
    if (crossed) {
      SdeOut& o = out_[ln.path];
      o.status = 3;
      o.stop_time = step == 0 ? 0.0 : step * sp_.dt - sp_.dt * (ln.thr - r) / (ln.r_prev - r);
      ln.active = false;
      return false;
    }
    if (step == sp_.steps) {
      ln.active = false;
      return false;
    }
    ln.r_prev = r;
    if (!mom_.factor(y(l), Ll_.data())) {
      stop(l, 1, step, kNotPsd);
      return false;
    }
    const std::size_t uu = static_cast<std::size_t>(u_) * u_;
    for (std::size_t q = 0; q < uu; ++q) L_[q * W + l] = Ll_[q];
    const double* a = y(l) + sp_.model.offset_a();
    for (int i = 0; i < K_; ++i) a_[static_cast<std::size_t>(i) * W + l] = a[i];
    if (sp_.model.biased) {
      mom_.means(y(l), ml_.data());
      for (int q = 0; q < u_; ++q) mb_[static_cast<std::size_t>(q) * W + l] = ml_[q];
    }
    return true;
  }

  // sigma (and sigma') of units [q0, q1) in every lane.
  void units(Activation act, int q0, int q1, bool deriv) {
    for (int q = q0; q < q1; ++q) {
      const double* z = z_.data() + static_cast<std::size_t>(q) * W;
      double* g = g_.data() + static_cast<std::size_t>(q) * W;
      double* dg = dg_.data() + static_cast<std::size_t>(q) * W;
      switch (act) {
        case Activation::Linear:
          SDE_LANES for (int l = 0; l < W; ++l) g[l] = z[l];
          if (deriv) {
            SDE_LANES for (int l = 0; l < W; ++l) dg[l] = 1.0;
          }
          break;
        case Activation::Quadratic:
          SDE_LANES for (int l = 0; l < W; ++l) g[l] = z[l] * z[l];
          if (deriv) {
            SDE_LANES for (int l = 0; l < W; ++l) dg[l] = 2.0 * z[l];
          }
          break;
        default:
          for (int l = 0; l < W; ++l) g[l] = sigma(act, z[l]);
          if (deriv)
            for (int l = 0; l < W; ++l) dg[l] = dsigma(act, z[l]);
      }
    }
  }

  // Raw E[xi], E[xi xi^T] (upper triangle) of every lane by the Gauss-Hermite product rule (as raw_quadrature);
  // false when a cancellation cut them short.
  bool moments() {
    const OdeModel& m = sp_.model;
    const int K = K_, M = M_, u = u_, nc = nc_;
    const double lr = m.lr, lra = m.lr_readout, s = std::sqrt(m.noise);
    const bool biased = m.biased;
    const double lrb = biased ? m.lr_bias : 0.0;
    const double* zc_all = biased ? zc_.data() : z_.data();  // the centred fields (l minus the means)
    std::fill(mu_.begin(), mu_.end(), 0.0);
    std::fill(S_.begin(), S_.end(), 0.0);
    const std::vector<double>& grid = mom_.grid();
    const std::vector<double>& gw = mom_.grid_weights();
    const std::size_t n_points = gw.size();
    for (std::size_t p = 0; p < n_points; ++p) {
      if (cancel_requested()) return false;
      const double wt = gw[p];
      const double* xp = grid.data() + p * u;
      for (int q = 0; q < u; ++q) {
        double* z = z_.data() + static_cast<std::size_t>(q) * W;
        const double* Lq0 = L_.data() + static_cast<std::size_t>(q) * u * W;
        const double x0 = xp[0];
        SDE_LANES for (int l = 0; l < W; ++l) z[l] = Lq0[l] * x0;  // assigned, not zeroed then added (store forwarding)
        for (int c = 1; c <= q; ++c) {
          const double* Lqc = L_.data() + (static_cast<std::size_t>(q) * u + c) * W;
          const double x = xp[c];
          SDE_LANES for (int l = 0; l < W; ++l) z[l] += Lqc[l] * x;
        }
        if (biased) {
          double* zc = zc_.data() + static_cast<std::size_t>(q) * W;
          const double* mb = mb_.data() + static_cast<std::size_t>(q) * W;
          SDE_LANES for (int l = 0; l < W; ++l) {
            zc[l] = z[l];
            z[l] += mb[l];
          }
        }
      }
      units(m.student, 0, K, true);
      double* e = e_.data();
      if (m.target) {
        for (int l = 0; l < W; ++l) {
          for (int r = 0; r < M; ++r) zt_[r] = z_[static_cast<std::size_t>(K + r) * W + l];
          e[l] = m.target->eval(zt_.data());
        }
      } else {
        units(m.teacher, K, K + M, false);
        {
          const double v = m.v[0];
          const double* g = g_.data() + static_cast<std::size_t>(K) * W;
          SDE_LANES for (int l = 0; l < W; ++l) e[l] = v * g[l];
        }
        for (int r = 1; r < M; ++r) {
          const double v = m.v[r];
          const double* g = g_.data() + static_cast<std::size_t>(K + r) * W;
          SDE_LANES for (int l = 0; l < W; ++l) e[l] += v * g[l];
        }
      }
      for (int i = 0; i < K; ++i) {
        const double* g = g_.data() + static_cast<std::size_t>(i) * W;
        const double* a = a_.data() + static_cast<std::size_t>(i) * W;
        SDE_LANES for (int l = 0; l < W; ++l) e[l] -= a[l] * g[l];
      }
      int c = 0;
      for (int i = 0; i < K; ++i)
        for (int k = i; k < K; ++k, ++c) {
          const double *ai = a_.data() + static_cast<std::size_t>(i) * W, *ak = a_.data() + static_cast<std::size_t>(k) * W;
          const double *dgi = dg_.data() + static_cast<std::size_t>(i) * W, *dgk = dg_.data() + static_cast<std::size_t>(k) * W;
          const double *zi = zc_all + static_cast<std::size_t>(i) * W, *zk = zc_all + static_cast<std::size_t>(k) * W;
          double *p0 = c0_.data() + static_cast<std::size_t>(c) * W, *p1 = c1_.data() + static_cast<std::size_t>(c) * W,
                 *p2 = c2_.data() + static_cast<std::size_t>(c) * W;
          SDE_LANES for (int l = 0; l < W; ++l) {
            const double f1 = lr * (ai[l] * dgi[l] * zk[l] + ak[l] * dgk[l] * zi[l]);
            const double f2 = lr * lr * ai[l] * ak[l] * dgi[l] * dgk[l];
            p0[l] = f1 * e[l] + f2 * e[l] * e[l];
            p1[l] = (f1 + 2.0 * f2 * e[l]) * s;
            p2[l] = f2 * s * s;
          }
        }
      for (int i = 0; i < K; ++i)
        for (int r = 0; r < M; ++r, ++c) {
          const double* ai = a_.data() + static_cast<std::size_t>(i) * W;
          const double* dgi = dg_.data() + static_cast<std::size_t>(i) * W;
          const double* zr = zc_all + static_cast<std::size_t>(K + r) * W;
          double *p0 = c0_.data() + static_cast<std::size_t>(c) * W, *p1 = c1_.data() + static_cast<std::size_t>(c) * W,
                 *p2 = c2_.data() + static_cast<std::size_t>(c) * W;
          SDE_LANES for (int l = 0; l < W; ++l) {
            const double f1 = lr * ai[l] * dgi[l] * zr[l];
            p0[l] = f1 * e[l];
            p1[l] = f1 * s;
            p2[l] = 0.0;
          }
        }
      if (lra > 0.0)
        for (int i = 0; i < K; ++i, ++c) {
          const double* gi = g_.data() + static_cast<std::size_t>(i) * W;
          double *p0 = c0_.data() + static_cast<std::size_t>(c) * W, *p1 = c1_.data() + static_cast<std::size_t>(c) * W,
                 *p2 = c2_.data() + static_cast<std::size_t>(c) * W;
          SDE_LANES for (int l = 0; l < W; ++l) {
            p0[l] = lra * gi[l] * e[l];
            p1[l] = lra * gi[l] * s;
            p2[l] = 0.0;
          }
        }
      if (lrb > 0.0)
        for (int i = 0; i < K; ++i, ++c) {
          const double* ai = a_.data() + static_cast<std::size_t>(i) * W;
          const double* dgi = dg_.data() + static_cast<std::size_t>(i) * W;
          double *p0 = c0_.data() + static_cast<std::size_t>(c) * W, *p1 = c1_.data() + static_cast<std::size_t>(c) * W,
                 *p2 = c2_.data() + static_cast<std::size_t>(c) * W;
          SDE_LANES for (int l = 0; l < W; ++l) {
            const double f1 = lrb * ai[l] * dgi[l];
            p0[l] = f1 * e[l];
            p1[l] = f1 * s;
            p2[l] = 0.0;
          }
        }
      for (int al = 0; al < nc; ++al) {
        const double *a0 = c0_.data() + static_cast<std::size_t>(al) * W, *a1 = c1_.data() + static_cast<std::size_t>(al) * W,
                     *a2 = c2_.data() + static_cast<std::size_t>(al) * W;
        double* mu = mu_.data() + static_cast<std::size_t>(al) * W;
        SDE_LANES for (int l = 0; l < W; ++l) mu[l] += wt * (a0[l] + a2[l]);
        for (int be = al; be < nc; ++be) {
          const double *b0 = c0_.data() + static_cast<std::size_t>(be) * W, *b1 = c1_.data() + static_cast<std::size_t>(be) * W,
                       *b2 = c2_.data() + static_cast<std::size_t>(be) * W;
          double* S = S_.data() + (static_cast<std::size_t>(al) * nc + be) * W;
          SDE_LANES for (int l = 0; l < W; ++l)
            S[l] += wt * (a0[l] * b0[l] + a1[l] * b1[l] + a0[l] * b2[l] + a2[l] * b0[l] + 3.0 * a2[l] * b2[l]);
        }
      }
    }
    return true;
  }

  // One Euler-Maruyama step of lane l: y += E[Pi xi] dt + sqrt(dt / d) chol(Cov(Pi xi)) z, then the next step's
  // checks (or the next path).
  void advance(int l) {
    Lane& ln = lane_[l];
    const OdeModel& m = sp_.model;
    const int K = K_, M = M_, nc = nc_;
    double* yl = y(l);
    double* rm = mom_.raw_mean();
    double* rs = mom_.raw_second();
    for (int al = 0; al < nc; ++al) {
      rm[al] = mu_[static_cast<std::size_t>(al) * W + l];
      for (int be = al; be < nc; ++be) rs[al * nc + be] = S_[(static_cast<std::size_t>(al) * nc + be) * W + l];
    }
    mom_.finish(yl, mean_.data(), cov_.data());
    if (!cholesky_psd(cov_.data(), nc, 1e-13)) {
      stop(l, 1, ln.step, kNotPsd);
      return refill(l);
    }
    double* buf = buf_.data() + static_cast<std::size_t>(l) * nc * kBufSteps;
    const long long slot = ln.step % kBufSteps;
    if (slot == 0)
      rng::gaussians(ln.stream, static_cast<std::uint64_t>(ln.step) * nc, static_cast<std::size_t>(nc) * kBufSteps, buf);
    const double* zr = buf + slot * nc;
    const double sq = std::sqrt(sp_.dt / sp_.d);
    int c = 0;
    auto inc = [&](int al) {
      double t = 0.0;
      for (int be = 0; be <= al; ++be) t += cov_[al * nc + be] * zr[be];
      return sp_.dt * mean_[al] + sq * t;
    };
    for (int i = 0; i < K; ++i)
      for (int k = i; k < K; ++k, ++c) {
        yl[i * K + k] += inc(c);
        if (k != i) yl[k * K + i] = yl[i * K + k];
      }
    for (int i = 0; i < K; ++i)
      for (int r = 0; r < M; ++r, ++c) yl[m.offset_M() + i * M + r] += inc(c);
    if (m.lr_readout > 0.0)
      for (int i = 0; i < K; ++i, ++c) yl[m.offset_a() + i] += inc(c);
    if (m.biased && m.lr_bias > 0.0)
      for (int i = 0; i < K; ++i, ++c) yl[m.offset_b() + i] += inc(c);
    ++ln.step;
    ++done_steps_;
    if (const int code = divergence_code(yl, K, M, m.P.data(), ln.bound, scratch_.data())) {
      stop(l, 1, ln.step, code);
      return refill(l);
    }
    if (!prepare(l)) refill(l);
  }

  const SdeSpec& sp_;
  OdeRhs rhs_;
  IncrementMoments mom_;
  const double* y0_;
  std::size_t y0_stride_;
  const std::uint32_t* runs_;
  SdeOut* out_;
  std::atomic<std::size_t>& next_path_;
  std::size_t n_paths_;
  int K_ = 0, M_ = 0, u_ = 0, nc_ = 0, ss_ = 0;
  long long done_steps_ = 0;
  Lane lane_[W];
  std::vector<double> y_, L_, z_, zc_, mb_, ml_, g_, dg_, e_, a_, c0_, c1_, c2_, mu_, S_, Ll_, mean_, cov_, buf_, zt_;
  std::vector<double> scratch_;  // divergence_code's workspace
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
  for (std::size_t j = 0; j < n_paths; ++j) {  // a path never started (Ctrl-C first) reads as interrupted at 0
    out[j].recorded = 0;
    out[j].status = 2;
    out[j].reason = 0;
    out[j].stop_time = 0.0;
  }
  // Building a quadrature grid (here and in each thread's block) stops with Interrupted on Ctrl-C: every path
  // then reads as never started.
  std::optional<IncrementMoments> check;
  try {
    check.emplace(sp.model, sp.nodes, sp.weights);  // validates the model and the activations
  } catch (const Interrupted&) {
    return;
  }
  std::exception_ptr error;
  std::mutex error_mutex;
  const int threads = resolve_threads(n_threads);
  (void)threads;
  if (!check->exact()) {  // quadrature moments: paths in SIMD lanes, each thread a block taking paths as lanes free up
    std::atomic<std::size_t> next_path{0};
#ifdef TWOLAYER_OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1 && n_paths > 1)
#endif
    {
      try {
        PathBlock block(sp, y0, y0_stride, runs, out, next_path, n_paths);
        block.go(progress);
      } catch (const Interrupted&) {  // while building the block's grid: its paths were never started
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
    return;
  }
#ifdef TWOLAYER_OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1 && n_paths > 1)
#endif
  for (std::ptrdiff_t j = 0; j < static_cast<std::ptrdiff_t>(n_paths); ++j) {
    const std::size_t jj = static_cast<std::size_t>(j);
    if (cancel_requested()) continue;
    out[jj].status = 0;
    out[jj].reason = 0;
    out[jj].stop_time = std::numeric_limits<double>::quiet_NaN();
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

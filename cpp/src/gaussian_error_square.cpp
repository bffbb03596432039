// E[s'(l_i) s'(l_k) E^2] of smooth units over one set of fields (gaussian_error_square.hpp).
#include "twolayer/gaussian_error_square.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <map>
#include <type_traits>
#include <utility>
#include <vector>

#include "twolayer/activation_points.hpp"
#include "twolayer/gaussian_smooth.hpp"
#include "twolayer/parallel.hpp"
#include "twolayer/simd_math.hpp"

namespace twolayer::smooth {

namespace {

constexpr int kLag = 8, kLagLo = 3;  // interpolation points at offsets -3..4 from the cell's left node
constexpr int kMargin = kLagLo + 2;  // grid points below the covered range (and kLag - kLagLo + 2 above)
constexpr double kTableTol = 1e-14;  // midpoint error / largest entry of a table
constexpr int kMaxTable = 1 << 16;   // grid points of one table at most
constexpr double kRawDx = 0.0125;    // first grid step of an activation's table (argument units)
constexpr double kSmoothDx = 0.05;   // first grid step of a smoothing's table
constexpr double kMaxSums = 1 << 22;  // entries of the line sums at most (LineSums)
constexpr int kMaxPairs = 6;         // K <= 3 students below a last teacher field
constexpr int kAttempts = 4;         // steps of the trapezoidal rule tried (each kRetry times the last)
// The 2h rule of the first step errs by ~e^-26: the square of the error times two derivatives is larger near the
// poles than one activation (gaussian_smooth.hpp takes e^-18 per I4 and then often halves the steps; measured:
// e^-24 passes the check at K = M = 2 with tanh, e^-26 with a margin of 10).
constexpr double kFirstExp = 26.0;
// The cancellation floor: where the error's square cancels (a student that has learnt its teacher: E ~ 1e-5 while
// its terms are ~1), the tables' rounding (~1e-14 of the terms, not of E^2) bounds the relative accuracy of the
// moment, and the certificate's relative test can fail at every step. A moment is then also accepted when its 2h
// difference is within kCancelTol of the magnitude of its terms, E[|s'_i s'_k| (sum_c |w_c act_c|)^2] (the
// magnitude pass): what the per-I4 path (sum_jl w_j w_l I4, each I4 certified relative to itself) guarantees.
constexpr double kCancelTol = 1e-10;

// Lagrange weights of the 8 points at offsets m - kLagLo (m = 0..7) for the point at offset t in [0, 1):
// lw[m] = prod_{n != m} (t - x_n) / prod_{n != m} (x_m - x_n), the products of the other seven factors from a tree of
// pair and quadruple products (depth 5 instead of the 8 of a running product: one per line and table, a short
// line's notable cost).
TWOLAYER_ALWAYS_INLINE void lagrange8(double t, double* lw) {
  static constexpr double inv_den[kLag] = {-1.0 / 5040.0, 1.0 / 720.0, -1.0 / 240.0, 1.0 / 144.0,
                                           -1.0 / 144.0,  1.0 / 240.0, -1.0 / 720.0, 1.0 / 5040.0};
  double d[kLag];
  for (int m = 0; m < kLag; ++m) d[m] = t - (m - kLagLo);
  const double p01 = d[0] * d[1], p23 = d[2] * d[3], p45 = d[4] * d[5], p67 = d[6] * d[7];
  const double lo = p01 * p23, hi = p45 * p67;  // the quadruples
  const double a = p23 * hi, b = p01 * hi, c = p67 * lo, e = p45 * lo;  // the other pair times the other quadruple
  lw[0] = inv_den[0] * d[1] * a;
  lw[1] = inv_den[1] * d[0] * a;
  lw[2] = inv_den[2] * d[3] * b;
  lw[3] = inv_den[3] * d[2] * b;
  lw[4] = inv_den[4] * d[5] * c;
  lw[5] = inv_den[5] * d[4] * c;
  lw[6] = inv_den[6] * d[7] * e;
  lw[7] = inv_den[7] * d[6] * e;
}

inline double dot8(const double* lw, const double* v) {
  double s = 0.0;
  for (int m = 0; m < kLag; ++m) s += lw[m] * v[m];
  return s;
}

// A uniform grid x_k = x0 + dx k, k in [0, size), whose interpolation stencils cover [lo, hi].
struct Grid {
  double x0 = 0.0, dx = 0.0;
  int size = 0;
  bool cover(double lo, double hi, double step) {
    dx = step;
    const double cells = std::ceil((hi - lo) / dx);
    if (!(cells + kLag + 4.0 <= kMaxTable)) return false;
    size = static_cast<int>(cells) + kLag + 4;
    x0 = lo - kMargin * dx;
    return true;
  }
  // First stencil index k and fraction t of x; false outside the grid.
  bool locate(double x, int& k, double& t) const {
    const double pos = (x - x0) / dx, fl = std::floor(pos);
    if (!(fl >= kLagLo && fl <= size - 1 - (kLag - kLagLo))) return false;
    k = static_cast<int>(fl) - kLagLo;
    t = pos - fl;
    return true;
  }
};

// The 8-point interpolant of one cell as a polynomial in u = t - 1/2: p(u) = sum_k c_k u^k, c_k = sum_m A[m][k] v[m]
// (v: the stencil's values at offsets m - kLagLo), so that the points of a line inside one cell cost a Horner
// evaluation each instead of their own Lagrange weights.
struct CellPolynomial {
  double A[kLag][kLag];
  CellPolynomial() {
    for (int m = 0; m < kLag; ++m) {
      double c[kLag] = {1.0};  // prod_{n != m} (u + 1/2 - x_n) / (x_m - x_n), x_n = n - kLagLo
      int deg = 0;
      for (int n = 0; n < kLag; ++n) {
        if (n == m) continue;
        const double a = 0.5 - (n - kLagLo), den = static_cast<double>(m - n);
        for (int k = deg + 1; k >= 0; --k) c[k] = ((k > 0 ? c[k - 1] : 0.0) + a * (k <= deg ? c[k] : 0.0)) / den;
        ++deg;
      }
      for (int k = 0; k < kLag; ++k) A[m][k] = c[k];
    }
  }
};
const CellPolynomial kCell;

// outs[i][q] = the interpolant of the table tabs[i] on g at x + (q - jm) step, q <= 2 jm, for a line whose points
// are not aligned to the grid (a step below the grid's): run by run of the points inside one cell, each run from
// its cell's polynomials (CellPolynomial). False when a stencil leaves the grid.
bool along_free_line(const Grid& g, const double* const* tabs, int ntab, double x, double step, int jm,
                     double* const* outs) {
  constexpr int kMaxTabs = 2;
  const int len = 2 * jm + 1;
  const double pos0 = (x - g.x0) / g.dx, r = step / g.dx;
  int q = 0;
  while (q < len) {
    const double fl = std::floor(pos0 + (q - jm) * r);
    if (!(fl >= kLagLo && fl <= g.size - 1 - (kLag - kLagLo))) return false;
    // the run: the points q..qe-1 in the cell fl (its end from the crossing of the cell's far edge, then checked)
    const double cross = r > 0.0 ? jm + (fl + 1.0 - pos0) / r : (r < 0.0 ? jm + (fl - pos0) / r : len);
    int qe = cross < len ? std::max(q + 1, static_cast<int>(std::ceil(cross))) : len;
    while (qe > q + 1 && std::floor(pos0 + (qe - 1 - jm) * r) != fl) --qe;
    while (qe < len && std::floor(pos0 + (qe - jm) * r) == fl) ++qe;
    const int k = static_cast<int>(fl) - kLagLo;
    double c[kMaxTabs][kLag];
    for (int i = 0; i < ntab; ++i)
      for (int a = 0; a < kLag; ++a) {
        double sum = 0.0;
        for (int m = 0; m < kLag; ++m) sum += kCell.A[m][a] * tabs[i][k + m];
        c[i][a] = sum;
      }
    for (int i = 0; i < ntab; ++i) {
      const double* ci = c[i];
      double* o = outs[i];
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
      for (int p = q; p < qe; ++p) {
        const double u = pos0 + (p - jm) * r - fl - 0.5;
        o[p] = ((((((ci[7] * u + ci[6]) * u + ci[5]) * u + ci[4]) * u + ci[3]) * u + ci[2]) * u + ci[1]) * u + ci[0];
      }
    }
    q = qe;
  }
  return true;
}

// Grid points per step of a line whose points are not aligned to its table's grid.
constexpr int kFree = 1 << 30;

// A table's entries regrouped by residue modulo s (its lines' grid points per step): part r = v[r], v[r + s], ...,
// so that each stencil entry along the points of a line is contiguous (the line vectorises without gathers).
// A stride of 0 (a line along which the table's argument does not move: the last field uncorrelated with the line's
// variable, e.g. students orthogonal to the teachers, M = 0) keeps the table as it is (s = 1): every point of the line
// reads the same stencil.
struct Split {
  int s = 0;  // 0: none (a free table)
  std::vector<double> vt;
  std::vector<int> off;
  void build(const std::vector<double>& v, int stride) {
    s = stride == kFree ? 0 : std::max(1, std::abs(stride));
    if (s == 0) return;
    const int n = static_cast<int>(v.size());
    vt.resize(n);
    off.resize(s);
    int o = 0;
    for (int r = 0; r < s; ++r) {
      off[r] = o;
      for (int i = r; i < n; i += s) vt[o++] = v[i];
    }
  }
  const double* at(int idx) const { return vt.data() + off[idx % s] + idx / s; }
  // p[m] = at(idx + m), m < kLag (idx >= 0): one division, then the residues counted on (once per line: the
  // divisions were a good part of a short line's cost)
  void stencil(int idx, const double** p) const {
    int r = idx % s, q = idx / s;
    for (int m = 0; m < kLag; ++m) {
      p[m] = vt.data() + off[r] + q;
      if (++r == s) r = 0, ++q;
    }
  }
};

// Where a line starts on a grid: the first stencil index k and the Lagrange weights of its fraction (a line of an
// aligned grid keeps both along; the fine and 2h lines of one table share them).
struct Anchor {
  int k = 0;
  double lw[kLag];
  bool at(const Grid& g, double x) {
    double t;
    if (!g.locate(x, k, t)) return false;
    lagrange8(t, lw);
    return true;
  }
};

// outs[i][q] = the interpolant of the table v[i] (nt <= 2 tables on the grid g) at x + (q - jm) step, q <= 2 jm. A
// grid aligned to the step (stride grid points per step, a multiple of the split's s): the stencils sit at fixed
// offsets, the weights (anchor: x located on g, Anchor::at) are computed once and each entry of the stencil runs
// along the split table (a negative stride: the line filled in reverse); else (stride kFree; anchor unused) run by
// run through the cells (along_free_line). False when a stencil leaves the grid.
bool along(const Grid& g, int nt, const std::vector<double>* const* v, const Split* const* sp, int stride, double x,
           const Anchor& anchor, double step, int jm, double* const* outs) {
  if (stride == kFree) {
    const double* tabs[2] = {v[0]->data(), nt > 1 ? v[1]->data() : nullptr};
    return along_free_line(g, tabs, nt, x, step, jm, outs);
  }
  const int len = 2 * jm + 1, as = std::abs(stride), span = jm * as, k = anchor.k;
  double lw[kLag];  // (a local copy: the stores along the line cannot alias it, the weights stay in registers)
  for (int m = 0; m < kLag; ++m) lw[m] = anchor.lw[m];
  if (k - span < 0 || k + span + kLag > g.size) return false;
  for (int i = 0; i < nt; ++i) {
    const int inc = as / sp[i]->s;
    const double* p[kLag];
    sp[i]->stencil(k - span, p);
    const double *p0 = p[0], *p1 = p[1], *p2 = p[2], *p3 = p[3], *p4 = p[4], *p5 = p[5], *p6 = p[6], *p7 = p[7];
    // (a negative stride: the line filled from its end)
    double* const out = stride < 0 ? outs[i] + len - 1 : outs[i];
    auto fill = [&](auto stepping, auto direction) {
      const int c = stepping, o = direction;
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
      for (int q = 0; q < len; ++q) {
        const std::ptrdiff_t e = static_cast<std::ptrdiff_t>(q) * c;
        out[static_cast<std::ptrdiff_t>(q) * o] =
            ((lw[0] * p0[e] + lw[1] * p1[e]) + (lw[2] * p2[e] + lw[3] * p3[e])) +
            ((lw[4] * p4[e] + lw[5] * p5[e]) + (lw[6] * p6[e] + lw[7] * p7[e]));
      }
    };
    using One = std::integral_constant<int, 1>;
    using MinusOne = std::integral_constant<int, -1>;
    if (inc == 1)
      stride < 0 ? fill(One(), MinusOne()) : fill(One(), One());
    else
      stride < 0 ? fill(inc, MinusOne()) : fill(inc, One());
  }
  return true;
}

// v[k] = a(x0 + dx k) and, when d is given, d[k] = a'(x0 + dx k), k < n: tanh in one vectorised pass
// (tanh_sech2_simd, one exponential per point), the others chunk by chunk of points through sigma_derivatives_at
// (activation_points.hpp: custom tables panel by panel).
void sigma_grid(Activation a, double x0, double dx, int n, double* v, double* d) {
  if (a == Activation::Tanh) {
    if (d) {
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
      for (int k = 0; k < n; ++k) tanh_sech2_simd(x0 + dx * k, v[k], d[k]);
    } else {
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
      for (int k = 0; k < n; ++k) {
        double u;
        tanh_sech2_simd(x0 + dx * k, v[k], u);
      }
    }
    return;
  }
  constexpr int kChunk = 256;
  double xs[kChunk];
  for (int k0 = 0; k0 < n; k0 += kChunk) {
    const int cnt = n - k0 < kChunk ? n - k0 : kChunk;
    for (int q = 0; q < cnt; ++q) xs[q] = x0 + dx * (k0 + q);
    double* const out[2] = {v + k0, d ? d + k0 : nullptr};
    sigma_derivatives_at(a, xs, cnt, d ? 1 : 0, out);
  }
}

// w[q] = normal_weight((j0 + q) h, h), q < n, in one vectorised pass.
void normal_weights(int j0, int n, double h, double* w) {
  constexpr double kInvSqrt2Pi = 0.39894228040143267794;
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
  for (int q = 0; q < n; ++q) {
    const double t = (j0 + q) * h;
    w[q] = h * kInvSqrt2Pi * exp_simd(-0.5 * t * t);
  }
}

// Checks an interpolation table against its exact values at the cell midpoints (mid[c]: cell c between c and c + 1).
bool midpoints_ok(const std::vector<double>& v, const std::vector<double>& mid) {
  double vmax = 0.0, emax = 0.0, lw[kLag];
  bool finite = true;  // (std::max drops a NaN: every value is checked)
  lagrange8(0.5, lw);
  for (double x : v) vmax = std::max(vmax, std::fabs(x)), finite = finite && std::isfinite(x);
  const int size = static_cast<int>(v.size());
  for (int c = kLagLo; c + kLag - kLagLo < size; ++c) {
    const double e = std::fabs(dot8(lw, &v[c - kLagLo]) - mid[c]);
    emax = std::max(emax, e), finite = finite && std::isfinite(e);
  }
  return finite && emax <= kTableTol * vmax;
}

// The activation a (and a' when deriv) on a grid aligned to `step` (step = m dx), covering [lo, hi].
struct ActTable {
  Grid g;
  int m = 1, stride = 1;  // grid points per step of the line (kFree: not aligned)
  std::vector<double> v, d;
  Split vs, ds;  // v and d split by the line's stride
  // (a step below kRawDx / 8 would make the aligned grid too fine: the grid is then free, dx = kRawDx)
  bool build(Activation a, bool deriv, double lo, double hi, double step) {
    const bool free = step < kRawDx / 8.0;
    m = free ? 1 : static_cast<int>(std::ceil(step / kRawDx));
    double dx = free ? kRawDx : step / m;
    for (int attempt = 0; attempt < 6; ++attempt, m *= 2, dx *= 0.5) {
      if (!g.cover(lo, hi, dx)) return false;
      stride = free ? kFree : m;
      v.resize(g.size);
      d.resize(deriv ? g.size : 0);
      std::vector<double> mv(g.size), md(deriv ? g.size : 0);
      sigma_grid(a, g.x0, g.dx, g.size, v.data(), deriv ? d.data() : nullptr);
      sigma_grid(a, g.x0 + 0.5 * g.dx, g.dx, g.size, mv.data(), deriv ? md.data() : nullptr);
      if (midpoints_ok(v, mv) && (!deriv || midpoints_ok(d, md))) {
        vs.build(v, stride);
        if (deriv) ds.build(d, stride);
        return true;
      }
    }
    return false;
  }
};

// The smoothings S_q(b) = sum_j w_j a(b + s h j)^q (q = 1, 2; w_j the trapezoidal normal weights, |j| <= nl) and
// their 2h rules (even j, weights 2 w_j) on a grid aligned to `step` (|step| = m' dx; 0: free), covering [lo, hi];
// s h = m dx with h <= hmax. s = 0 (a last field fixed by the others: a zero pivot, e.g. a student equal to its
// teacher): S_q = a^q, the same for the 2h rule (S0 = S0c = 1).
struct SmoothTable {
  Grid g;
  int mstep = 0;  // grid points per step of the line
  double S0 = 0.0, S0c = 0.0;
  std::vector<double> S1, S2, S1c, S2c;
  Split S1s, S2s, S1cs, S2cs;  // split by the line's stride
  bool build(Activation a, double s, double hmax, double lo, double hi, double step, double line_points) {
    // grid aligned to the line's step when that is not much below the target, or below it and the aligned
    // grid cheap against the lattice (else free): measured, a point of a free line costs ~2.4 ns more than an
    // aligned one, and the aligned grid ~2 (hi - lo + 2 kTrunc s) / step evaluations of ~20 ns; the convolution on
    // the grid itself when s h >= dx (s h = m dx), else point by point (a near-singular last field)
    const double as = std::fabs(step), target = std::min(kSmoothDx, std::max(s * hmax, kRawDx));
    const bool cheap = 2.0 * (hi - lo + 2.0 * kTrunc * s) / as * 8.0 <= line_points;
    const bool point = !(s > 0.0);
    bool free = as > 0.0 && as < target / 8.0 && !cheap;
    int mp = as > 0.0 && !free ? static_cast<int>(std::ceil(as / target)) : 0;
    double dx = mp > 0 ? as / mp : target;
    for (int attempt = 0; attempt < 6; ++attempt, mp *= 2, dx *= 0.5) {
      if (!g.cover(lo, hi, dx)) return false;
      if (!point && !(s * hmax >= dx) && g.size * (2.0 * std::floor(kTrunc / hmax) + 1.0) > 4.0 * kMaxTable) {
        // a smoothing much narrower than the grid step (a last field nearly fixed by the others, e.g. a student
        // that has nearly learnt its teacher) on a fine aligned grid: point by point would take too many
        // evaluations; the grid refined to the smoothing's step instead (shared, still aligned), or, when that
        // grid would be too large, a free grid at the target step
        const double r = std::ceil(dx / (s * hmax));
        if (g.cover(lo, hi, dx / r)) {
          mp *= static_cast<int>(r);
          dx /= r;
        } else if (!free) {
          free = true;
          mp = 0;
          dx = target;
          if (!g.cover(lo, hi, dx)) return false;
        } else if (!g.cover(lo, hi, dx)) {
          return false;
        }
      }
      mstep = free ? kFree : (step > 0.0 ? mp : -mp);
      const bool shared = point || s * hmax >= dx;  // (point: the grid itself, one node)
      const int m = point || !shared ? 0 : static_cast<int>(std::floor(s * hmax / dx));
      const double h = point ? 1.0 : (shared ? m * dx / s : hmax);
      const int nl = point ? 0 : static_cast<int>(std::floor(kTrunc / h));
      const double cf = point ? 1.0 : 2.0;  // the 2h rule's weights: 2 w_j on even j (point: the one node)
      std::vector<double> wj(2 * nl + 1);
      S0 = S0c = 0.0;
      for (int j = -nl; j <= nl; ++j) {
        wj[j + nl] = point ? 1.0 : normal_weight(j * h, h);
        S0 += wj[j + nl];
        if ((j & 1) == 0) S0c += cf * wj[j + nl];
      }
      // a on the extended grid x0 + dx (i - m nl), i in [0, size + 2 m nl), and at its half points (shared), or at
      // every x_k + s h j (row k of 2 nl + 1 values)
      const int ext = shared ? g.size + 2 * m * nl : g.size * (2 * nl + 1);
      if (!(ext <= 4 * kMaxTable)) return false;
      std::vector<double> H(ext), Hm(ext);
      if (shared) {
        sigma_grid(a, g.x0 - dx * (m * nl), dx, ext, H.data(), nullptr);
        sigma_grid(a, g.x0 + dx * (0.5 - m * nl), dx, ext, Hm.data(), nullptr);
      } else {
        for (int k = 0; k < g.size; ++k) {
          sigma_grid(a, g.x0 + dx * k - s * h * nl, s * h, 2 * nl + 1, &H[k * (2 * nl + 1)], nullptr);
          sigma_grid(a, g.x0 + dx * (k + 0.5) - s * h * nl, s * h, 2 * nl + 1, &Hm[k * (2 * nl + 1)], nullptr);
        }
      }
      const int row = shared ? 1 : 2 * nl + 1, col = shared ? m : 1;  // H index of (k, j): k row + (j + nl) col
      auto convolve = [&](const std::vector<double>& src, std::vector<double>& s1, std::vector<double>& s2,
                          std::vector<double>& c1, std::vector<double>& c2) {
        s1.assign(g.size, 0.0);
        s2.assign(g.size, 0.0);
        c1.assign(g.size, 0.0);
        c2.assign(g.size, 0.0);
        for (int k = 0; k < g.size; ++k) {
          double f1 = 0.0, f2 = 0.0, e1 = 0.0, e2 = 0.0;
          for (int j = -nl; j <= nl; ++j) {
            const double x = src[k * row + col * (j + nl)], wx = wj[j + nl] * x;
            f1 += wx;
            f2 += wx * x;
            if ((j & 1) == 0) {
              e1 += wx;
              e2 += wx * x;
            }
          }
          s1[k] = f1;
          s2[k] = f2;
          c1[k] = cf * e1;
          c2[k] = cf * e2;
        }
      };
      std::vector<double> M1, M2, M1c, M2c;
      convolve(H, S1, S2, S1c, S2c);
      convolve(Hm, M1, M2, M1c, M2c);
      if (midpoints_ok(S1, M1) && midpoints_ok(S2, M2) && midpoints_ok(S1c, M1c) && midpoints_ok(S2c, M2c)) {
        S1s.build(S1, mstep);
        S2s.build(S2, mstep);
        S1cs.build(S1c, mstep == kFree ? kFree : 2 * mstep);  // (the 2h rule: lines of twice the stride)
        S2cs.build(S2c, mstep == kFree ? kFree : 2 * mstep);
        return true;
      }
    }
    return false;
  }
};

// S2 summed along a teacher's line (the last grid aligned to the line: a point j of the line interpolates S2 at the
// stencil k + mstep j with the line's weights): sum_{|j| <= jm} w_j S2(b + L_lf h j) = the same interpolation of
// R[jm][i] = sum_{|j| <= jm} w_j S2[i + mstep j] at b, an identity on the certified table (no new interpolant); the
// 2h rule likewise from S2c (j = 2r, weights 2 w_j, |r| <= jc). Rows jm < rows, entries with every index on the grid.
struct LineSums {
  int size = 0;
  std::vector<double> R, Rc;
  void build(const SmoothTable& t, const std::vector<double>& wline, int jfull) {
    size = t.g.size;
    const int as = std::abs(t.mstep);
    auto rows = [&](const std::vector<double>& S, int step, int nrow, double fac, std::vector<double>& out) {
      out.assign(static_cast<std::size_t>(nrow) * size, 0.0);
      for (int r = 0; r < nrow; ++r) {
        double* row = out.data() + static_cast<std::size_t>(r) * size;
        const double wr = fac * wline[jfull + step * r];
        const int o = as * step * r;
        for (int i = o; i < size - o; ++i)
          row[i] = r == 0 ? wr * S[i] : row[i - size] + wr * (S[i + o] + S[i - o]);
      }
    };
    rows(t.S2, 1, jfull + 1, 1.0, R);
    rows(t.S2c, 2, jfull / 2 + 1, 2.0, Rc);
  }
  void clear() { R.clear(), Rc.clear(); }
  bool empty() const { return R.empty(); }
  const double* row(int jm) const { return R.data() + static_cast<std::size_t>(jm) * size; }
  const double* crow(int jc) const { return Rc.data() + static_cast<std::size_t>(jc) * size; }
};

// The nested lattice of one attempt (steps h): its variables, steps and tables, shared (read only) by the walks
// over it.
struct Lattice {
  int n, f, l, np;
  const Activation* acts;
  const double *L, *mu, *w;
  double h[4];
  int cnt[kMaxPairs];        // how many of the pair's fields are the line field f
  int outer[kMaxPairs][2];   // the pair's fields before f (-1: none)
  bool looped[4];
  ActTable line;             // field f along the line
  SmoothTable last;          // field l smoothed
  LineSums sums;             // S2 along a teacher's line (empty: S2 interpolated point by point)
  std::vector<double> wline;  // normal weights of the line, index j + jfull
  int jfull = 0;
  // The magnitude pass (in_order's cancellation floor): every term of the error's square by its absolute value,
  // E[|s'_i s'_k| (sum_c |w_c act_c|)^2] summed into scale[] (the same lattice and tables, absolute values taken of
  // the interpolated entries before the unchanged sums).
  bool magnitude = false;
  bool any_f = false;  // a pair holds the line field f (a student): its derivative is needed
  int half_level = -1;  // the level summed over z >= 0 only (an even integrand; -1: none)
};

// A walk over (part of) a lattice: the fields' values and derivatives along the current path of nested nodes, and
// the fine, 2h and |.| sums per pair of the leaves it visited.
struct Walk {
  explicit Walk(const Lattice& lattice) : lat(lattice), buf_(6 * (2 * static_cast<std::size_t>(lattice.jfull) + 1)) {
    clear();
  }
  void clear() {
    for (int p = 0; p < kMaxPairs; ++p) fine[p] = coarse[p] = scale[p] = 0.0;
  }
  const Lattice& lat;
  double fine[kMaxPairs], coarse[kMaxPairs], scale[kMaxPairs];
  double val[4], der[4];
  bool ok = true;
  std::vector<double> buf_;  // the line's interpolated values (6 rows of 2 jfull + 1)
  std::vector<double> nodes_[4];  // per level before f: the field's values, derivatives and the normal weights

  // The nodes z_e = (j0 + q) h_e, q < count, of a looped level e < f below the prefix arg (radius^2 r2): field e's
  // values, derivatives and the nodes' normal weights in nodes_[e] (rows of count), in one pass (sigma_grid).
  int nodes(int e, const double* arg, double r2, int& j0) {
    const int n = lat.n;
    const double R2 = kTrunc * kTrunc - r2;
    const int jm = R2 > 0.0 ? static_cast<int>(std::floor(std::sqrt(R2) / lat.h[e])) : 0;
    // an even integrand: the nodes z_e > 0 stand for z_e < 0 too (the lattice is symmetric: every z before is 0)
    j0 = e == lat.half_level ? 0 : -jm;
    const int count = jm - j0 + 1;
    std::vector<double>& nd = nodes_[e];
    nd.resize(3 * static_cast<std::size_t>(count));
    double *v = nd.data(), *d = v + count, *wn = d + count;
    const double step = lat.L[e * n + e] * lat.h[e];
    sigma_grid(lat.acts[e], arg[e] + step * j0, step, count, v, e < n - 1 ? d : nullptr);
    normal_weights(j0, count, lat.h[e], wn);
    return count;
  }

  // The node z_e = j h_e of a looped level e < f (field e's value v and derivative d there, normal weight wn), then
  // the levels below it.
  void node(int e, const double* arg, double r2, double wt, double wc, bool even, int j, double v, double d,
            double wn) {
    const int n = lat.n;
    const double wz = (e == lat.half_level && j > 0 ? 2.0 : 1.0) * wn, z = j * lat.h[e];
    double a2[4];
    for (int c = 0; c < n; ++c) a2[c] = c >= e ? arg[c] + lat.L[c * n + e] * z : arg[c];
    val[e] = v;
    der[e] = e < n - 1 ? d : 0.0;
    level(e + 1, a2, r2 + z * z, wt * wz, wc * 2.0 * wz, even && (j & 1) == 0);
  }

  // Level e < f: every node of z_e (a zero pivot: the single node z_e = 0), then the next level.
  void level(int e, const double* arg, double r2, double wt, double wc, bool even) {
    if (e >= lat.f || e >= 2) return leaf_line(arg, r2, wt, wc, even);  // (f = n - 2 <= 2: a bound the compiler sees)
    if (!lat.looped[e]) {
      const int n = lat.n;
      double d[2];
      sigma_derivatives(lat.acts[e], arg[e], e < n - 1 ? 1 : 0, d);
      double a2[4];
      for (int c = 0; c < n; ++c) a2[c] = arg[c];
      val[e] = d[0];
      der[e] = e < n - 1 ? d[1] : 0.0;
      return level(e + 1, a2, r2, wt, wc, even);
    }
    int j0;
    const int count = nodes(e, arg, r2, j0);
    const double* v = nodes_[e].data();
    for (int q = 0; q < count; ++q) node(e, arg, r2, wt, wc, even, j0 + q, v[q], v[count + q], v[2 * count + q]);
  }

  // The line of z_f (all before fixed): field f from its table (or directly when it has no variable of its own),
  // field l from the smoothing tables.
  void leaf_line(const double* arg, double r2, double wt, double wc, bool even) {
    const int n = lat.n, f = lat.f, l = lat.l;
    const double *L = lat.L, *w = lat.w;
    const bool magnitude = lat.magnitude;
    const ActTable& line = lat.line;
    const SmoothTable& last = lat.last;
    const LineSums& sums = lat.sums;
    double Pout = 0.0;
    for (int c = 0; c < f; ++c) Pout += magnitude ? std::fabs(w[c] * val[c]) : w[c] * val[c];
    const double wf = magnitude ? std::fabs(w[f]) : w[f], wl = magnitude ? std::fabs(w[l]) : w[l];
    const double S0 = last.S0, S0c = last.S0c;
    const bool student_f = lat.any_f;
    double sf[3] = {0.0, 0.0, 0.0}, sa[3] = {0.0, 0.0, 0.0}, sc[3] = {0.0, 0.0, 0.0};
    if (lat.looped[f]) {
      const double R2 = kTrunc * kTrunc - r2;
      const int jfull = lat.jfull;
      const int jm = R2 > 0.0 ? std::min(jfull, static_cast<int>(std::floor(std::sqrt(R2) / lat.h[f]))) : 0;
      // interpolated values along the line, then the weighted sums
      const int len = 2 * jm + 1;
      const double sf_step = L[f * n + f] * lat.h[f], sl_step = L[l * n + f] * lat.h[f];
      double *vf = buf_.data(), *df = vf + len, *s1 = df + len, *s2 = s1 + len;
      const std::vector<double>* lt[2] = {&line.v, &line.d};
      const Split* ls[2] = {&line.vs, &line.ds};
      double* lo[2] = {vf, df};
      const bool summed = !sums.empty();  // (then a teacher line: S2 from the line sums)
      const std::vector<double>* st[2] = {&last.S1, &last.S2};
      const Split* ss[2] = {&last.S1s, &last.S2s};
      double* so[2] = {s1, s2};
      // (an aligned table's line starts at the anchor of its argument; the 2h line below shares the last's)
      Anchor af, al;
      if ((line.stride != kFree && !af.at(line.g, arg[f])) || (last.mstep != kFree && !al.at(last.g, arg[l])) ||
          !along(line.g, student_f ? 2 : 1, lt, ls, line.stride, arg[f], af, sf_step, jm, lo) ||
          !along(last.g, summed ? 1 : 2, st, ss, last.mstep, arg[l], al, sl_step, jm, so)) {
        ok = false;
        return;
      }
      const double* wj = lat.wline.data() + jfull - jm;
      if (magnitude)
        for (int q = 0; q < len; ++q) {
          vf[q] = std::fabs(vf[q]);
          if (student_f) df[q] = std::fabs(df[q]);
          s1[q] = std::fabs(s1[q]);
        }
      double f0 = 0.0, f1 = 0.0, f2 = 0.0, a0 = 0.0, a1 = 0.0, a2 = 0.0;
      if (student_f) {
#ifdef TWOLAYER_OPENMP
#pragma omp simd reduction(+ : f0, f1, f2, a0, a1, a2)
#endif
        for (int q = 0; q < len; ++q) {
          const double P = Pout + wf * vf[q], d = df[q];
          const double x0 = wj[q] * (P * P * S0 + 2.0 * P * wl * s1[q] + wl * wl * s2[q]), x1 = x0 * d, x2 = x1 * d;
          f0 += x0;
          f1 += x1;
          f2 += x2;
          a0 += std::fabs(x0);
          a1 += std::fabs(x1);
          a2 += std::fabs(x2);
        }
      } else if (summed) {  // x0 >= 0 (a mean of squares) up to the tables' rounding: the line's |.| sum is |f0|
#ifdef TWOLAYER_OPENMP
#pragma omp simd reduction(+ : f0)
#endif
        for (int q = 0; q < len; ++q) {
          const double P = Pout + wf * vf[q];
          f0 += wj[q] * (P * (P * S0 + 2.0 * wl * s1[q]));
        }
        f0 += wl * wl * dot8(al.lw, sums.row(jm) + al.k);
        f1 = f2 = f0;
        a0 = a1 = a2 = std::fabs(f0);
      } else {  // x0 >= 0 up to the tables' rounding: |x0| summed all the same
#ifdef TWOLAYER_OPENMP
#pragma omp simd reduction(+ : f0, a0)
#endif
        for (int q = 0; q < len; ++q) {
          const double P = Pout + wf * vf[q];
          const double x0 = wj[q] * (P * P * S0 + 2.0 * P * wl * s1[q] + wl * wl * s2[q]);
          f0 += x0;
          a0 += std::fabs(x0);
        }
        f1 = f2 = f0;
        a1 = a2 = a0;
      }
      sf[0] = f0; sf[1] = f1; sf[2] = f2;
      sa[0] = a0; sa[1] = a1; sa[2] = a2;
      if (even) {  // the 2h rule: even j (jm - j even from q = jm & 1 on)
        const int q0 = jm & 1, jc = (jm - q0) / 2;  // j = -2 jc, ..., 2 jc
        double *c1 = s2 + len, *c2 = c1 + len;
        const int cstride = last.mstep == kFree ? kFree : 2 * last.mstep;
        const std::vector<double>* ct[2] = {&last.S1c, &last.S2c};
        const Split* cs[2] = {&last.S1cs, &last.S2cs};
        double* co[2] = {c1, c2};
        if (!along(last.g, summed ? 1 : 2, ct, cs, cstride, arg[l], al, 2.0 * sl_step, jc, co)) {
          ok = false;
          return;
        }
        const int lc = 2 * jc + 1;
        double e0 = 0.0, e1 = 0.0, e2 = 0.0;
        if (summed) {
          for (int r = 0; r < lc; ++r) {
            const double P = Pout + wf * vf[q0 + 2 * r];
            e0 += 2.0 * wj[q0 + 2 * r] * (P * (P * S0c + 2.0 * wl * c1[r]));
          }
          e0 += wl * wl * dot8(al.lw, sums.crow(jc) + al.k);
          e1 = e2 = e0;
        }
        for (int r = 0; r < (summed ? 0 : lc); ++r) {
          const int q = q0 + 2 * r;
          const double P = Pout + wf * vf[q], d = student_f ? df[q] : 1.0;
          const double y0 = 2.0 * wj[q] * (P * P * S0c + 2.0 * P * wl * c1[r] + wl * wl * c2[r]), y1 = y0 * d;
          e0 += y0;
          e1 += y1;
          e2 += y1 * d;
        }
        sc[0] = e0; sc[1] = e1; sc[2] = e2;
      }
    } else {  // field f is fixed by the earlier variables
      int kb;
      double tb, lwb[kLag];
      if (!last.g.locate(arg[l], kb, tb)) {
        ok = false;
        return;
      }
      lagrange8(tb, lwb);
      double d[2];
      sigma_derivatives(lat.acts[f], arg[f], student_f ? 1 : 0, d);
      if (magnitude) d[0] = std::fabs(d[0]), d[1] = std::fabs(d[1]);
      const double df = student_f ? d[1] : 1.0;
      const double S1r = dot8(lwb, last.S1.data() + kb), S2 = dot8(lwb, last.S2.data() + kb);
      const double S1 = magnitude ? std::fabs(S1r) : S1r;
      const double P = Pout + wf * d[0];
      const double x0 = P * P * S0 + 2.0 * P * wl * S1 + wl * wl * S2;
      sf[0] = x0; sf[1] = x0 * df; sf[2] = x0 * df * df;
      for (int q = 0; q < 3; ++q) sa[q] = std::fabs(sf[q]);
      if (even) {
        const double C1 = dot8(lwb, last.S1c.data() + kb), C2 = dot8(lwb, last.S2c.data() + kb);
        sc[0] = P * P * S0c + 2.0 * P * wl * C1 + wl * wl * C2;
        sc[1] = sc[0] * df;
        sc[2] = sc[1] * df;
      }
    }
    for (int p = 0; p < lat.np; ++p) {
      double G = 1.0;
      for (int q = 0; q < 2; ++q)
        if (lat.outer[p][q] >= 0) G *= der[lat.outer[p][q]];
      fine[p] += wt * G * sf[lat.cnt[p]];
      scale[p] += wt * std::fabs(G) * sa[lat.cnt[p]];
      if (even) coarse[p] += wc * G * sc[lat.cnt[p]];
    }
  }
};


// The odd activations (sigma(-s) = -sigma(s)): tanh, erf, sin, linear and the odd custom tables.
bool is_odd(Activation a) {
  return a == Activation::Tanh || a == Activation::Erf || a == Activation::Sin || a == Activation::Linear ||
         (is_custom(a) && custom_table(a).odd);
}

// First trapezoidal steps hmax[e] of the variables z_e of l = mu + L z (looped[e]: a nonzero pivot; else no
// variable), each field counted twice (its derivative and the square of the error); returns prod_e 1 / hmax[e] over
// the looped variables before the last (the number of leaves, up to a constant).
double first_steps(int n, const Activation* acts, const double* L, double* hmax, bool* looped) {
  double leaves = 1.0;
  for (int e = 0; e < n; ++e) {
    looped[e] = L[e * n + e] > 0.0;
    Activation ta[8];
    double sl[8];
    int m = 0;
    for (int c = e; c < n; ++c) {
      ta[m] = ta[m + 1] = acts[c];
      sl[m] = sl[m + 1] = L[c * n + e];
      m += 2;
    }
    hmax[e] = looped[e] ? trapezoid_step(ta, sl, m, kFirstExp) : 0.0;
    if (looped[e] && e < n - 1) leaves /= hmax[e];
  }
  return leaves;
}

// The lattice's certificate: per pair, ((I_h - I_2h) / S)^2 <= kAcceptSq (S the rule on |integrand|), or, with a
// floor (the cancellation floor of in_order), |I_h - I_2h| <= floor.
bool accepted(const Walk& sums, int np, const double* floor) {
  bool ok = true;
  for (int p = 0; p < np; ++p) {
    const double d = sums.fine[p] - sums.coarse[p], f = floor ? floor[p] : 0.0;
    ok = ok && std::isfinite(sums.fine[p]) && std::isfinite(d) &&
         !(d * d > std::max(kAcceptSq * sums.scale[p] * sums.scale[p], f * f));
  }
  return ok;
}

// One pass over the lattice, its sums into `total` (false: a stencil left its grid). The nodes of a looped first
// variable before the line's are tasks on `threads` threads; each node's sums are kept apart and added in the nodes'
// order, so that the sums are the same on any number of threads.
bool walk_lattice(const Lattice& lat, int threads, Walk& total) {
  total.clear();
  total.ok = true;
  if (lat.f == 0 || !lat.looped[0]) {
    total.level(0, lat.mu, 0.0, 1.0, 1.0, true);
    return total.ok;
  }
  int j0;
  const int count = total.nodes(0, lat.mu, 0.0, j0);
  const double* v = total.nodes_[0].data();
  std::vector<double> part(3 * static_cast<std::size_t>(kMaxPairs) * count);
  std::vector<char> node_ok(count, 1);
  auto visit = [&](Walk& walk, int q) {
    walk.clear();
    walk.node(0, lat.mu, 0.0, 1.0, 1.0, true, j0 + q, v[q], v[count + q], v[2 * count + q]);
    node_ok[q] = walk.ok;
    double* out = part.data() + 3 * static_cast<std::size_t>(kMaxPairs) * q;
    for (int p = 0; p < lat.np; ++p)
      out[p] = walk.fine[p], out[kMaxPairs + p] = walk.coarse[p], out[2 * kMaxPairs + p] = walk.scale[p];
  };
  if (resolve_threads(threads) > 1 && count > 1) {
    parallel_for(
        static_cast<std::size_t>(count), threads,
        [&](std::size_t q) {
          Walk walk(lat);
          visit(walk, static_cast<int>(q));
        },
        1, 1);
  } else {
    Walk walk(lat);
    for (int q = 0; q < count; ++q) visit(walk, q);
  }
  for (int q = 0; q < count; ++q) {
    const double* in = part.data() + 3 * static_cast<std::size_t>(kMaxPairs) * q;
    total.ok = total.ok && node_ok[q];
    for (int p = 0; p < lat.np; ++p)
      total.fine[p] += in[p], total.coarse[p] += in[kMaxPairs + p], total.scale[p] += in[2 * kMaxPairs + p];
  }
  return total.ok;
}

// error_square_moments on the fields in the given order.
bool in_order(Activation s, int n, const Activation* acts, const double* C, const double* mu_in, const double* w,
              const int* pairs, int np, double* out, int threads) {
  if (n < 2 || n > 4 || np < 1 || np > kMaxPairs) return false;
  const int f = n - 2, l = n - 1;
  for (int c = 0; c < n; ++c)
    if (!is_smooth(acts[c])) return false;
  double mu[4] = {0.0, 0.0, 0.0, 0.0};
  if (mu_in)
    for (int c = 0; c < n; ++c) mu[c] = mu_in[c];
  double L[16];
  psd_cholesky(C, n, L);  // (a zero last pivot: the last field fixed by the others, SmoothTable's s = 0)
  Lattice lat;
  lat.n = n;
  lat.f = f;
  lat.l = l;
  lat.np = np;
  lat.acts = acts;
  lat.L = L;
  lat.mu = mu;
  lat.w = w;
  for (int p = 0; p < np; ++p) {
    const int i = pairs[2 * p], k = pairs[2 * p + 1];
    if (i < 0 || k < 0 || i >= l || k >= l || acts[i] != s || acts[k] != s) return false;
    lat.cnt[p] = (i == f) + (k == f);
    lat.outer[p][0] = i < f ? i : -1;
    lat.outer[p][1] = k < f ? k : -1;
    lat.any_f = lat.any_f || lat.cnt[p] > 0;
  }
  double hmax[4];
  first_steps(n, acts, L, hmax, lat.looped);
  // Zero means and odd activations: the integrand is even in z (s' even, E odd), and so is the lattice; the first
  // variable (all before it fixed at 0) is summed over z >= 0 with the weights of z > 0 doubled.
  bool even_integrand = true;
  for (int c = 0; c < n; ++c) even_integrand = even_integrand && mu[c] == 0.0 && is_odd(acts[c]);
  if (even_integrand)
    for (int e = 0; e < f && lat.half_level < 0; ++e)
      if (lat.looped[e]) lat.half_level = e;
  // ranges of the arguments of f and l before their own variables (the ball |z| <= 9)
  double spanf = 0.0, spanl = 0.0;
  for (int e = 0; e <= f; ++e) {
    spanf += std::fabs(L[f * n + e]);
    spanl += std::fabs(L[l * n + e]);
  }
  spanf *= kTrunc;
  spanl *= kTrunc;
  double floor[kMaxPairs];
  bool have_floor = false;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const double fac = std::pow(kRetry, attempt);
    for (int e = 0; e < n; ++e) lat.h[e] = hmax[e] * fac;
    if (lat.looped[f]) {
      if (!lat.line.build(acts[f], lat.any_f, mu[f] - spanf, mu[f] + spanf, L[f * n + f] * lat.h[f])) return false;
      lat.jfull = static_cast<int>(std::floor(kTrunc / lat.h[f]));
      lat.wline.resize(2 * lat.jfull + 1);
      normal_weights(-lat.jfull, 2 * lat.jfull + 1, lat.h[f], lat.wline.data());
    }
    const double bstep = lat.looped[f] ? L[l * n + f] * lat.h[f] : 0.0;
    // the points of the lines (the ball of radius kTrunc over the variables up to f; half of it when halved)
    double points = lat.half_level >= 0 ? 0.5 : 1.0;
    int dim = 0;
    for (int e = 0; e <= f; ++e)
      if (lat.looped[e]) points /= lat.h[e], ++dim;
    points *= dim == 1 ? 2.0 * kTrunc : (dim == 2 ? kPi * kTrunc * kTrunc : 4.0 / 3.0 * kPi * kTrunc * kTrunc * kTrunc);
    if (!lat.last.build(acts[l], L[l * n + l], lat.h[l], mu[l] - spanl, mu[l] + spanl, bstep, points)) return false;
    // S2 summed along the lines (teachers on the line, an aligned last grid) when its tables (~1.5 (jfull + 1) entries
    // per grid point) cost less than the 8 taps per line point they save
    const double sum_entries = 1.5 * (lat.jfull + 1.0) * lat.last.g.size;
    lat.sums.clear();
    if (lat.looped[f] && !lat.any_f && lat.last.mstep != kFree && sum_entries <= points && sum_entries <= kMaxSums)
      lat.sums.build(lat.last, lat.wline, lat.jfull);
    Walk sums(lat);
    if (!walk_lattice(lat, threads, sums)) return false;
    bool ok = accepted(sums, np, nullptr);
    if (!ok && !have_floor) {  // the magnitudes of the terms, once (the steps barely change them)
      Walk magnitudes(lat);
      lat.magnitude = true;
      const bool walked = walk_lattice(lat, threads, magnitudes);
      lat.magnitude = false;
      if (!walked) return false;
      for (int p = 0; p < np; ++p) floor[p] = kCancelTol * magnitudes.scale[p];
      have_floor = true;
    }
    ok = ok || accepted(sums, np, floor);
    if (ok) {
      for (int p = 0; p < np; ++p) out[p] = sums.fine[p];
      return true;
    }
  }
  return false;
}

// n <= 4 fields in the order of least work (leaves of the first steps) among those with a non-pair field last.
bool on_fields(Activation s, int n, const Activation* acts, const double* C, const double* mu, const double* w,
               const int* pairs, int np, double* out, int threads) {
  if (n < 2 || n > 4 || np < 1 || np > kMaxPairs) return false;
  bool in_pair[4] = {false, false, false, false};
  for (int p = 0; p < 2 * np; ++p) {
    if (pairs[p] < 0 || pairs[p] >= n) return false;
    in_pair[pairs[p]] = true;
  }
  int perm[4] = {0, 1, 2, 3}, best[4] = {0, 1, 2, 3};
  double best_leaves = kInfStrip;
  int best_fixed = 2;
  do {
    if (in_pair[perm[n - 1]]) continue;
    double Cp[16], L[16], hmax[4];
    bool looped[4];
    Activation ap[4];
    for (int a = 0; a < n; ++a) {
      ap[a] = acts[perm[a]];
      for (int b = 0; b < n; ++b) Cp[a * n + b] = C[perm[a] * n + perm[b]];
    }
    psd_cholesky(Cp, n, L);
    // a student on the line costs about 1.5 times a teacher per leaf (its derivative too); an order whose last field
    // is fixed by the others (a zero pivot) only where every order's is
    const int fixed_last = L[n * n - 1] > 0.0 ? 0 : 1;
    const double leaves = first_steps(n, ap, L, hmax, looped) * (n > 2 && in_pair[perm[n - 2]] ? 1.5 : 1.0);
    if (fixed_last < best_fixed || (fixed_last == best_fixed && leaves < best_leaves)) {
      best_fixed = fixed_last;
      best_leaves = leaves;
      for (int a = 0; a < n; ++a) best[a] = perm[a];
    }
  } while (std::next_permutation(perm, perm + n));
  if (!(best_leaves < kInfStrip)) return false;
  int pos[4], pp[2 * kMaxPairs];
  double Cp[16], mp[4], wp[4];
  Activation ap[4];
  for (int a = 0; a < n; ++a) {
    pos[best[a]] = a;
    ap[a] = acts[best[a]];
    mp[a] = mu ? mu[best[a]] : 0.0;
    wp[a] = w[best[a]];
    for (int b = 0; b < n; ++b) Cp[a * n + b] = C[best[a] * n + best[b]];
  }
  for (int p = 0; p < 2 * np; ++p) pp[p] = pos[pairs[p]];
  return in_order(s, n, ap, Cp, mp, wp, pp, np, out, threads);
}

// One lattice of by_subsets: the fields `fields` (n <= 4; -1: the padding field), the pairs in those fields'
// positions, and which moments they feed.
struct SubsetCall {
  int n = 0, np = 0;
  int fields[4];
  int pairs[2 * kMaxPairs];
  int target[kMaxPairs];    // the pair p of the caller
  double coef[kMaxPairs];   // the Moebius coefficient of this subset for that pair
  double value[kMaxPairs];
  bool ok = false;
};

// Every field in a pair, or n > 4 fields: sum_{c, c'} w_c w_c' E[s'_i s'_k act_c act_c'] has terms on at most four
// fields, {i, k, c, c'}. With R the weighted fields besides i and k (r of them) and
// F(A) = E[s'_i s'_k (sum_{c in {i, k} + A} w_c act_c)^2] for A in R, a term whose fields outside {i, k} are exactly
// B (|B| <= 2) is counted in F(A) for every A >= B; Moebius inversion over |A| <= 2 gives
//   E[s'_i s'_k E^2] = sum_{|A| = 2} F(A) + (2 - r) sum_{|A| = 1} F(A) + (1 - r + r (r - 1) / 2) F({}),
// each F one lattice over at most four fields (a pair (i, i) over at most three). The pairs of one subset share its
// lattice, split so that each lattice keeps a field outside its pairs (the one summed last); a subset made of its
// pair's fields only ({i, k}, {i}) takes a padding field besides, of variance 0 and weight 0 (no smoothing: S_q =
// act(0)^q, a zero pivot). Each lattice is certified on its own (relative to its terms, or the cancellation floor);
// the combination's error is at most sum |coefficient| times theirs. The lattices run on `threads` threads.
bool by_subsets(Activation s, int n, const Activation* acts, const double* C, const double* mu, const double* w,
                const int* pairs, int np, double* out, int threads) {
  std::vector<SubsetCall> calls;
  std::map<std::vector<int>, std::vector<std::pair<int, double>>> subsets;  // sorted fields -> (pair, coefficient)
  auto add = [&](std::vector<int> fields, int p, double coef) {
    if (coef == 0.0) return;
    std::sort(fields.begin(), fields.end());
    subsets[fields].emplace_back(p, coef);
  };
  for (int p = 0; p < np; ++p) {
    const int i = pairs[2 * p], k = pairs[2 * p + 1];
    std::vector<int> R;
    for (int c = 0; c < n; ++c)
      if (c != i && c != k && w[c] != 0.0) R.push_back(c);
    const double r = static_cast<double>(R.size());
    std::vector<int> base = {i};
    if (k != i) base.push_back(k);
    add(base, p, 1.0 - r + 0.5 * r * (r - 1.0));
    for (std::size_t a = 0; a < R.size(); ++a) {
      std::vector<int> one = base;
      one.push_back(R[a]);
      add(one, p, 2.0 - r);
      for (std::size_t b = a + 1; b < R.size(); ++b) {
        std::vector<int> two = one;
        two.push_back(R[b]);
        add(two, p, 1.0);
      }
    }
  }
  for (const auto& [fields, feeds] : subsets) {
    // split the pairs: each lattice leaves out a field of the subset (greedily the one most pairs leave out)
    std::vector<std::pair<int, double>> rest = feeds;
    const int m = static_cast<int>(fields.size());
    while (!rest.empty()) {
      auto misses = [&](int pp, int x) { return pairs[2 * pp] != x && pairs[2 * pp + 1] != x; };
      int best = -1, best_count = 0;
      for (int x : fields) {
        int count = 0;
        for (const auto& fd : rest) count += misses(fd.first, x);
        if (count > best_count) best = x, best_count = count;
      }
      SubsetCall call;
      call.n = m;
      for (int a = 0; a < m; ++a) call.fields[a] = fields[a];
      if (best < 0) call.fields[call.n++] = -1;  // the subset is its pair's fields: the padding field
      std::vector<std::pair<int, double>> keep;
      for (const auto& fd : rest) {
        if ((best >= 0 && !misses(fd.first, best)) || call.np == kMaxPairs) {
          keep.push_back(fd);
          continue;
        }
        const int q = call.np++;
        for (int e = 0; e < 2; ++e) {
          const int* at = std::find(call.fields, call.fields + call.n, pairs[2 * fd.first + e]);
          call.pairs[2 * q + e] = static_cast<int>(at - call.fields);
        }
        call.target[q] = fd.first;
        call.coef[q] = fd.second;
      }
      calls.push_back(call);
      rest.swap(keep);
    }
  }
  parallel_for(
      calls.size(), threads,
      [&](std::size_t t) {
        SubsetCall& call = calls[t];
        Activation a[4];
        double Cs[16], ms[4], ws[4];
        for (int e = 0; e < call.n; ++e) {
          const int c = call.fields[e];  // (-1: the padding field, 0 with weight 0)
          a[e] = c >= 0 ? acts[c] : s;
          ms[e] = c >= 0 && mu ? mu[c] : 0.0;
          ws[e] = c >= 0 ? w[c] : 0.0;
          for (int q = 0; q < call.n; ++q)
            Cs[e * call.n + q] = c >= 0 && call.fields[q] >= 0 ? C[c * n + call.fields[q]] : 0.0;
        }
        try {
          call.ok = on_fields(s, call.n, a, Cs, ms, ws, call.pairs, call.np, call.value, 1);
        } catch (const std::exception&) {  // (the caller's per-I4 path reports what went wrong)
          call.ok = false;
        }
      },
      1, 1);
  for (int p = 0; p < np; ++p) out[p] = 0.0;
  for (const SubsetCall& call : calls) {
    if (!call.ok) return false;
    for (int q = 0; q < call.np; ++q) out[call.target[q]] += call.coef[q] * call.value[q];
  }
  return true;
}

}  // namespace

bool error_square_applies(Activation s, Activation t) {
  return !is_classic(s) && is_smooth(s) && is_smooth(t) && !(is_polynomial(s) && is_polynomial(t));
}

bool error_square_moments(Activation s, int n, const Activation* acts, const double* C, const double* mu,
                          const double* w, const int* pairs, int np, double* out, int threads) {
  if (n < 1 || np < 1) return false;
  for (int p = 0; p < 2 * np; ++p)
    if (pairs[p] < 0 || pairs[p] >= n) return false;
  std::vector<int> pos(n, -1), kept;  // fields of weight 0 outside every pair add nothing (a target's directions)
  bool free_field = false;            // a field outside every pair (the one lattice sums it last)
  for (int c = 0; c < n; ++c) {
    bool in_pair = false;
    for (int p = 0; p < 2 * np; ++p) in_pair = in_pair || pairs[p] == c;
    if (in_pair || w[c] != 0.0) pos[c] = static_cast<int>(kept.size()), kept.push_back(c);
    free_field = free_field || (!in_pair && w[c] != 0.0);
  }
  const int m = static_cast<int>(kept.size());
  if (m < n) {
    std::vector<Activation> am(m);
    std::vector<double> Cm(static_cast<std::size_t>(m) * m), mum(m), wm(m);
    std::vector<int> pm(2 * np);
    for (int a = 0; a < m; ++a) {
      am[a] = acts[kept[a]];
      mum[a] = mu ? mu[kept[a]] : 0.0;
      wm[a] = w[kept[a]];
      for (int b = 0; b < m; ++b) Cm[a * m + b] = C[kept[a] * n + kept[b]];
    }
    for (int p = 0; p < 2 * np; ++p) pm[p] = pos[pairs[p]];
    return error_square_moments(s, m, am.data(), Cm.data(), mu ? mum.data() : nullptr, wm.data(), pm.data(), np, out,
                                threads);
  }
  if (n <= 4 && free_field) return on_fields(s, n, acts, C, mu, w, pairs, np, out, threads);
  return by_subsets(s, n, acts, C, mu, w, pairs, np, out, threads);
}

}  // namespace twolayer::smooth

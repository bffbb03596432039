// Population risk, gradient, Hessian and gradient descent assembled from the I2 kernels and their Jets.
#include "twolayer/population.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <vector>

#include "twolayer/gaussian.hpp"
#include "twolayer/gaussian_mean.hpp"
#include "twolayer/gaussian_smooth.hpp"
#include "twolayer/jet.hpp"
#include "twolayer/linalg.hpp"
#include "twolayer/memory.hpp"
#include "twolayer/parallel.hpp"

namespace twolayer {

void gram(const double* A, int na, const double* B, int nb, int d, double scale, double* out, int n_threads) {
  // Row panels in parallel once the product is large enough to pay for the threads. A Gram of A with itself is
  // symmetric: only its upper triangle is computed, then mirrored (bitwise the same values: the same products
  // summed in the same order).
  const bool symmetric = A == B && na == nb;
  const bool big = static_cast<long long>(na) * nb * d > 500000;
  const int threads = big ? resolve_threads(n_threads) : 1;
  const int rows_per = (na + threads - 1) / threads;
  parallel_for(static_cast<std::size_t>(threads), threads, [&](std::size_t t) {
    const int i0 = static_cast<int>(t) * rows_per, rows = std::min(rows_per, na - i0);
    if (rows > 0)
      gemm_nt(A + static_cast<std::size_t>(i0) * d, rows, B, nb, d, 1.0 / scale, out + static_cast<std::size_t>(i0) * nb,
              symmetric ? i0 : -1);
  });
  if (symmetric)
    for (int i = 0; i < na; ++i)
      for (int j = 0; j < i; ++j) out[static_cast<std::size_t>(i) * nb + j] = out[static_cast<std::size_t>(j) * nb + i];
}

namespace {

// Squared norms of the n rows of W (n x d) over scale.
void row_variances(const double* W, int n, int d, double scale, double* out) {
  for (int r = 0; r < n; ++r) {
    const double* wr = W + static_cast<std::size_t>(r) * d;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < d; ++c) s += wr[c] * wr[c];
    out[r] = s / scale;
  }
}

// The overlaps of the population: Q = W W^T / s (K x K), M = W W*^T / s (K x M), P = W* W*^T / s (M x M).
struct Grams {
  std::vector<double> Q, Mo, P;
};

Grams grams(const Population& p, int n_threads) {
  const int K = p.student.units, M = p.teacher.units, d = p.d;
  check_buffer(static_cast<std::size_t>(K + M) * (K + M), "the overlaps Q, M, P ((K + M)^2 entries)");
  Grams g{std::vector<double>(static_cast<std::size_t>(K) * K), std::vector<double>(static_cast<std::size_t>(K) * M),
          std::vector<double>(static_cast<std::size_t>(M) * M)};
  gram(p.student.W, K, p.student.W, K, d, p.scale, g.Q.data(), n_threads);
  gram(p.student.W, K, p.teacher.W, M, d, p.scale, g.Mo.data(), n_threads);
  gram(p.teacher.W, M, p.teacher.W, M, d, p.scale, g.P.data(), n_threads);
  return g;
}

// Kernel jets of every pair: student-student (i <= k; the diagonal holds the self kernel in g[0], h[0]) and
// student-teacher (i, r), for the Hessian (J = Jet); the gradient evaluates its Grads row by row (grad_row).
template <class J>
struct PairJets {
  int K, M;
  std::vector<double> Q, Mo;
  std::vector<J> ss, st;
  const J& s(int i, int k) const { return ss[static_cast<std::size_t>(i) * K + k]; }
  const J& t(int i, int r) const { return st[static_cast<std::size_t>(i) * M + r]; }
};

template <class J>
PairJets<J> pair_jets(const Population& p, int n_threads) {
  const int K = p.student.units, M = p.teacher.units, d = p.d;
  const std::size_t KK = static_cast<std::size_t>(K) * K, KM = static_cast<std::size_t>(K) * M;
  check_buffer((KK + KM) * (1 + sizeof(J) / sizeof(double)), "the Hessian's pair tables (K x (K + M) kernel jets)");
  PairJets<J> j{K, M, std::vector<double>(KK), std::vector<double>(KM), std::vector<J>(KK), std::vector<J>(KM)};
  gram(p.student.W, K, p.student.W, K, d, p.scale, j.Q.data(), n_threads);
  gram(p.student.W, K, p.teacher.W, M, d, p.scale, j.Mo.data(), n_threads);
  std::vector<double> prr(M);
  row_variances(p.teacher.W, M, d, p.scale, prr.data());
  const Activation s = p.student.act, t = p.teacher.act;
  parallel_for(static_cast<std::size_t>(K), K > 16 ? n_threads : 1, [&](std::size_t i) {
    const double qi = j.Q[i * K + i];
    j.ss[i * K + i] = i2_self(s, s, J::variable(qi, 0));
    for (int k = static_cast<int>(i) + 1; k < K; ++k)
      j.ss[i * K + k] = i2_jet<J>(s, s, qi, j.Q[i * K + k], j.Q[static_cast<std::size_t>(k) * K + k]);
    for (int r = 0; r < M; ++r) j.st[i * M + r] = i2_jet<J>(s, t, qi, j.Mo[i * M + r], prr[r]);
  });
  return j;
}

// First-argument derivatives of the student-student kernel K(w_i, w_k), i != k: (K_x, K_y) where x is Q_ii.
template <class J>
void first_arg(const PairJets<J>& j, int i, int k, double& kx, double& ky) {
  const J& jet = i < k ? j.s(i, k) : j.s(k, i);
  kx = jet.g[i < k ? 0 : 2];
  ky = jet.g[1];
}

void check_finite(const double* x, std::size_t n, const char* what) {
  double sum = 0.0;  // finite iff every entry is (0 * inf and inf - inf are NaN); a loop with no early exit vectorises
#pragma omp simd reduction(+ : sum)
  for (std::size_t i = 0; i < n; ++i) sum += 0.0 * x[i];
  if (!(sum == 0.0))
    throw std::domain_error("student.W, student.a: " + std::string(what) +
                            " is not finite: the weights are out of range (overflow), or the kernels are singular "
                            "here (an exactly aligned pair of step units)");
}

}  // namespace

double overlap_risk(const double* Q, const double* M, const double* P, const double* a, const double* v, int K_,
                    int Mt_, Activation s, Activation t) {
  const std::ptrdiff_t K = K_, Mt = Mt_;  // index products in 64 bits
  double r = 0.0;
  for (std::ptrdiff_t i = 0; i < K; ++i) {
    const double qi = Q[i * K + i];
    r += 0.5 * a[i] * a[i] * i2_self<double>(s, s, qi);
    for (std::ptrdiff_t k = i + 1; k < K; ++k) r += a[i] * a[k] * i2<double>(s, s, qi, Q[i * K + k], Q[k * K + k]);
    for (std::ptrdiff_t q = 0; q < Mt; ++q) r -= a[i] * v[q] * i2<double>(s, t, qi, M[i * Mt + q], P[q * Mt + q]);
  }
  for (std::ptrdiff_t q = 0; q < Mt; ++q) {
    r += 0.5 * v[q] * v[q] * i2_self<double>(t, t, P[q * Mt + q]);
    for (std::ptrdiff_t u = q + 1; u < Mt; ++u) r += v[q] * v[u] * i2<double>(t, t, P[q * Mt + q], P[q * Mt + u], P[u * Mt + u]);
  }
  return r;
}

double overlap_risk_mean(const double* Q, const double* M, const double* P, const double* a, const double* v,
                         const double* b, const double* bt, int K_, int Mt_, Activation s, Activation t) {
  const std::ptrdiff_t K = K_, Mt = Mt_;
  // I2 with means of the units (x, z) with variances qx, qz, covariance c and means mx, mz.
  auto pair = [](Activation f, Activation g, double qx, double c, double qz, double mx, double mz) {
    const double C[4] = {qx, c, c, qz}, mu[2] = {mx, mz};
    return i2_mean(f, g, C, mu);
  };
  auto bs = [&](std::ptrdiff_t i) { return b ? b[i] : 0.0; };
  auto bT = [&](std::ptrdiff_t r) { return bt ? bt[r] : 0.0; };
  double r = 0.0;
  for (std::ptrdiff_t i = 0; i < K; ++i) {
    const double qi = Q[i * K + i];
    r += 0.5 * a[i] * a[i] * pair(s, s, qi, qi, qi, bs(i), bs(i));
    for (std::ptrdiff_t k = i + 1; k < K; ++k) r += a[i] * a[k] * pair(s, s, qi, Q[i * K + k], Q[k * K + k], bs(i), bs(k));
    for (std::ptrdiff_t q = 0; q < Mt; ++q) r -= a[i] * v[q] * pair(s, t, qi, M[i * Mt + q], P[q * Mt + q], bs(i), bT(q));
  }
  for (std::ptrdiff_t q = 0; q < Mt; ++q) {
    const double pq = P[q * Mt + q];
    r += 0.5 * v[q] * v[q] * pair(t, t, pq, pq, pq, bT(q), bT(q));
    for (std::ptrdiff_t u = q + 1; u < Mt; ++u) r += v[q] * v[u] * pair(t, t, pq, P[q * Mt + u], P[u * Mt + u], bT(q), bT(u));
  }
  return r;
}

namespace {

// 1 / |w| of the n rows of W (n x d), 0 for a zero row.
std::vector<double> inverse_row_norms(const double* W, int n, int d) {
  std::vector<double> out(static_cast<std::size_t>(n));
  row_variances(W, n, d, 1.0, out.data());
  for (double& x : out) x = x > 0.0 ? 1.0 / std::sqrt(x) : 0.0;
  return out;
}

// I2 = (pi - theta) / (2 pi) of two step units from the rows (x, y) with inverse norms (rx, ry): theta from
// unit_cos_sin, exact at alignment (0 for a zero row, as i2).
double step_pair_value(const double* x, double rx, const double* y, double ry, int d) {
  if (!(rx > 0.0 && ry > 0.0)) return 0.0;
  const CosSin cs = unit_cos_sin(x, rx, y, ry, d);
  return std::atan2(cs.s, -cs.c) / (2.0 * kPi);
}

// The excess risk of step students against a step teacher from the weights (the angles from unit_cos_sin: a
// student on its teacher contributes exactly 0, where the cosines of the overlaps leave ~1e-9 per aligned pair).
double step_risk(const Population& p) {
  const int K = p.student.units, M = p.teacher.units, d = p.d;
  const double *W = p.student.W, *Wt = p.teacher.W, *a = p.student.a, *v = p.teacher.a;
  const std::vector<double> rs = inverse_row_norms(W, K, d), rt = inverse_row_norms(Wt, M, d);
  auto row = [d](const double* X, int i) { return X + static_cast<std::size_t>(i) * d; };
  double r = 0.0;
  for (int i = 0; i < K; ++i) {
    r += 0.5 * a[i] * a[i] * (rs[i] > 0.0 ? 0.5 : 0.0);
    for (int k = i + 1; k < K; ++k) r += a[i] * a[k] * step_pair_value(row(W, i), rs[i], row(W, k), rs[k], d);
    for (int q = 0; q < M; ++q) r -= a[i] * v[q] * step_pair_value(row(W, i), rs[i], row(Wt, q), rt[q], d);
  }
  for (int q = 0; q < M; ++q) {
    r += 0.5 * v[q] * v[q] * (rt[q] > 0.0 ? 0.5 : 0.0);
    for (int u = q + 1; u < M; ++u) r += v[q] * v[u] * step_pair_value(row(Wt, q), rt[q], row(Wt, u), rt[u], d);
  }
  return r;
}

}  // namespace

double population_risk(const Population& p, int n_threads) {
  if (p.student.act == Activation::Step && p.teacher.act == Activation::Step) return step_risk(p);
  const Grams o = grams(p, n_threads);
  return overlap_risk(o.Q.data(), o.Mo.data(), o.P.data(), p.student.a, p.teacher.a, p.student.units, p.teacher.units,
                      p.student.act, p.teacher.act);
}

namespace {

// Kernel Grads of one row of pairs, (x, y[k], z[k]) for k < n, into structure-of-arrays outputs v, gx, gy, gz;
// r = angle_norm(activation, variance) of the units (rx, rz[k]) serve the angle forms of the erf-erf, relu-relu and
// step-step pairs (angle_pair_grad). The activations are compile-time constants, so that i2 inlines with its switch
// folded and the loop vectorises (population.cpp is built without errno and FP traps, CMakeLists.txt; the outputs
// never alias the inputs, and GCC needs __restrict to see it).
template <Activation A, Activation B>
[[gnu::flatten]] void grad_row(double x, double rx, const double* __restrict y, const double* __restrict z,
                               const double* __restrict rz, int n, double* __restrict v, double* __restrict gx,
                               double* __restrict gy, double* __restrict gz) {
  if constexpr (A == B && (A == Activation::Erf || A == Activation::Relu || A == Activation::Step)) {
    const double nx = x * rx;
    for (int k = 0; k < n; ++k) {
      const PairGrad j = angle_pair_grad<A>(nx, rx, z[k] * rz[k], rz[k], y[k]);
      v[k] = j.v;
      gx[k] = j.gx;
      gy[k] = j.gy;
      gz[k] = j.gz;
    }
  } else {
    (void)rx;
    (void)rz;
    for (int k = 0; k < n; ++k) {
      const Grad j = i2_jet<Grad>(A, B, x, y[k], z[k]);
      v[k] = j.v;
      gx[k] = j.g[0];
      gy[k] = j.g[1];
      gz[k] = j.g[2];
    }
  }
}

// Step-step pairs of one row from the weights (for a step student with a step partner): unit x (inverse norm ux)
// against the n rows of Y (stride d, inverse norms uy[k]); x and y are the variances (x, z[k]) of the kernel
// (rx = x^-1/2, rz[k]). The angle comes from unit_cos_sin, not from the cosine of the Gram entry, so that the
// force of a pair stays exact down to angles ~1e-13 (kStepUnresolvedSin) where the cosine loses it below ~1.5e-8.
void step_row(const double* x, double ux, double rx, const double* Y, const double* uy, const double* rz, int n, int d,
              double* v, double* gx, double* gy, double* gz) {
  for (int k = 0; k < n; ++k) {
    const bool live = ux > 0.0 && uy[k] > 0.0;
    const CosSin cs = live ? unit_cos_sin(x, ux, Y + static_cast<std::size_t>(k) * d, uy[k], d) : CosSin{0.0, 0.0};
    const PairGrad g = step_pair_grad(rx, rz[k], cs.c, cs.s < kStepUnresolvedSin ? 0.0 : cs.s);
    v[k] = live ? std::atan2(cs.s, -cs.c) / (2.0 * kPi) : 0.0;
    gx[k] = live ? g.gx : 0.0;
    gy[k] = live ? g.gy : 0.0;
    gz[k] = live ? g.gz : 0.0;
  }
}

using GradRowFn = void (*)(double, double, const double*, const double*, const double*, int, double*, double*,
                        double*, double*);

// grad_row<a, b> for runtime activations; a pair with a smooth unit outside the closed-form five runs the same loop
// with run-time activations (the generic engine of gaussian_smooth.hpp dominates its cost).
struct GradRow {
  GradRowFn fn;
  Activation a, b;
  void operator()(double x, double rx, const double* y, const double* z, const double* rz, int n, double* v, double* gx,
                  double* gy, double* gz) const {
    if (fn) return fn(x, rx, y, z, rz, n, v, gx, gy, gz);
    for (int k = 0; k < n; ++k) {
      const Grad j = i2_jet<Grad>(a, b, x, y[k], z[k]);
      v[k] = j.v;
      gx[k] = j.g[0];
      gy[k] = j.g[1];
      gz[k] = j.g[2];
    }
  }
};
GradRow grad_row_for(Activation a, Activation b) {
  using A = Activation;
  if (!is_classic(a) || !is_classic(b)) return {nullptr, a, b};
  static constexpr GradRowFn rows[5][5] = {
      {grad_row<A::Linear, A::Linear>, grad_row<A::Linear, A::Erf>, grad_row<A::Linear, A::Relu>,
       grad_row<A::Linear, A::Step>, grad_row<A::Linear, A::Quadratic>},
      {grad_row<A::Erf, A::Linear>, grad_row<A::Erf, A::Erf>, grad_row<A::Erf, A::Relu>, grad_row<A::Erf, A::Step>,
       grad_row<A::Erf, A::Quadratic>},
      {grad_row<A::Relu, A::Linear>, grad_row<A::Relu, A::Erf>, grad_row<A::Relu, A::Relu>,
       grad_row<A::Relu, A::Step>, grad_row<A::Relu, A::Quadratic>},
      {grad_row<A::Step, A::Linear>, grad_row<A::Step, A::Erf>, grad_row<A::Step, A::Relu>,
       grad_row<A::Step, A::Step>, grad_row<A::Step, A::Quadratic>},
      {grad_row<A::Quadratic, A::Linear>, grad_row<A::Quadratic, A::Erf>, grad_row<A::Quadratic, A::Relu>,
       grad_row<A::Quadratic, A::Step>, grad_row<A::Quadratic, A::Quadratic>}};
  return {rows[static_cast<int>(a)][static_cast<int>(b)], a, b};
}

// dW = ((diag(alpha) + B) W + E W*) / s with B_ik = a_i a_k dK/dQ_ik (i != k), E_ir = -a_i v_r dL/dM_ir and alpha_i
// collecting the variance derivatives; da_i = sum_k a_k K_ik - t_i with t_i = sum_r v_r L_ir (returned in t).
// Two passes: the student pairs' kernel Grads, each pair once (i < k), into full K x K tables (value, dK/dQ_ii in
// row i, dK/dQ_ik); then one block of rows per thread: its teacher pairs, its alpha, B and E rows and its rows of the
// two products (all rows of a block in one product, so that each panel of W is reused from L1 across them).
void gradient_impl(const Population& p, double* dW, double* da, double* t, int n_threads) {
  const int K = p.student.units, M = p.teacher.units, d = p.d;
  const std::size_t KK = static_cast<std::size_t>(K) * K;
  const double *a = p.student.a, *v = p.teacher.a, *W = p.student.W, *Wt = p.teacher.W;
  // Gram blocks and the student pair tables, uninitialised (every entry is written before it is read).
  check_buffer(4 * KK + static_cast<std::size_t>(K) * M, "the gradient's pair tables (4 K^2 + K M entries)");
  const std::unique_ptr<double[]> mem(new double[4 * KK + static_cast<std::size_t>(K) * M]);
  double *Q = mem.get(), *SV = Q + KK, *SX = SV + KK, *SY = SX + KK, *Mo = SY + KK;
  std::vector<double> qd(K), pd(M), rq(K), rp(M);
  gram(W, K, W, K, d, p.scale, Q, n_threads);
  gram(W, K, Wt, M, d, p.scale, Mo, n_threads);
  for (int i = 0; i < K; ++i) qd[i] = Q[static_cast<std::size_t>(i) * K + i];
  row_variances(Wt, M, d, p.scale, pd.data());
  const Activation sa = p.student.act, ta = p.teacher.act;
  // Per-unit normalisers of the angle-form rows.
  for (int i = 0; i < K; ++i) rq[i] = angle_norm(sa, qd[i]);
  for (int r = 0; r < M; ++r) rp[r] = angle_norm(ta, pd[r]);
  const GradRow student_row = grad_row_for(sa, sa), teacher_row = grad_row_for(sa, ta);
  // Step students: pairs among them (and with step teachers) from the weights' angles (step_row).
  const bool step_s = sa == Activation::Step, step_t = step_s && ta == Activation::Step;
  const std::vector<double> us = step_s ? inverse_row_norms(W, K, d) : std::vector<double>(),
                            ut = step_t ? inverse_row_norms(Wt, M, d) : std::vector<double>();
  const double inv = 1.0 / p.scale;
  const bool big = static_cast<long long>(K) * (K + M) * d > 200000;
  const int threads = big ? resolve_threads(n_threads) : 1;
  // Pass 1: student pairs (i, k > i) of row i, mirrored into column i (dK/dQ_kk is the x-derivative of row k).
  parallel_for(static_cast<std::size_t>(K), threads, [&](std::size_t iu) {
    const int i = static_cast<int>(iu), n = K - i - 1;
    const std::size_t o = iu * K + iu;
    SV[o] = SX[o] = SY[o] = 0.0;  // the pair (i, i) is the self term
    if (n == 0) return;
    thread_local std::vector<double> gz;  // dK/dQ_kk of the row's pairs (kept across calls: no allocation)
    gz.resize(static_cast<std::size_t>(n));
    if (step_s)
      step_row(W + iu * d, us[i], rq[i], W + (iu + 1) * d, &us[i + 1], &rq[i + 1], n, d, SV + o + 1, SX + o + 1,
               SY + o + 1, gz.data());
    else
      student_row(qd[i], rq[i], Q + o + 1, &qd[i + 1], &rq[i + 1], n, SV + o + 1, SX + o + 1, SY + o + 1, gz.data());
    for (int k = i + 1, e = 0; k < K; ++k, ++e) {
      const std::size_t m = static_cast<std::size_t>(k) * K + iu;
      SV[m] = SV[o + 1 + e];
      SY[m] = SY[o + 1 + e];
      SX[m] = gz[e];
    }
  }, 1, 4);
  // Pass 2: rows.
  const int rows_per = (K + threads - 1) / threads;
  parallel_for(static_cast<std::size_t>(threads), threads, [&](std::size_t blk) {
    const int i0 = static_cast<int>(blk) * rows_per, rows = std::min(rows_per, K - i0);
    if (rows <= 0) return;
    // Uninitialised scratch (every entry is written before it is read): a teacher row, then the B and E blocks.
    const std::unique_ptr<double[]> buf(new double[4 * static_cast<std::size_t>(M) +
                                                   static_cast<std::size_t>(rows) * (K + M)]);
    double *kv = buf.get(), *kx = kv + M, *ky = kx + M, *kz = ky + M, *B = kz + M;
    double* E = B + static_cast<std::size_t>(rows) * K;
    double* g = dW + static_cast<std::size_t>(i0) * d;
    for (int r = 0; r < rows; ++r) {
      const int i = i0 + r;
      const double qi = qd[i];
      const Grad self = i2_self(sa, sa, Grad::variable(qi, 0));
      const double *sv = SV + static_cast<std::size_t>(i) * K, *sx = SX + static_cast<std::size_t>(i) * K,
                   *sy = SY + static_cast<std::size_t>(i) * K;
      double* Bi = B + static_cast<std::size_t>(r) * K;
      double ax = 0.0, av = 0.0;  // vectorised sums (a serial chain of dependent adds would cost more than the jets)
#pragma omp simd reduction(+ : ax, av)
      for (int k = 0; k < K; ++k) {
        ax += a[k] * sx[k];
        av += a[k] * sv[k];
        Bi[k] = a[i] * a[k] * sy[k];
      }
      if (step_t)
        step_row(W + static_cast<std::size_t>(i) * d, us[i], rq[i], Wt, ut.data(), rp.data(), M, d, kv, kx, ky, kz);
      else
        teacher_row(qi, rq[i], Mo + static_cast<std::size_t>(i) * M, pd.data(), rp.data(), M, kv, kx, ky, kz);
      double ti = 0.0, tx = 0.0;
      double* Ei = E + static_cast<std::size_t>(r) * M;
#pragma omp simd reduction(+ : ti, tx)
      for (int q = 0; q < M; ++q) {
        tx += v[q] * kx[q];
        ti += v[q] * kv[q];
        Ei[q] = -a[i] * v[q] * ky[q];
      }
      Bi[i] = a[i] * a[i] * self.g[0] + 2.0 * a[i] * (ax - tx);  // alpha_i: diag(alpha) W joins B W
      da[i] = a[i] * self.v + av - ti;
      t[i] = ti;
    }
    gemm_nn(B, K, W, rows, K, d, g, inv, false);
    gemm_nn(E, M, Wt, rows, M, d, g, inv, true);
  });
  check_finite(dW, static_cast<std::size_t>(K) * d, "population gradient");
}

}  // namespace

void population_gradient(const Population& p, double* dW, double* da, int n_threads) {
  std::vector<double> t(p.student.units);
  gradient_impl(p, dW, da, t.data(), n_threads);
}

double population_risk_gradient(const Population& p, double* dW, double* da, int n_threads) {
  // R = 1/2 sum_ik a_i a_k K_ik - sum_i a_i t_i + T = 1/2 sum_i a_i (dR/da_i - t_i) + T, with T the teacher's
  // self term (overlap_risk with no student units).
  const int K = p.student.units, M = p.teacher.units;
  std::vector<double> t(K), P(static_cast<std::size_t>(M) * M);
  gradient_impl(p, dW, da, t.data(), n_threads);
  double r;
  if (p.student.act == Activation::Step && p.teacher.act == Activation::Step) {
    Population teacher_only = p;
    teacher_only.student.units = 0;
    r = step_risk(teacher_only);
  } else {
    gram(p.teacher.W, M, p.teacher.W, M, p.d, p.scale, P.data(), 1);
    r = overlap_risk(nullptr, nullptr, P.data(), nullptr, p.teacher.a, 0, M, p.student.act, p.teacher.act);
  }
  for (int i = 0; i < K; ++i) r += 0.5 * p.student.a[i] * (da[i] - t[i]);
  return r;
}

void population_hessian(const Population& p, bool train_readout, double* H, int n_threads) {
  const PairJets<Jet> j = pair_jets<Jet>(p, n_threads);
  const int K = j.K, M = j.M, d = p.d;
  const double *a = p.student.a, *v = p.teacher.a, *W = p.student.W, *Wt = p.teacher.W;
  const double inv = 1.0 / p.scale, inv2 = inv * inv;
  const std::size_t n = static_cast<std::size_t>(K) * d + (train_readout ? K : 0);
  const std::size_t wa = static_cast<std::size_t>(K) * d;  // offset of the a-block
  auto Hat = [&](std::size_t r, std::size_t c) -> double& { return H[r * n + c]; };

  parallel_for(static_cast<std::size_t>(K), n_threads, [&](std::size_t iu) {
    const int i = static_cast<int>(iu);
    const double* u = W + iu * d;
    const std::size_t ri = iu * d;
    // Diagonal block: sum over partners of c_uu u u^T + c_uv (u v^T + v u^T) + c_vv v v^T + c_I I, written as
    // rank updates in place.
    const Jet& self = j.s(i, i);
    double cI = a[i] * a[i] * self.g[0] * inv;  // 1/2 a^2 (2 S'/s)
    double cuu = 2.0 * a[i] * a[i] * self.h[0] * inv2;  // 1/2 a^2 (4 S''/s^2)
    for (std::size_t r = 0; r < static_cast<std::size_t>(d); ++r)
      for (std::size_t c = 0; c < static_cast<std::size_t>(d); ++c) Hat(ri + r, ri + c) = 0.0;
    auto add_partner = [&](const double* vv, double f, double kxx, double kxy, double kyy, double kx) {
      // f * [ (4 kxx u u^T + 2 kxy (u v^T + v u^T) + kyy v v^T) / s^2 + 2 kx I / s ]
      const double A = 4.0 * f * kxx * inv2, B = 2.0 * f * kxy * inv2, C = f * kyy * inv2;
      cI += 2.0 * f * kx * inv;
      for (int r = 0; r < d; ++r) {
        double* row = &Hat(ri + r, ri);
        const double ur = u[r], vr = vv[r];
#pragma omp simd
        for (int c = 0; c < d; ++c) row[c] += A * ur * u[c] + B * (ur * vv[c] + vr * u[c]) + C * vr * vv[c];
      }
    };
    for (int k = 0; k < K; ++k) {
      if (k == i) continue;
      const double* wk = W + static_cast<std::size_t>(k) * d;
      const Jet& J = i < k ? j.s(i, k) : j.s(k, i);
      const int x = i < k ? 0 : 2;  // index of Q_ii in this Jet
      add_partner(wk, a[i] * a[k], J.hess(x, x), J.hess(x, 1), J.hess(1, 1), J.g[x]);
    }
    for (int r = 0; r < M; ++r) {
      const Jet& L = j.t(i, r);
      add_partner(Wt + static_cast<std::size_t>(r) * d, -a[i] * v[r], L.hess(0, 0), L.hess(0, 1), L.hess(1, 1),
                  L.g[0]);
    }
    for (int r = 0; r < d; ++r) {
      double* row = &Hat(ri + r, ri);
      const double ur = u[r];
      for (int c = 0; c < d; ++c) row[c] += cuu * ur * u[c];
      row[r] += cI;
    }
    // Off-diagonal blocks (i, k), i != k: a_i a_k [ (2 Kxy u u^T + 4 Kxz u v^T + Kyy v u^T + 2 Kyz v v^T)/s^2
    // + Ky I / s ], with x the variance of w_i and z that of w_k.
    for (int k = 0; k < K; ++k) {
      if (k == i) continue;
      const double* vv = W + static_cast<std::size_t>(k) * d;
      const Jet& J = i < k ? j.s(i, k) : j.s(k, i);
      const int x = i < k ? 0 : 2, z = 2 - x;
      const double f = a[i] * a[k] * inv2;
      const double A = 2.0 * f * J.hess(x, 1), B = 4.0 * f * J.hess(x, z), C = f * J.hess(1, 1),
                   D = 2.0 * f * J.hess(1, z), E = a[i] * a[k] * J.g[1] * inv;
      const std::size_t rk = static_cast<std::size_t>(k) * d;
      for (int r = 0; r < d; ++r) {
        double* row = &Hat(ri + r, rk);
        const double ur = u[r], vr = vv[r];
#pragma omp simd
        for (int c = 0; c < d; ++c) row[c] = A * ur * u[c] + B * ur * vv[c] + C * vr * u[c] + D * vr * vv[c];
        row[r] += E;
      }
    }
    if (!train_readout) return;
    // Mixed (w_i, a_k) entries and the (a, a) block.
    std::vector<double> g(d);
    for (int k = 0; k < K; ++k) {
      if (k == i) {
        for (int c = 0; c < d; ++c) g[c] = 2.0 * a[i] * self.g[0] * u[c] * inv;
        for (int m = 0; m < K; ++m) {
          if (m == i) continue;
          double kx, ky;
          first_arg(j, i, m, kx, ky);
          const double* wm = W + static_cast<std::size_t>(m) * d;
          for (int c = 0; c < d; ++c) g[c] += a[m] * (2.0 * kx * u[c] + ky * wm[c]) * inv;
        }
        for (int r = 0; r < M; ++r) {
          const Jet& L = j.t(i, r);
          const double* wr = Wt + static_cast<std::size_t>(r) * d;
          for (int c = 0; c < d; ++c) g[c] -= v[r] * (2.0 * L.g[0] * u[c] + L.g[1] * wr[c]) * inv;
        }
        Hat(wa + i, wa + i) = self.v;
      } else {
        double kx, ky;
        first_arg(j, i, k, kx, ky);
        const double* wk = W + static_cast<std::size_t>(k) * d;
        for (int c = 0; c < d; ++c) g[c] = a[i] * (2.0 * kx * u[c] + ky * wk[c]) * inv;
        Hat(wa + i, wa + k) = i < k ? j.s(i, k).v : j.s(k, i).v;
      }
      for (int c = 0; c < d; ++c) {
        Hat(ri + c, wa + k) = g[c];
        Hat(wa + k, ri + c) = g[c];
      }
    }
  });
  check_finite(H, n * n, "population Hessian");
}

namespace {

// Appends the records of the student in p to out: risk r, Q, M, a and the biases b (null: none); false (nothing
// appended) where r is not finite.
bool append_record(DescentResult& out, const Population& p, const double* b, double r, int n_threads) {
  if (!std::isfinite(r)) return false;
  const int K = p.student.units, M = p.teacher.units, d = p.d;
  const std::size_t q0 = out.Q.size(), m0 = out.M.size();
  out.Q.resize(q0 + static_cast<std::size_t>(K) * K);
  out.M.resize(m0 + static_cast<std::size_t>(K) * M);
  gram(p.student.W, K, p.student.W, K, d, p.scale, out.Q.data() + q0, n_threads);
  gram(p.student.W, K, p.teacher.W, M, d, p.scale, out.M.data() + m0, n_threads);
  out.a.insert(out.a.end(), p.student.a, p.student.a + K);
  if (b) out.bias.insert(out.bias.end(), b, b + K);
  out.risk.push_back(r);
  return true;
}

// The descent loop shared by the paths with and without biases: record(step) appends the records of the current
// state and returns false where its risk is not finite; advance(step, rate) takes one step with the learning rates
// times rate (the schedule's s(n), 1 without one) and returns false where the gradient is not usable (diverged).
template <class Record, class Advance>
DescentResult descend_loop(long long steps, const std::vector<long long>& record_steps, const Schedule* schedule,
                           Record&& record, Advance&& advance) {
  const bool scheduled = schedule != nullptr && !schedule->identity();
  DescentResult out;
  std::size_t next = 0;
  long long step = 0;
  try {
    for (; step <= steps; ++step) {
      if (next < record_steps.size() && record_steps[next] == step) {
        if (!record(out)) {
          out.status = "diverged";
          out.stop_step = step;
          return out;
        }
        ++out.recorded;
        ++next;
      }
      if (step == steps) break;
      throw_if_cancelled();
      const double rate = scheduled ? schedule->at_step(step, 1.0) : 1.0;  // lr(n) = lr s(n), n iterations
      if (!advance(step, scheduled, rate)) {
        out.status = "diverged";
        out.stop_step = step;
        return out;
      }
    }
  } catch (const Interrupted&) {  // the records so far are kept
    out.status = "interrupted";
    out.stop_step = step;
  }
  return out;
}

}  // namespace

DescentResult population_descend(double* W, double* a, const Population& p0, double lr, double lr_readout,
                                 long long steps, const std::vector<long long>& record_steps, int n_threads,
                                 const Schedule* schedule) {
  Population p = p0;
  p.student.W = W;
  p.student.a = a;
  const int K = p.student.units, M = p.teacher.units, d = p.d;
  check_buffer(static_cast<std::size_t>(K) * (K + M), "the recorded overlaps Q, M (K (K + M) entries)");
  std::vector<double> dW(static_cast<std::size_t>(K) * d), da(K);
  auto record = [&](DescentResult& out) {
    return append_record(out, p, nullptr, population_risk(p, n_threads), n_threads);
  };
  auto advance = [&](long long, bool scheduled, double rate) {
    try {
      population_gradient(p, dW.data(), da.data(), n_threads);
    } catch (const std::domain_error&) {
      return false;
    }
    const double lr_n = scheduled ? lr * rate : lr, lr_a_n = scheduled ? lr_readout * rate : lr_readout;
    for (std::size_t c = 0; c < dW.size(); ++c) W[c] -= lr_n * dW[c];
    if (lr_a_n != 0.0)
      for (int i = 0; i < K; ++i) a[i] -= lr_a_n * da[i];
    return true;
  };
  return descend_loop(steps, record_steps, schedule, record, advance);
}

// ---------------------------------------------------------------------------------------------------------------
// With biases: pair moments of the kernels with means, assembled by Stein's lemma (population.hpp).

namespace {

// The orders (p, q) of the pair moments E[s^(p)(l_i) g^(q)(l_k)]: the gradient needs the first four, the Hessian all.
constexpr int kOrders[9][2] = {{0, 0}, {1, 0}, {2, 0}, {1, 1}, {2, 1}, {3, 0}, {3, 1}, {2, 2}, {4, 0}};
enum Order : int { m00, m10, m20, m11, m21, m30, m31, m22, m40 };
constexpr int kGradientOrders = 4, kHessianOrders = 9;

// A unit with itself: its terms of the risk are 1/2 a_i^2 E[g(l_i)], g = s^2, a function of one unit; by Stein its
// derivatives are h_n = E[g^(n)(l)] / 2, l ~ N(b, q) (d/db: E[g'], d/du: u E[g''], d2/du2: E[g''] I + E[g^(4)] u u^T,
// ...). h[n] for n <= n_max: smooth s through pair moments at the singular covariance (h1 = E[s s'],
// h2 = E[s s''] + E[s'^2], h3 = E[s s'''] + 3 E[s'' s'], h4 = E[s s^(4)] + 4 E[s''' s'] + 3 E[s''^2]); relu:
// g^(n) = 2 relu^(n-1) for n >= 1 (E[relu], E[step], E[delta], E[delta']); step: g = s, E[step] and
// E[delta^(n-1)(l)] = He_(n-1)(z) phi(z) / sd^n, z = -b / sd, in closed form (the products of deltas in s'^2 and
// s s'' one by one are undefined, their sum g'' / 2 is not).
void unit_self(Activation s, double q, double b, int n_max, double* h) {
  auto pm = [&](int i, int j) { return pair_moment(s, i, s, j, b, b, q, q, q); };
  auto one = [&](int i) { return pair_moment(s, i, Activation::Linear, 1, b, 0.0, q, 0.0, 1.0); };  // E[s^(i)(l)]
  if (s == Activation::Step) {
    h[0] = 0.5 * one(0);
    const double sd = q > 0.0 ? std::sqrt(q) : 0.0;
    if (!(sd > 0.0)) {  // a constant unit: its deltas are 0 away from their root (and infinite at it: pair_moment raises)
      for (int n = 1; n <= n_max; ++n) h[n] = 0.5 * one(1);
      return;
    }
    const double z = -b / sd, phi = 0.39894228040143267794 * std::exp(-0.5 * z * z);
    const double he[4] = {1.0, z, z * z - 1.0, z * z * z - 3.0 * z};
    double scale = phi / sd;
    for (int n = 1; n <= n_max; ++n, scale /= sd) h[n] = 0.5 * he[n - 1] * scale;
    return;
  }
  h[0] = 0.5 * pm(0, 0);
  if (s == Activation::Relu) {
    for (int n = 1; n <= n_max; ++n) h[n] = one(n - 1);
    return;
  }
  if (n_max >= 1) h[1] = pm(1, 0);
  if (n_max >= 2) h[2] = pm(2, 0) + pm(1, 1);
  if (n_max >= 3) h[3] = pm(3, 0) + 3.0 * pm(2, 1);
  if (n_max >= 4) h[4] = pm(4, 0) + 4.0 * pm(3, 1) + 3.0 * pm(2, 2);
}

// A pair of step units with biases, l = w.x / sqrt(s) + b: adds weight * dE/dw_i to g (length d) and returns dE/db_i,
// E = E[step(l_i) step(l_k)] = Phi2(beta_i, beta_k; cos theta), beta = b / sigma, sigma = |w| / sqrt(s):
//   dE/db_i = phi(beta_i) Phi((beta_k - cos theta beta_i) / sin theta) / sigma_i,
//   dE/dw_i = -beta_i sigma_i dE/db_i w_i / |w_i|^2
//             + exp(-(beta_i^2 - 2 cos theta beta_i beta_k + beta_k^2) / (2 sin^2 theta)) (u_k - cos theta u_i)
//               / (2 pi sin theta |w_i|)
// (u = w / |w|), everything from the chords of the unit vectors (unit_chords): near alignment 1 - cos theta =
// dm / 2, u_k - cos theta u_i = (u_k - u_i) + u_i dm / 2 and the exponent (beta_i - beta_k)^2 / (2 sin^2 theta) +
// 2 beta_i beta_k / dp; near opposition the same about -u_k (1 + cos theta = dp / 2). The Stein form of the
// gradient (population.hpp) from the Gram entries adds two terms ~1 / theta that cancel to the force, and its
// cosine rounds to +-1 below theta ~ 1e-8 (measured: the force 100% wrong at 1e-8, 1e-4 relative at 1e-6); these
// keep ~eps / theta. Below kStepUnresolvedSin the force along u_k - cos theta u_i is 0, and with thresholds that
// also agree to it the argument of Phi is 0 (the centres of the subgradients).
double step_pair_force_mean(const double* wi, double bi, const double* wk, double bk, int d, double scale,
                            double weight, double* g) {
  double ni = 0.0, nk = 0.0;
  for (int c = 0; c < d; ++c) ni += wi[c] * wi[c], nk += wk[c] * wk[c];
  ni = std::sqrt(ni), nk = std::sqrt(nk);
  const double ri = 1.0 / ni, rk = 1.0 / nk, rs = std::sqrt(scale);
  const UnitChords h = unit_chords(wi, ri, wk, rk, d);
  const double sn = 0.5 * std::sqrt(h.dm * h.dp);
  const double sigma_i = ni / rs, beta_i = bi / sigma_i, beta_k = bk * rs * rk;
  const bool near0 = h.dm <= h.dp;  // theta <= pi / 2
  // beta_k - cos theta beta_i, and the exponent times sin^2 theta's reciprocal as parts that stay exact
  const double num = near0 ? (beta_k - beta_i) + 0.5 * h.dm * beta_i : (beta_k + beta_i) - 0.5 * h.dp * beta_i;
  const double gap = near0 ? beta_i - beta_k : beta_i + beta_k;
  // below the resolution in both the angle and the thresholds the pair sits on its cusp: the centre of the
  // subgradient, Phi(0) (else the rounding of equal thresholds would pick one side)
  const double inf = std::numeric_limits<double>::infinity();
  const bool unresolved = sn < kStepUnresolvedSin;
  const double arg = !unresolved ? num / sn
                     : std::fabs(num) < kStepUnresolvedSin ? 0.0
                                                         : (num > 0.0 ? inf : -inf);
  const double P = 0.39894228040143267794 * std::exp(-0.5 * beta_i * beta_i) * 0.5 * std::erfc(-arg / kSqrt2);
  const double radial = -weight * beta_i * P * ri * ri;
  for (int c = 0; c < d; ++c) g[c] += radial * wi[c];
  if (sn >= kStepUnresolvedSin) {
    const double e =
        0.5 * (gap / sn) * (gap / sn) + (near0 ? 2.0 * beta_i * beta_k / h.dp : -2.0 * beta_i * beta_k / h.dm);
    const double t = weight * std::exp(-e) / (2.0 * kPi * sn) * ri;
    if (near0)
      for (int c = 0; c < d; ++c) g[c] += t * ((wk[c] * rk - wi[c] * ri) + 0.5 * h.dm * wi[c] * ri);
    else
      for (int c = 0; c < d; ++c) g[c] += t * ((wk[c] * rk + wi[c] * ri) - 0.5 * h.dp * wi[c] * ri);
  }
  return P / sigma_i;
}

// The pair moments of every ordered student pair (i, k) and student-teacher pair (i, r), lambda_i first, on the
// pair's block of (Q, M, P) and means (b_i, b_k) or (b_i, bt_r). The self pairs (i, i) are 0 here: a unit with
// itself enters through unit_self.
struct MeanMoments {
  int K, M, n;
  std::vector<double> Q, Mo, ss, st;  // ss (K, K, n), st (K, M, n)
  double s(int o, int i, int k) const { return ss[(static_cast<std::size_t>(i) * K + k) * n + o]; }
  double t(int o, int i, int r) const { return st[(static_cast<std::size_t>(i) * M + r) * n + o]; }
  // sum_{k != i} a_k E[s^(p)(l_i) s(l_k)] - sum_r v_r E[s^(p)(l_i) t(l*_r)] (o = (p, 0)): rho_p without the self pair.
  double residual(int o, int i, const double* a, const double* v) const {
    double r = 0.0;
    for (int k = 0; k < K; ++k) r += a[k] * s(o, i, k);
    for (int q = 0; q < M; ++q) r -= v[q] * t(o, i, q);
    return r;
  }
};

MeanMoments mean_moments(const Population& p, const Biases& b, int orders, int n_threads) {
  const int K = p.student.units, M = p.teacher.units, d = p.d;
  const std::size_t KK = static_cast<std::size_t>(K) * K, KM = static_cast<std::size_t>(K) * M;
  check_buffer((KK + KM) * (1 + orders), "the pair moments with biases (K (K + M) pairs)");
  MeanMoments m{K, M, orders, std::vector<double>(KK), std::vector<double>(KM), std::vector<double>(KK * orders),
                std::vector<double>(KM * orders)};
  std::vector<double> pd(M);
  gram(p.student.W, K, p.student.W, K, d, p.scale, m.Q.data(), n_threads);
  gram(p.student.W, K, p.teacher.W, M, d, p.scale, m.Mo.data(), n_threads);
  row_variances(p.teacher.W, M, d, p.scale, pd.data());
  const Activation sa = p.student.act, ta = p.teacher.act;
  auto bs = [&](int i) { return b.student ? b.student[i] : 0.0; };
  auto bt = [&](int r) { return b.teacher ? b.teacher[r] : 0.0; };
  // The moments of one pair into out: a pair of two smooth units without closed-form smoothing (tanh, ...) takes its
  // even orders from one call of the lattice rule (gaussian_smooth.hpp moments: what i2_mean, and so the risk, uses),
  // the odd ones and every other pair from pair_moment.
  auto pair = [&](Activation g, double mu1, double mu2, double x, double y, double z, double* out) {
    double even[smooth::kMoments];
    const bool lattice = smooth::is_smooth(sa) && !is_classic(sa) && smooth::is_smooth(g) && !is_classic(g) &&
                         smooth::moments(sa, g, mu1, mu2, x, y, z, orders > kGradientOrders ? 2 : 1, even);
    // (the gradient's step pairs take their forces from the weights, step_pair_force_mean: of their moments only
    // E[step step] is read, and the others are singular where the units align)
    const bool step_pair = orders == kGradientOrders && sa == Activation::Step && g == Activation::Step;
    for (int o = 0; o < orders; ++o) {
      const int pp = kOrders[o][0], qq = kOrders[o][1];
      out[o] = lattice && (pp + qq) % 2 == 0 ? even[smooth::moment_index(pp, qq)]
               : step_pair && o != m00       ? 0.0
                                             : pair_moment(sa, pp, g, qq, mu1, mu2, x, y, z);
    }
  };
  parallel_for(KK + KM, n_threads, [&](std::size_t e) {
    if (e < KK) {
      const int i = static_cast<int>(e / K), k = static_cast<int>(e % K);
      const double x = m.Q[static_cast<std::size_t>(i) * K + i], y = m.Q[e], z = m.Q[static_cast<std::size_t>(k) * K + k];
      if (i == k)
        std::fill(&m.ss[e * orders], &m.ss[e * orders] + orders, 0.0);
      else
        pair(sa, bs(i), bs(k), x, y, z, &m.ss[e * orders]);
    } else {
      const std::size_t f = e - KK;
      const int i = static_cast<int>(f / M), r = static_cast<int>(f % M);
      pair(ta, bs(i), bt(r), m.Q[static_cast<std::size_t>(i) * K + i], m.Mo[f], pd[r], &m.st[f * orders]);
    }
  }, 1, 1);
  return m;
}

}  // namespace

double population_risk_mean(const Population& p, const Biases& b, int n_threads) {
  const Grams o = grams(p, n_threads);
  return overlap_risk_mean(o.Q.data(), o.Mo.data(), o.P.data(), p.student.a, p.teacher.a, b.student, b.teacher,
                           p.student.units, p.teacher.units, p.student.act, p.teacher.act);
}

void population_gradient_mean(const Population& p, const Biases& b, double* dW, double* da, double* db,
                              int n_threads) {
  const MeanMoments m = mean_moments(p, b, kGradientOrders, n_threads);
  const int K = m.K, M = m.M, d = p.d;
  const double *a = p.student.a, *v = p.teacher.a, *W = p.student.W, *Wt = p.teacher.W;
  // step students: their pairs with step units from the weights (step_pair_force_mean), not the Stein form
  const bool step_s = p.student.act == Activation::Step, step_t = step_s && p.teacher.act == Activation::Step;
  auto bs = [&](int i) { return b.student ? b.student[i] : 0.0; };
  auto bt = [&](int r) { return b.teacher ? b.teacher[r] : 0.0; };
  for (int i = 0; i < K; ++i) {
    double* g = dW + static_cast<std::size_t>(i) * d;
    double h[3];
    unit_self(p.student.act, m.Q[static_cast<std::size_t>(i) * K + i], bs(i), 2, h);
    // rho_n without the step pairs
    auto rho = [&](int o) {
      double r = 0.0;
      for (int k = 0; k < K && !step_s; ++k) r += a[k] * m.s(o, i, k);
      for (int q = 0; q < M && !step_t; ++q) r -= v[q] * m.t(o, i, q);
      return r;
    };
    const double f = a[i] / p.scale, rho2 = rho(m20) + a[i] * h[2];  // with the self pair's
    const double* wi = W + static_cast<std::size_t>(i) * d;
    for (int c = 0; c < d; ++c) g[c] = rho2 * wi[c];
    double pull = rho(m10);  // E[s'(l_i) E] over the other units
    for (int k = 0; k < K; ++k) {
      const double* wk = W + static_cast<std::size_t>(k) * d;
      if (step_s) {
        if (k != i) pull += a[k] * step_pair_force_mean(wi, bs(i), wk, bs(k), d, p.scale, a[k] * p.scale, g);
        continue;
      }
      const double ck = a[k] * m.s(m11, i, k);
      for (int c = 0; c < d; ++c) g[c] += ck * wk[c];
    }
    for (int r = 0; r < M; ++r) {
      const double* wr = Wt + static_cast<std::size_t>(r) * d;
      if (step_t) {
        pull -= v[r] * step_pair_force_mean(wi, bs(i), wr, bt(r), d, p.scale, -v[r] * p.scale, g);
        continue;
      }
      const double cr = v[r] * m.t(m11, i, r);
      for (int c = 0; c < d; ++c) g[c] -= cr * wr[c];
    }
    for (int c = 0; c < d; ++c) g[c] *= f;
    da[i] = m.residual(m00, i, a, v) + 2.0 * a[i] * h[0];
    db[i] = a[i] * (pull + a[i] * h[1]);
  }
}

// With u_i = w_i / sqrt(s), E = f - y, rho_n_i = E[E s^(n)(l_i)], S_pq[i, k] = E[s^(p)(l_i) s^(q)(l_k)] and
// T_pq[i, r] = E[s^(p)(l_i) t^(q)(l*_r)], H = E[grad f grad f^T] + E[E hess f] with E[g x] = sum_p E[d_p g] u_p and
// E[g x x^T] = E[g] I + sum_pq E[d_p d_q g] u_p u_q^T (Stein):
//   H_{w_i w_k} = a_i a_k / s (S11 I + S31 u_i u_i^T + S22 (u_i u_k^T + u_k u_i^T) + S13 u_k u_k^T)[i, k]
//                 + delta_ik a_i / s (rho2_i I + U^T diag(a S22[i]) U - U*^T diag(v T22[i]) U*
//                                     + z_i u_i^T + u_i z_i^T + rho4_i u_i u_i^T),   z_i = U^T (a S31[i]) - U*^T (v T31[i]),
//   H_{b_i w_k} = a_i a_k / sqrt(s) (S21 u_i + S12 u_k)[i, k]
//                 + delta_ik a_i / sqrt(s) (U^T (a S21[i]) - U*^T (v T21[i]) + rho3_i u_i),
//   H_{a_i w_k} = a_k / sqrt(s) (S11 u_i + S02 u_k)[i, k] + delta_ik / sqrt(s) (U^T (a S11[i]) - U*^T (v T11[i]) + rho2_i u_i),
//   H_{b_i b_k} = a_i a_k S11[i, k] + delta_ik a_i rho2_i,  H_{a_i b_k} = a_k S01[i, k] + delta_ik rho1_i,  H_{a_i a_k} = S00,
// where every self pair (i, i) is one unit's expectations h_n (unit_self): the (w_i, w_i) block gets
// a_i^2 / s (h2 I + h4 u_i u_i^T), (b_i, w_i) a_i^2 h3 u_i / sqrt(s), (a_i, w_i) 2 a_i h2 u_i / sqrt(s), (b_i, b_i)
// a_i^2 h2, (a_i, b_i) 2 a_i h1, (a_i, a_i) 2 h0, and the sums rho_n, S, T run over the other pairs.
void population_hessian_mean(const Population& p, const Biases& b, bool train_readout, bool train_bias, double* H,
                             int n_threads) {
  const MeanMoments m = mean_moments(p, b, kHessianOrders, n_threads);
  const int K = m.K, M = m.M, d = p.d;
  const double *a = p.student.a, *v = p.teacher.a;
  const double rs = 1.0 / std::sqrt(p.scale), inv = 1.0 / p.scale;
  const std::size_t Kd = static_cast<std::size_t>(K) * d;
  const std::size_t n = Kd + (train_readout ? K : 0) + (train_bias ? K : 0);
  const std::size_t oa = Kd, ob = Kd + (train_readout ? K : 0);
  std::vector<double> U(Kd), Us(static_cast<std::size_t>(M) * d);
  for (std::size_t c = 0; c < Kd; ++c) U[c] = p.student.W[c] * rs;
  for (std::size_t c = 0; c < Us.size(); ++c) Us[c] = p.teacher.W[c] * rs;
  auto u = [&](int i) { return U.data() + static_cast<std::size_t>(i) * d; };
  auto us = [&](int r) { return Us.data() + static_cast<std::size_t>(r) * d; };
  auto at = [&](std::size_t r, std::size_t c) -> double& { return H[r * n + c]; };
  std::fill(H, H + n * n, 0.0);
  // field_o(i) = U^T (a S_o[i]) - U*^T (v T_o[i]) (self pair left out for the orders above the gradient's).
  auto field = [&](int o, int i, double* out) {
    std::fill(out, out + d, 0.0);
    for (int k = 0; k < K; ++k) {
      const double f = a[k] * m.s(o, i, k);
      for (int c = 0; c < d; ++c) out[c] += f * u(k)[c];
    }
    for (int r = 0; r < M; ++r) {
      const double f = v[r] * m.t(o, i, r);
      for (int c = 0; c < d; ++c) out[c] -= f * us(r)[c];
    }
  };
  parallel_for(static_cast<std::size_t>(K), K > 4 ? n_threads : 1, [&](std::size_t iu) {
    const int i = static_cast<int>(iu);
    const double* ui = u(i);
    double h[5];
    unit_self(p.student.act, m.Q[iu * K + iu], b.student ? b.student[i] : 0.0, 4, h);
    const double rho1 = m.residual(m10, i, a, v), rho2 = m.residual(m20, i, a, v);  // without the self pair
    const double rho3 = m.residual(m30, i, a, v), rho4 = m.residual(m40, i, a, v);
    std::vector<double> z(d), g(d);
    field(m31, i, z.data());
    // W rows of unit i: the blocks (i, k).
    for (int k = 0; k < K; ++k) {
      const double* uk = u(k);
      const double f = a[i] * a[k] * inv, s11 = m.s(m11, i, k), s31 = m.s(m31, i, k), s13 = m.s(m31, k, i),
                   s22 = m.s(m22, i, k);
      for (int r = 0; r < d; ++r) {
        double* row = &at(iu * d + r, static_cast<std::size_t>(k) * d);
        for (int c = 0; c < d; ++c)
          row[c] = f * (s31 * ui[r] * ui[c] + s13 * uk[r] * uk[c] + s22 * (ui[r] * uk[c] + uk[r] * ui[c]));
        row[r] += f * s11;
      }
    }
    // The residual's part of the diagonal block.
    {
      const double f = a[i] * inv, cuu = rho4 + a[i] * h[4];
      double* blk = &at(iu * d, iu * d);
      auto rank1 = [&](const double* x, double w) {
        for (int r = 0; r < d; ++r)
          for (int c = 0; c < d; ++c) blk[static_cast<std::size_t>(r) * n + c] += w * x[r] * x[c];
      };
      for (int k = 0; k < K; ++k)
        if (k != i) rank1(u(k), f * a[k] * m.s(m22, i, k));
      for (int r = 0; r < M; ++r) rank1(us(r), -f * v[r] * m.t(m22, i, r));
      rank1(ui, f * cuu);
      for (int r = 0; r < d; ++r) {
        for (int c = 0; c < d; ++c) blk[static_cast<std::size_t>(r) * n + c] += f * (z[r] * ui[c] + ui[r] * z[c]);
        blk[static_cast<std::size_t>(r) * n + r] += f * (rho2 + a[i] * h[2]);
      }
    }
    if (train_readout) {
      for (int k = 0; k < K; ++k) {
        const double f = a[k] * rs, s11 = m.s(m11, i, k), s02 = m.s(m20, k, i);
        for (int c = 0; c < d; ++c) at(oa + iu, static_cast<std::size_t>(k) * d + c) = f * (s11 * ui[c] + s02 * u(k)[c]);
        at(oa + iu, oa + k) = k == i ? 2.0 * h[0] : m.s(m00, i, k);
        if (train_bias)
          at(oa + iu, ob + k) = at(ob + k, oa + iu) = a[k] * m.s(m10, k, i) + (k == i ? rho1 + 2.0 * a[i] * h[1] : 0.0);
      }
      field(m11, i, g.data());
      for (int c = 0; c < d; ++c) at(oa + iu, iu * d + c) += rs * (g[c] + (rho2 + 2.0 * a[i] * h[2]) * ui[c]);
    }
    if (train_bias) {
      for (int k = 0; k < K; ++k) {
        const double f = a[i] * a[k] * rs, s21 = m.s(m21, i, k), s12 = m.s(m21, k, i);
        for (int c = 0; c < d; ++c) at(ob + iu, static_cast<std::size_t>(k) * d + c) = f * (s21 * ui[c] + s12 * u(k)[c]);
        at(ob + iu, ob + k) = a[i] * a[k] * m.s(m11, i, k) + (k == i ? a[i] * (rho2 + a[i] * h[2]) : 0.0);
      }
      field(m21, i, g.data());
      const double cu = rho3 + a[i] * h[3];
      for (int c = 0; c < d; ++c) at(ob + iu, iu * d + c) += a[i] * rs * (g[c] + cu * ui[c]);
    }
  });
  // The a and b rows were written left of the diagonal W blocks only: mirror them, then symmetrise exactly.
  for (std::size_t r = Kd; r < n; ++r)
    for (std::size_t c = 0; c < Kd; ++c) at(c, r) = at(r, c);
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t c = r + 1; c < n; ++c) at(r, c) = at(c, r) = 0.5 * (at(r, c) + at(c, r));
}

DescentResult population_descend_mean(double* W, double* a, double* b, const Population& p0, const double* bt,
                                      double lr, double lr_readout, double lr_bias, long long steps,
                                      const std::vector<long long>& record_steps, int n_threads,
                                      const Schedule* schedule) {
  Population p = p0;
  p.student.W = W;
  p.student.a = a;
  const Biases biases{b, bt};
  const int K = p.student.units, M = p.teacher.units, d = p.d;
  check_buffer(static_cast<std::size_t>(K) * (K + M), "the recorded overlaps Q, M (K (K + M) entries)");
  std::vector<double> dW(static_cast<std::size_t>(K) * d), da(K), db(K);
  auto record = [&](DescentResult& out) {
    return append_record(out, p, b, population_risk_mean(p, biases, n_threads), n_threads);
  };
  auto finite = [](const std::vector<double>& x) {
    for (const double y : x)
      if (!std::isfinite(y)) return false;
    return true;
  };
  auto advance = [&](long long, bool, double rate) {
    try {
      population_gradient_mean(p, biases, dW.data(), da.data(), db.data(), n_threads);
    } catch (const std::domain_error&) {
      return false;
    }
    if (!finite(dW) || !finite(da) || !finite(db)) return false;
    const double lr_n = lr * rate, lr_a_n = lr_readout * rate, lr_b_n = lr_bias * rate;
    for (std::size_t c = 0; c < dW.size(); ++c) W[c] -= lr_n * dW[c];
    for (int i = 0; i < K; ++i) {
      a[i] -= lr_a_n * da[i];
      b[i] -= lr_b_n * db[i];
    }
    return true;
  };
  return descend_loop(steps, record_steps, schedule, record, advance);
}

}  // namespace twolayer

// DMFT of full-batch gradient descent (dmft.hpp). Data layout: per group, the histories of zeta^s and g^s of every
// sample are stored in blocks of kB samples, [block][s][unit][lane], so that one iteration streams each block's
// history once (memory terms, cross moments E[g^t zeta^s] and E[g^t g^s]) in SIMD lanes over the kB samples.
// Partial sums are kept per chunk of blocks and added in chunk order: results do not depend on the thread count.
#include "twolayer/dmft.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include "twolayer/cancel.hpp"
#include "twolayer/parallel.hpp"
#include "twolayer/rng.hpp"

namespace twolayer {

namespace {

constexpr int kB = 32;                // samples per block (SIMD lanes of one pass)
constexpr int kBlocksPerChunk = 32;   // blocks per partial sum
constexpr std::uint32_t kStreamField = 16, kStreamTest = 17;

// Semi-definite Cholesky rows [r0, r1) of the n x n lower factor L (row-major, leading dimension ld) of C (given by
// c(r, c)); a pivot below tol * C(r, r) becomes an exact zero (its column is then zero below it).
template <class Cov>
void cholesky_rows(std::vector<double>& L, std::size_t ld, std::size_t r0, std::size_t r1, Cov&& cov) {
  for (std::size_t r = r0; r < r1; ++r) {
    double* Lr = L.data() + r * ld;
    for (std::size_t c = 0; c < r; ++c) {
      const double* Lc = L.data() + c * ld;
      double v = cov(r, c);
      for (std::size_t u = 0; u < c; ++u) v -= Lr[u] * Lc[u];
      Lr[c] = Lc[c] > 0.0 ? v / Lc[c] : 0.0;
    }
    double v = cov(r, r);
    const double scale = std::abs(cov(r, r));
    for (std::size_t u = 0; u < r; ++u) v -= Lr[u] * Lr[u];
    Lr[r] = v > 1e-12 * scale && v > 0.0 ? std::sqrt(v) : 0.0;
  }
}

struct Group {
  std::vector<double> zeta, g, zeta_test;  // [block][s][unit][lane]; test: [block][unit][lane]
  std::vector<double> L;                   // N x N, N = (T + 1) p
  std::vector<double> K;                   // (T + 2)^2 blocks p x p: propagator d theta^t / d theta^s
  std::vector<double> M;                   // p x k, current
  std::vector<double> b;                   // p, the current student biases
};

// g^t = a * sigma'(h) (y - a . sigma(h)) over one block (lanes j >= nl are padding: zero g), the sums of the squared
// train and test errors into Ae[0], Ae[1], of g into Ae[2..2+p) and of g z^T into Az; the activation is a template
// parameter so that the lane loops vectorise (Runtime: the smooth and hermite activations, passed as act, through
// sigma's switch).
template <Activation A0, bool Runtime = false>
void nonlinear_t(Activation act, int p, int k, const double* a, double (*h)[kB], double (*ht)[kB], double (*gt)[kB],
                 const double* y, const double* yt, const double* z, int nl, double* Ae, double* Az) {
  const Activation A = Runtime ? act : A0;
  double f[kB] = {}, ft[kB] = {}, E[kB], yb[kB], ytb[kB], mask[kB];
  for (int j = 0; j < kB; ++j) {
    const bool in = j < nl;
    yb[j] = in ? y[j] : 0.0;
    ytb[j] = in ? yt[j] : 0.0;
    mask[j] = in ? 1.0 : 0.0;
  }
  for (int u = 0; u < p; ++u) {
    const double au = a[u];
#pragma omp simd
    for (int j = 0; j < kB; ++j) {
      f[j] += au * sigma(A, h[u][j]);
      ft[j] += au * sigma(A, ht[u][j]);
    }
  }
  double s2 = 0.0, st2 = 0.0;
#pragma omp simd reduction(+ : s2, st2)
  for (int j = 0; j < kB; ++j) {
    E[j] = (yb[j] - f[j]) * mask[j];
    const double Et = (ytb[j] - ft[j]) * mask[j];
    s2 += E[j] * E[j];
    st2 += Et * Et;
  }
  Ae[0] += s2;
  Ae[1] += st2;
  for (int u = 0; u < p; ++u) {
    const double au = a[u];
    double sg = 0.0;
#pragma omp simd reduction(+ : sg)
    for (int j = 0; j < kB; ++j) {
      gt[u][j] = au * dsigma(A, h[u][j]) * E[j];
      sg += gt[u][j];
    }
    Ae[2 + u] += sg;
  }
  for (int j = 0; j < nl; ++j)
    for (int u = 0; u < p; ++u)
      for (int r = 0; r < k; ++r) Az[u * k + r] += gt[u][j] * z[j * k + r];
}

void nonlinear(Activation act, int p, int k, const double* a, double (*h)[kB], double (*ht)[kB], double (*gt)[kB],
               const double* y, const double* yt, const double* z, int nl, double* Ae, double* Az) {
  switch (act) {
    case Activation::Linear: return nonlinear_t<Activation::Linear>(act, p, k, a, h, ht, gt, y, yt, z, nl, Ae, Az);
    case Activation::Erf: return nonlinear_t<Activation::Erf>(act, p, k, a, h, ht, gt, y, yt, z, nl, Ae, Az);
    case Activation::Relu: return nonlinear_t<Activation::Relu>(act, p, k, a, h, ht, gt, y, yt, z, nl, Ae, Az);
    case Activation::Step: return nonlinear_t<Activation::Step>(act, p, k, a, h, ht, gt, y, yt, z, nl, Ae, Az);
    case Activation::Quadratic:
      return nonlinear_t<Activation::Quadratic>(act, p, k, a, h, ht, gt, y, yt, z, nl, Ae, Az);
    default: return nonlinear_t<Activation::Linear, true>(act, p, k, a, h, ht, gt, y, yt, z, nl, Ae, Az);
  }
}

}  // namespace

void dmft_solve(const DmftProblem& P, DmftOut& out, int n_threads) {
  const int p = P.p, k = P.k, T = P.n_steps;
  const std::int64_t G = P.n_groups, S = P.n_mc;
  if (p < 1 || k < 1 || T < 0 || G < 1 || S < 1) throw std::invalid_argument("dmft: bad sizes");
  const std::size_t pp = static_cast<std::size_t>(p) * p, T1 = static_cast<std::size_t>(T) + 1;
  const std::size_t N = T1 * p;
  const std::size_t nblk = static_cast<std::size_t>((S + kB - 1) / kB);
  const std::size_t nchunk = (nblk + kBlocksPerChunk - 1) / kBlocksPerChunk;
  const double eta = P.lr, lam = P.ridge, alpha = P.alpha, decay = 1.0 - eta * lam;
  const std::size_t hist = T1 * p * kB;  // one block's history
  // Partial sums of one chunk: E[g^t zeta^c], E[g^t g^c] (p x N each), E[g z^T] (p x k), sum E^2, sum E_test^2,
  // E[g^t] (p).
  const std::size_t acc_size = 2 * p * N + static_cast<std::size_t>(p) * k + 2 + p;
  const std::size_t e_at = 2 * p * N + static_cast<std::size_t>(p) * k;  // sum E^2, then sum E_test^2, then g
  std::vector<double> acc(nchunk * acc_size);

  auto blk = [&](double* base, std::size_t t1, std::size_t t2) {  // p x p block (t1, s) of a (T+1)^2 array
    return base + (t1 * T1 + t2) * pp;
  };
  std::vector<Group> groups(static_cast<std::size_t>(G));
  for (std::int64_t gi = 0; gi < G; ++gi) {
    Group& gr = groups[static_cast<std::size_t>(gi)];
    gr.zeta.assign(nblk * hist, 0.0);
    gr.g.assign(nblk * hist, 0.0);
    gr.zeta_test.assign(nblk * p * kB, 0.0);
    gr.L.assign(N * N, 0.0);
    gr.K.assign((T1 + 1) * (T1 + 1) * pp, 0.0);
    gr.M.assign(P.M0, P.M0 + static_cast<std::size_t>(p) * k);
    gr.b.assign(static_cast<std::size_t>(p), 0.0);
    if (P.b0) gr.b.assign(P.b0, P.b0 + p);
    const rng::StreamId st{P.seed, static_cast<std::uint32_t>(gi), kStreamTest};
    rng::gaussians(st, 0, nblk * p * kB, gr.zeta_test.data());
    double* Ct = out.Ctheta + static_cast<std::size_t>(gi) * T1 * T1 * pp;
    std::copy(P.C0, P.C0 + pp, Ct);
    for (int a = 0; a < p; ++a) gr.K[static_cast<std::size_t>(a) * p + a] = 1.0;  // K(0, 0) = I
  }
  auto Kb = [&](Group& gr, std::size_t t1, std::size_t t2) { return gr.K.data() + (t1 * (T1 + 1) + t2) * pp; };

  out.steps_done = 0;
  out.diverged = false;
  std::vector<double> Ltest(pp), Rth(T1 * pp), Eg(static_cast<std::size_t>(p) * N);
  for (std::size_t t = 0; t <= static_cast<std::size_t>(T); ++t) {
    if (cancel_requested()) return;
    bool bad = false;
    for (std::int64_t gi = 0; gi < G; ++gi) {
      Group& gr = groups[static_cast<std::size_t>(gi)];
      const std::size_t go = static_cast<std::size_t>(gi);
      double* Ct = out.Ctheta + go * T1 * T1 * pp;
      double* Cg = out.Cg + go * T1 * T1 * pp;
      double* Rg = out.Rg + go * T1 * T1 * pp;
      double* Rt = out.Rtheta + go * T1 * T1 * pp;
      const double* z = P.z + go * static_cast<std::size_t>(S) * k;
      const double* zt = P.z_test + go * static_cast<std::size_t>(S) * k;
      const double* y = P.y + go * static_cast<std::size_t>(S);
      const double* yt = P.y_test + go * static_cast<std::size_t>(S);
      // ---- deterministic: Cholesky rows of time t, the test factor, R_theta(t, s) = (eta / alpha) K(t, s + 1)
      auto cov = [&](std::size_t r, std::size_t c) {
        return blk(Ct, r / p, c / p)[(r % p) * p + c % p];
      };
      cholesky_rows(gr.L, N, t * p, (t + 1) * p, cov);
      std::vector<double> Ltv(pp, 0.0);
      cholesky_rows(Ltv, p, 0, p, [&](std::size_t r, std::size_t c) { return blk(Ct, t, t)[r * p + c]; });
      std::copy(Ltv.begin(), Ltv.end(), Ltest.begin());
      for (std::size_t s = 0; s < t; ++s) {
        const double* Ks = Kb(gr, t, s + 1);
        for (std::size_t e = 0; e < pp; ++e) Rth[s * pp + e] = Rt[(t * T1 + s) * pp + e] = eta / alpha * Ks[e];
      }
      // ---- the sample pass
      const std::size_t nc = (t + 1) * p;  // columns of the history up to time t
      const rng::StreamId sf{P.seed, static_cast<std::uint32_t>(gi), kStreamField};
      const double* Lrow = gr.L.data() + t * p * N;
      const double* Mt = gr.M.data();
      const double* bt = gr.b.data();
      std::fill(acc.begin(), acc.end(), 0.0);
      try {
        parallel_for(
            nchunk, n_threads,
            [&](std::size_t ch) {
              double* A = acc.data() + ch * acc_size;
              double *Az = A + 2 * p * N, *Ae = Az + static_cast<std::size_t>(p) * k;
              double h[64][kB], ht[64][kB], gt[64][kB];  // p <= 64 (checked by the binding)
              const std::size_t b0 = ch * kBlocksPerChunk, b1 = std::min(nblk, b0 + kBlocksPerChunk);
              for (std::size_t b = b0; b < b1; ++b) {
                double* zb = gr.zeta.data() + b * hist;
                double* gb = gr.g.data() + b * hist;
                const double* ztb = gr.zeta_test.data() + b * p * kB;
                rng::gaussians(sf, (t * nblk + b) * p * kB, static_cast<std::size_t>(p) * kB, zb + t * p * kB);
                const std::int64_t i0 = static_cast<std::int64_t>(b) * kB;
                const int nl = static_cast<int>(std::min<std::int64_t>(kB, S - i0));
                for (int a = 0; a < p; ++a) {
                  for (int j = 0; j < kB; ++j) {
                    double v = bt[a], vt = bt[a];
                    if (j < nl) {
                      for (int r = 0; r < k; ++r) {
                        v += Mt[a * k + r] * z[(i0 + j) * k + r];
                        vt += Mt[a * k + r] * zt[(i0 + j) * k + r];
                      }
                    }
                    h[a][j] = v;
                    ht[a][j] = vt;
                  }
                  for (std::size_t c = 0; c < nc; ++c) {  // w^t = L zeta
                    const double l = Lrow[a * N + c];
                    const double* zc = zb + c * kB;
#pragma omp simd
                    for (int j = 0; j < kB; ++j) h[a][j] += l * zc[j];
                  }
                  for (std::size_t s = 0; s < t; ++s) {  // memory: sum_s R_theta(t, s) g^s
                    for (int c = 0; c < p; ++c) {
                      const double r = Rth[s * pp + a * p + c];
                      const double* gc = gb + (s * p + c) * kB;
#pragma omp simd
                      for (int j = 0; j < kB; ++j) h[a][j] += r * gc[j];
                    }
                  }
                  for (int c = 0; c < p; ++c) {
                    const double l = Ltest[a * p + c];
#pragma omp simd
                    for (int j = 0; j < kB; ++j) ht[a][j] += l * ztb[c * kB + j];
                  }
                }
                nonlinear(P.act, p, k, P.a, h, ht, gt, y + i0, yt + i0, z + i0 * k, nl, Ae, Az);
                for (int a = 0; a < p; ++a) std::copy(gt[a], gt[a] + kB, gb + (t * p + a) * kB);
                for (int a = 0; a < p; ++a) {  // cross moments with the history up to time t
                  double* Az_ = A + a * N;
                  double* Ag_ = A + p * N + a * N;
                  for (std::size_t c = 0; c < nc; ++c) {
                    const double *zc = zb + c * kB, *gc = gb + c * kB;
                    double sz = 0.0, sg = 0.0;
#pragma omp simd reduction(+ : sz, sg)
                    for (int j = 0; j < kB; ++j) {
                      sz += gt[a][j] * zc[j];
                      sg += gt[a][j] * gc[j];
                    }
                    Az_[c] += sz;
                    Ag_[c] += sg;
                  }
                }
              }
            },
            1, 1);
      } catch (const Interrupted&) {
        return;
      }
      // ---- reduce the chunks in order
      std::vector<double> tot(acc_size, 0.0);
      for (std::size_t ch = 0; ch < nchunk; ++ch)
        for (std::size_t e = 0; e < acc_size; ++e) tot[e] += acc[ch * acc_size + e];
      const double inv = 1.0 / static_cast<double>(S);
      const double* Tz = tot.data() + 2 * p * N;
      const double train = 0.5 * tot[e_at] * inv, test = 0.5 * tot[e_at + 1] * inv;
      out.train[go * T1 + t] = train;
      out.test[go * T1 + t] = test;
      double* Mo = out.M + (go * T1 + t) * p * k;
      std::copy(gr.M.begin(), gr.M.end(), Mo);
      std::copy(gr.b.begin(), gr.b.end(), out.bias + (go * T1 + t) * p);
      double* Qo = out.Q + (go * T1 + t) * pp;
      for (int a = 0; a < p; ++a)
        for (int b = 0; b < p; ++b) {
          double v = blk(Ct, t, t)[a * p + b];
          for (int r = 0; r < k; ++r) v += gr.M[a * k + r] * gr.M[b * k + r];
          Qo[a * p + b] = v;
        }
      if (!std::isfinite(train) || !std::isfinite(test)) bad = true;
      // C_g(t, s) for s <= t, and its transpose
      for (std::size_t s = 0; s <= t; ++s)
        for (int a = 0; a < p; ++a)
          for (int b = 0; b < p; ++b) {
            const double v = tot[p * N + a * N + s * p + b] * inv;
            blk(Cg, t, s)[a * p + b] = v;
            blk(Cg, s, t)[b * p + a] = v;
          }
      // R_g(t, .) from E[g^t zeta^T] = R_g L (back substitution over the lower factor, zero pivots give zero)
      for (int a = 0; a < p; ++a) {
        double* Ra = Eg.data() + a * N;
        for (std::size_t c = 0; c < nc; ++c) Ra[c] = tot[a * N + c] * inv;
        for (std::size_t c = nc; c-- > 0;) {
          double v = Ra[c];
          for (std::size_t r = c + 1; r < nc; ++r) v -= Ra[r] * gr.L[r * N + c];
          const double d = gr.L[c * N + c];
          Ra[c] = d > 0.0 ? v / d : 0.0;
        }
        for (std::size_t c = 0; c < nc; ++c) blk(Rg, t, c / p)[a * p + c % p] = Ra[c];
      }
      if (t == static_cast<std::size_t>(T)) continue;
      // ---- deterministic: M, the propagator K(t + 1, .), C_theta(t + 1, .)
      for (int a = 0; a < p; ++a)
        for (int r = 0; r < k; ++r) gr.M[a * k + r] = decay * gr.M[a * k + r] + eta * Tz[a * k + r] * inv;
      for (int a = 0; a < p; ++a) {  // b^{t+1} = b^t + lr_bias E[g^t]
        gr.b[a] += P.lr_bias * tot[e_at + 2 + a] * inv;
        if (!std::isfinite(gr.b[a])) bad = true;
      }
      for (int a = 0; a < p; ++a) Kb(gr, t + 1, t + 1)[a * p + a] = 1.0;
      for (std::size_t s = 0; s <= t; ++s) {
        double* Kn = Kb(gr, t + 1, s);
        for (std::size_t e = 0; e < pp; ++e) Kn[e] = decay * Kb(gr, t, s)[e];
        for (std::size_t u = s; u <= t; ++u) {
          const double *R = blk(Rg, t, u), *Ku = Kb(gr, u, s);
          for (int a = 0; a < p; ++a)
            for (int c = 0; c < p; ++c)
              for (int b = 0; b < p; ++b) Kn[a * p + b] += eta * R[a * p + c] * Ku[c * p + b];
        }
      }
      // C_theta(t+1, t') = decay C(t, t') + eta sum_u R_g(t, u) C(u, t') + eta^2/alpha sum_{s<t'} C_g(t, s) K(t', s+1)^T
      for (std::size_t tp = 0; tp <= t + 1; ++tp) {
        std::vector<double> C(pp, 0.0);
        const double* Ctt = blk(Ct, t, tp);
        for (std::size_t e = 0; e < pp; ++e) C[e] = decay * Ctt[e];
        for (std::size_t u = 0; u <= t; ++u) {
          const double *R = blk(Rg, t, u), *Cu = blk(Ct, u, tp);
          for (int a = 0; a < p; ++a)
            for (int c = 0; c < p; ++c)
              for (int b = 0; b < p; ++b) C[a * p + b] += eta * R[a * p + c] * Cu[c * p + b];
        }
        for (std::size_t s = 0; s < tp; ++s) {
          const double *Cgs = blk(Cg, t, s), *Kt = Kb(gr, tp, s + 1);
          for (int a = 0; a < p; ++a)
            for (int c = 0; c < p; ++c)
              for (int b = 0; b < p; ++b) C[a * p + b] += eta * eta / alpha * Cgs[a * p + c] * Kt[b * p + c];
        }
        if (tp == t + 1) {
          for (int a = 0; a < p; ++a)
            for (int b = 0; b < a; ++b) C[a * p + b] = C[b * p + a] = 0.5 * (C[a * p + b] + C[b * p + a]);
        }
        for (int a = 0; a < p; ++a)
          for (int b = 0; b < p; ++b) {
            blk(Ct, t + 1, tp)[a * p + b] = C[a * p + b];
            blk(Ct, tp, t + 1)[b * p + a] = C[a * p + b];
          }
      }
      for (std::size_t e = 0; e < pp; ++e)
        if (!std::isfinite(blk(Ct, t + 1, t + 1)[e])) bad = true;
    }
    out.steps_done = static_cast<int>(t) + 1;
    if (bad) {
      out.diverged = true;
      return;
    }
  }
}

}  // namespace twolayer

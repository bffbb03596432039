// The order-parameter right-hand side and risk (dynamics.hpp, with its "Biases" form) of L committees whose student
// units are all sin or all cos and whose teacher units are all sin or all cos (either), with or without biases, in
// the lanes of batch_dynamics.hpp (lane-major arrays, the lane index innermost, the same IEEE operations in every lane
// whatever L is; included only by files compiled with -ffp-contract=off). Every expectation is a closed form through
// the characteristic function (gaussian_smooth.hpp trig_moments and trig_product4): a derivative of sin or cos is a
// cosine with its phase shifted by quarter turns, sigma^(q)(mu + l) = cos(mu + l + (p + q) pi / 2) (p = -1 for sin,
// 0 for cos), and
//   E[prod_r cos(A_r + l_r)] = 2^(1 - n) sum over the signs e (e_1 = +1) of cos(e.A) exp(-e^T C e / 2)
// (n = 2: the pair moments of the first-order terms, readout and bias pull, E[s'(l_i) s'(l_k)] of the noise term and
// the risk; n = 4: I4 = E[s'(l_i) s'(l_k) h_j(l_j) h_m(l_m)] of the online lr^2 term). cos(e.A) = cos(e.mu) c -
// sin(e.mu) s with c, s in {0, +-1} the cosine and sine of the quarter turns, and e^(i e.mu) a product of the
// e^(+-i mu_r) (each mean's cosine and sine once per right-hand side, libm, lane by lane; exactly 1 and 0 without
// biases); exp is exp_simd (simd_math.hpp), so that the lane loops vectorise. The equations are OdeRhs::eval_bias's
// (zero means without biases): Psi_ic = Omega_ic A_i + sum_u B_iu Omega_uc, A_i = sum_u w_u E[s''(l_i) h_u(l_u)],
// B_iu = w_u E[s'(l_i) h_u'(l_u)], the bias pull G_i = sum_u w_u E[s'(l_i) h_u(l_u)] and the readout pull V_i =
// sum_u w_u E[s(l_i) h_u(l_u)] (the self pair u = i a moment of one variable), w = (-a, v). The one-system path
// (OdeRhs) takes the same closed forms for the pair moments (libm's exp, cos, sin: the last bits differ) and for the
// online term its certified lattice (gaussian_error_square.hpp) at K + M <= 4: tests/test_ode_lanes.py holds the two
// together.
#pragma once
#include <cmath>

#include "twolayer/activation.hpp"
#include "twolayer/batch_dynamics.hpp"
#include "twolayer/batch_dynamics_bias.hpp"  // LaneBiasParams
#include "twolayer/gaussian_smooth.hpp"     // cos_shift, trig_phase
#include "twolayer/simd_math.hpp"

namespace twolayer {

// Whether the trigonometric lanes take units of activation g (student and teacher each sin or cos).
constexpr bool trig_lanes_activation(Activation g) { return g == Activation::Sin || g == Activation::Cos; }

namespace detail {

// e^(i mu) of the lanes' means, units in order (students, then teachers): c = cos mu, s = sin mu, exactly 1 and 0 for
// a zero mean (b == nullptr: no biases, every mean 0).
template <int L>
void trig_means(int K, int M, const double* b, const double* teacher_bias, double (*c)[L], double (*s)[L]) {
  for (int j = 0; j < K + M; ++j)
    for (int l = 0; l < L; ++l) {
      const double m = b == nullptr ? 0.0 : j < K ? b[j * L + l] : teacher_bias[(j - K) * L + l];
      c[j][l] = m == 0.0 ? 1.0 : std::cos(m);  // libm, lane by lane
      s[j][l] = m == 0.0 ? 0.0 : std::sin(m);
    }
}

// cos and sin of n quarter turns (exactly 0 and +-1): cos(t + n pi / 2) = cos(t) c - sin(t) s.
struct QuarterTurns {
  double c, s;
  explicit QuarterTurns(int n) : c(smooth::cos_shift(1.0, 0.0, n)), s(-smooth::cos_shift(0.0, 1.0, n)) {}
};

// The phase p of a sin (-1) or cos (0) unit in quarter turns: sigma^(q)(t) = cos(t + (p + q) pi / 2).
inline int trig_unit_phase(Activation a) { return smooth::trig_phase(a, 0); }

}  // namespace detail

// dy = f(y) for L lanes of committees of shape s whose students are all `student` and teachers all `teacher`, each
// sin or cos (see the header comment). Without
// biases (pb.lr_bias == nullptr) y, dy are [Q (K x K), M (K x M), a (K)] per lane; with biases [Q, M, a, b (K)] and
// the teachers' biases in pb. Lane-major; K, M <= kLaneUnitsCap.
template <int L>
void trig_rhs_lanes(const LaneShape& s, Activation student, Activation teacher, const LaneParams& p,
                    const LaneBiasParams& pb, const double* __restrict y, double* __restrict dy) {
  constexpr int UM = 2 * kLaneUnitsCap, KM = kLaneUnitsCap;
  const int ps = detail::trig_unit_phase(student), pt = detail::trig_unit_phase(teacher);
  const bool biased = pb.lr_bias != nullptr;
  const int K = s.K, M = s.M, u = K + M;
  const double* Q = y;
  const double* Mo = y + K * K * L;
  const double* a = Mo + K * M * L;
  auto om = [&](int row, int col) {
    return row < K ? (col < K ? Q + (row * K + col) * L : Mo + (row * M + col - K) * L)
                   : (col < K ? Mo + (col * M + row - K) * L : p.P + ((row - K) * M + col - K) * L);
  };
  double w[UM][L], zc[UM][L], zs[UM][L];
  for (int j = 0; j < K; ++j)
    for (int l = 0; l < L; ++l) w[j][l] = -a[j * L + l];
  for (int r = 0; r < M; ++r)
    for (int l = 0; l < L; ++l) w[K + r][l] = p.v[r * L + l];
  detail::trig_means<L>(K, M, biased ? a + K * L : nullptr, pb.teacher_bias, zc, zs);
  // 1. Per student i and unit c (phases ps, pc): the pair moments m_pq = E[s^(p)(l_i) h_c^(q)(l_c)] = em cos(mu_i -
  //    mu_c + (ps + p - pc - q) pi / 2) + ep cos(mu_i + mu_c + (ps + p + pc + q) pi / 2), em, ep = e^(-(x + z -+ 2 y)
  //    / 2) / 2.
  double Ai[KM][L], Bm[KM][UM][L], J[KM][KM][L], Gp[KM][L], V[KM][L];
  for (int i = 0; i < K; ++i) {
    const double* oii = om(i, i);
    for (int l = 0; l < L; ++l) Ai[i][l] = 0.0, Gp[i][l] = 0.0, V[i][l] = 0.0;
    for (int c = 0; c < u; ++c) {
      const double *oic = om(i, c), *occ = om(c, c);
      const bool self = c == i;  // mu_i - mu_c = 0 exactly
      const int pc = c < K ? ps : pt;
      const detail::QuarterTurns d20(ps - pc + 2), s20(ps + pc + 2), d11(ps - pc), s11(ps + pc + 2), d10(ps - pc + 1),
          s10(ps + pc + 1), s00(ps + pc);
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) {
        const double x = oii[l], yv = oic[l], z = occ[l];
        const double em = 0.5 * exp_simd(-0.5 * ((x + z) - 2.0 * yv)), ep = 0.5 * exp_simd(-0.5 * ((x + z) + 2.0 * yv));
        const double ci = zc[i][l], si = zs[i][l], cc = zc[c][l], sc = zs[c][l];
        const double cd = self ? 1.0 : ci * cc + si * sc, sd = self ? 0.0 : si * cc - ci * sc;
        const double cp = ci * cc - si * sc, sp = si * cc + ci * sc;
        const double m20 = em * (cd * d20.c - sd * d20.s) + ep * (cp * s20.c - sp * s20.s);
        const double m11 = em * (cd * d11.c - sd * d11.s) + ep * (cp * s11.c - sp * s11.s);
        const double m10 = em * (cd * d10.c - sd * d10.s) + ep * (cp * s10.c - sp * s10.s);
        const double m00 = em * (cd * d11.c - sd * d11.s) + ep * (cp * s00.c - sp * s00.s);
        Ai[i][l] += w[c][l] * m20;
        Bm[i][c][l] = w[c][l] * m11;
        if (c < K) J[i][c][l] = m11;
        Gp[i][l] += w[c][l] * m10;
        V[i][l] += w[c][l] * m00;
      }
    }
  }
  double phi[KM][KM][L];
  double* dQ = dy;
  double* dM = dy + K * K * L;
  double* da = dM + K * M * L;
  first_order_lanes<L>(s, p, om, Ai, Bm, a, phi, dM);
  // 4. Online: lr^2 a_i a_k (sum_{j <= m} (2 - [j = m]) w_j w_m I4(l_i, l_k, l_j, l_m) + Delta J_ik), i <= k, I4 over
  //    the 8 signs (1, e2, e3, e4): the quarter turns (ps + 1)(1 + e2) + e3 pj + e4 pm, cos and sin of e.mu from the
  //    products of e^(+-i mu_r).
  if (s.online) {
    for (int i = 0; i < K; ++i)
      for (int k = i; k < K; ++k) {
        const double *oii = om(i, i), *oik = om(i, k), *okk = om(k, k);
        double quad[L];
        for (int l = 0; l < L; ++l) quad[l] = 0.0;
        for (int j = 0; j < u; ++j)
          for (int m = j; m < u; ++m) {
            const double *oij = om(i, j), *oim = om(i, m), *okj = om(k, j), *okm = om(k, m), *ojj = om(j, j),
                         *ojm = om(j, m), *omm = om(m, m);
            const double f = j == m ? 1.0 : 2.0;
            const int pj = j < K ? ps : pt, pm = m < K ? ps : pt;
            double i4[L];
            for (int l = 0; l < L; ++l) i4[l] = 0.0;
            for (int e = 0; e < 8; ++e) {
              const double e2 = (e & 1) ? -1.0 : 1.0, e3 = (e & 2) ? -1.0 : 1.0, e4 = (e & 4) ? -1.0 : 1.0;
              const detail::QuarterTurns n((ps + 1) * (1 + ((e & 1) ? -1 : 1)) + ((e & 2) ? -pj : pj) +
                                           ((e & 4) ? -pm : pm));
              TWOLAYER_LANES
              for (int l = 0; l < L; ++l) {
                const double diag = ((oii[l] + okk[l]) + ojj[l]) + omm[l];
                const double cross = ((e2 * oik[l] + e3 * oij[l]) + e4 * oim[l]) +
                                     ((e2 * e3 * okj[l] + e2 * e4 * okm[l]) + e3 * e4 * ojm[l]);
                // e^(i e.mu) = z_i z_k^e2 z_j^e3 z_m^e4
                const double s2 = e2 * zs[k][l], s3 = e3 * zs[j][l], s4 = e4 * zs[m][l];
                double cr = zc[i][l] * zc[k][l] - zs[i][l] * s2, sr = zs[i][l] * zc[k][l] + zc[i][l] * s2;
                double t = cr * zc[j][l] - sr * s3;
                sr = sr * zc[j][l] + cr * s3;
                cr = t;
                t = cr * zc[m][l] - sr * s4;
                sr = sr * zc[m][l] + cr * s4;
                cr = t;
                i4[l] += (cr * n.c - sr * n.s) * exp_simd(-0.5 * (diag + 2.0 * cross));
              }
            }
            TWOLAYER_LANES
            for (int l = 0; l < L; ++l) quad[l] += f * w[j][l] * w[m][l] * (0.125 * i4[l]);
          }
        const double *ai = a + i * L, *ak = a + k * L;
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l)
          phi[i][k][l] += p.lr[l] * p.lr[l] * ai[l] * ak[l] * (quad[l] + p.noise[l] * J[i][k][l]);
      }
  }
  finish_unit_lanes<L>(s, p, biased ? pb.lr_bias : nullptr, phi, V, Gp, Q, Mo, a, dQ, dM, da, da + K * L);
}

// The excess risk 1/2 E[E^2] of L lanes of sin or cos committees (see trig_rhs_lanes; teacher_bias == nullptr: no
// biases): sum_c sum_{d >= c} (1/2 if d = c) w_c w_d E[h_c(l_c) h_d(l_d)] over all the units, the teachers' block
// included.
template <int L>
void trig_risk_lanes(const LaneShape& s, Activation student, Activation teacher, const double* __restrict P,
                     const double* __restrict v, const double* __restrict teacher_bias, const double* __restrict y,
                     double* __restrict risk) {
  constexpr int UM = 2 * kLaneUnitsCap;
  const int ps = detail::trig_unit_phase(student), pt = detail::trig_unit_phase(teacher);
  const int K = s.K, M = s.M, u = K + M;
  const double* Q = y;
  const double* Mo = y + K * K * L;
  const double* a = Mo + K * M * L;
  auto om = [&](int row, int col) {
    return row < K ? (col < K ? Q + (row * K + col) * L : Mo + (row * M + col - K) * L)
                   : (col < K ? Mo + (col * M + row - K) * L : P + ((row - K) * M + col - K) * L);
  };
  double w[UM][L], zc[UM][L], zs[UM][L];
  for (int j = 0; j < K; ++j)
    for (int l = 0; l < L; ++l) w[j][l] = -a[j * L + l];
  for (int r = 0; r < M; ++r)
    for (int l = 0; l < L; ++l) w[K + r][l] = v[r * L + l];
  detail::trig_means<L>(K, M, teacher_bias != nullptr ? a + K * L : nullptr, teacher_bias, zc, zs);
  double acc[L];
  for (int l = 0; l < L; ++l) acc[l] = 0.0;
  for (int c = 0; c < u; ++c)
    for (int d = c; d < u; ++d) {
      const double *occ = om(c, c), *ocd = om(c, d), *odd = om(d, d);
      const double f = d == c ? 0.5 : 1.0;
      const int pc = c < K ? ps : pt, pd = d < K ? ps : pt;
      const detail::QuarterTurns qd(pc - pd), qs(pc + pd);
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) {
        const double x = occ[l], yv = ocd[l], z = odd[l];
        const double em = 0.5 * exp_simd(-0.5 * ((x + z) - 2.0 * yv)), ep = 0.5 * exp_simd(-0.5 * ((x + z) + 2.0 * yv));
        const double cc = zc[c][l], sc = zs[c][l], cq = zc[d][l], sq = zs[d][l];
        const double cd = d == c ? 1.0 : cc * cq + sc * sq, sd = d == c ? 0.0 : sc * cq - cc * sq;
        const double cp = cc * cq - sc * sq, sp = sc * cq + cc * sq;
        const double m00 = em * (cd * qd.c - sd * qd.s) + ep * (cp * qs.c - sp * qs.s);
        acc[l] += f * w[c][l] * w[d][l] * m00;
      }
    }
  for (int l = 0; l < L; ++l) risk[l] = acc[l];
}

}  // namespace twolayer

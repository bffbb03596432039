// ReLU-student I4 kernel
//
//   relu_i4(C)               = E[step(l1) step(l2) relu(l3) relu(l4)],  l ~ N(0, C),  C 4x4 PSD, row-major;
//   relu_i4_linear_relu(C)   = E[step(l1) step(l2) l3 relu(l4)]         (closed form, section 8);
//   relu_i4_linear_linear(C) = E[step(l1) step(l2) l3 l4]               (closed form, section 8);
//
// step = relu' = 1(x > 0). Indices below are 1-based as in the formulas (the code is 0-based).
//
// 1. Reduction. Steps are scale free and relus are homogeneous, so I4(C) = sqrt(C33 C44) I4(R) with R the
//    correlation matrix (r_jk = C_jk / sqrt(C_jj C_kk), one rounding). A zero variance makes its unit identically 0
//    (step(0) = 0): I4 = 0. An antipodal pair (r = -1) kills step*step, step*relu and relu*relu: I4 = 0. Both
//    are returned exactly.
//
// 2. Path. R(s) = (1 - s) I + s R, s in [0, 1]. For every PSD R, R(s) is positive definite for s < 1, so every
//    conditional expectation below is non-degenerate at the quadrature nodes: singular R (aligned pairs, rank 1-3)
//    only enters as the s -> 1 endpoint limit, which is what I4 is (continuous where C11, C22 > 0).
//    I4(I) = E[step]^2 E[relu]^2 = 1 / (8 pi).
//
// 3. Price's theorem, dE[f]/dC_jk = E[d_j d_k f] (j != k), along the path: dI4/ds = sum_{j<k} r_jk E_R(s)[d_j d_k f]
//    with f = step1 step2 relu3 relu4. With Q(rho) = 1/4 + asin(rho) / (2 pi) (bivariate orthant probability),
//    rho_ab.cd the partial correlation of (a, b) given (c, d), and S the covariance under R(s) given what is named:
//    (1,2)  E[delta1 delta2 relu3 relu4] = p12(0, 0) E[relu3 relu4 | l1 = l2 = 0]
//           = 1 / (2 pi sqrt(1 - R12^2)) * [sqrt(S33 S44 - S34^2) + 2 pi Q(rho_34.12) S34] / (2 pi),  S | l1, l2;
//    (1,3)  E[delta1 step2 step3 relu4] = p1(0) G(2, 3, 4 | 1), and (1,4) -> G(2, 4, 3 | 1), (2,3) -> G(1, 3, 4 | 2),
//           (2,4) -> G(1, 4, 3 | 2), where Stein's lemma on the relu variable z (relu(z) = z step(z)) gives
//           G(x, y, z | c) = E[step x step y relu z | l_c = 0] = [S_zx / sqrt(S_xx) Q(rho_yz.xc)
//                            + S_zy / sqrt(S_yy) Q(rho_xz.yc) + sqrt(S_zz) Q(rho_xy.zc)] / sqrt(2 pi);
//    (3,4)  E[step1 step2 step3 step4] = P4(R(s)), the quadrivariate orthant probability (no closed form). Along the
//           same path P4(R(s)) = 1/16 + int_0^s g, g = sum_{j<k} r_jk p_jk(0, 0) Q(rho_lm.jk) ({l, m} the other
//           pair), so by Fubini int_0^1 r34 P4(R(s)) ds = r34 / 16 + r34 int_0^1 (1 - s) g(s) ds.
//    Hence I4(R) = 1 / (8 pi) + r34 / 16 + int_0^1 [h(s) + r34 (1 - s) g(s)] ds, h the (1,2)...(2,4) terms: a single
//    one-dimensional integral. Every term uses the same six partial correlations rho_ab.cd (a pair given the
//    complementary pair): six arctangents per node, Q = 1/4 + atan2(S_ab, sqrt(S_aa S_bb - S_ab^2)) / (2 pi).
//
// 4. Conditioning without cancellation. With tau = 1 - s, 1 - s |r| = eta + tau |r| is formed from eta = 1 - |r|
//    and tau, never from s; the covariance of (x, y) given the pair (c, d), with sg = sign r_cd, is
//      S_xy = R_xy - s^2 [(r_xc - sg r_xd)(r_yc - sg r_yd) + sg (1 - s|r_cd|)(r_xc r_yd + r_xd r_yc)]
//                    / (1 - s^2 r_cd^2),
//    whose first bracket is O(1 - |r_cd|) for PSD R, so a nearly aligned conditioning pair costs no accuracy; given
//    one variable, S_zx = s (r_zx - sg r_oc) + sg s r_oc (1 - s|r_mc|) around the one (m) of z, x closer to +-c.
//    Round-off that leaves R(s) slightly indefinite near s = 1 is clamped (variances to [0, 1], Stein
//    coefficients to |S_zx| / sqrt(S_xx) <= sqrt(S_zz)); the result is clamped to [0, sqrt(C33 C44) / 2].
//
// 5. Quadrature. s = 1 - t^2 (ds = 2t dt) turns the sqrt(1 - s) endpoint behaviour of singular R into analytic
//    behaviour in t. The integrand is singular at t = +-i sqrt(e / (1 - e)) for the eigenvalues e < 1 of the
//    principal submatrices of R (strongly for pairs, through 1 / sqrt(1 - s^2 r^2); mildly for 3x3 and 4x4 minors,
//    whose eigenvalue is estimated by det / tr adj) and at real t >= sqrt(4/3) (eigenvalues > 1). With
//    a = min(pair scale, max(3x3 / 4x4 scale, 0.02)):
//      a >= 0.2 : 20-point Gauss-Legendre in t on [0, 1]                                         (20 nodes);
//      a <  0.2 : 16-point Gauss-Legendre on [0.5, 1], and on [0, 0.5] t = a sinh(u), u in [0, asinh(0.5 / a)],
//                 split into ceil(U / 5) equal panels of 24 Gauss-Legendre points        (40 nodes, at most 112).
//    The sinh map spreads the nodes evenly in log t down to the scale a of a nearly aligned pair (a >= 1e-8, as
//    1 - |r| >= 1.1e-16 unless exactly 0). The floor 0.02 (rather than the minor scale itself) was chosen
//    empirically: near-singular 3x3 / 4x4 minors only perturb the integrand mildly.
//
// 6. Accuracy, measured (scratch programs, not part of the build) against: a 40-50 digit mpmath evaluation of the
//    same integral with adaptive tanh-sinh quadrature; an independent route (C0 keeping the (3,4) block, adaptive
//    scipy.integrate.quad; tests/test_kernels_relu_i4.py); and a heavily refined composite rule for the same
//    integrand on 504 random, low-rank, nearly aligned (1 - |r| from 1e-2 to 1e-12) and nearly singular
//    covariances. Quadrature error: max 1.3e-13 relative, 99th percentile 8e-15. Generic and exactly degenerate
//    covariances (aligned, antipodal, rank 1-3, zero variances) against mpmath: <= 1e-14. For a nearly aligned
//    pair, 1 - |r| = eta, I4 moves like sqrt(eta), so the 1-ulp rounding of r = C_jk / sqrt(C_jj C_kk) alone changes
//    I4 by ~1e-16 / sqrt(eta) relative; this is what remains against the exact value (4e-13 at eta = 3e-9, 4e-11
//    at eta = 3e-13), while against the integral at the rounded correlations the error stays <= 4e-13. Values far
//    below sqrt(C33 C44) (nearly empty orthant cones, nearly antipodal pairs) are accurate to ~1e-14 sqrt(C33 C44)
//    absolute, not relative. No NaN or infinity on 4e5 random degenerate, rescaled (1e-40..1e40) and slightly
//    indefinite inputs; NaN entries give NaN.
//
// 7. Cost: per node 6 arctangents, 12 square roots, ~25 divisions and ~250 flops; no allocation. Measured CPU time
//    per call (g++ -O3 -march=native, AMD EPYC, on a machine shared with other jobs, so probably pessimistic):
//    3.4 us for teacher-student-like covariances (20 nodes), 5.8 us averaged over random 4x4 Wishart matrices,
//    9 us with an exactly aligned pair (40 nodes), 9-17 us for nearly aligned pairs (40 to 112 nodes).
//
// 8. Linear teacher units, by Stein's lemma on the linear variable(s) (unit-variance quantities, scaled back by
//    sqrt(C33 C44)); rho = r12, a_i = r3i, b_i = r4i, B = [-rho (a1 b1 + a2 b2) + a1 b2 + a2 b1] / sqrt(1 - rho^2)
//    (computed as sg [e (a1 b1 + a2 b2) - (a1 - sg a2)(b1 - sg b2)] / sqrt(e (2 - e)), e = 1 - |rho|, limit 0):
//      E[step step l3 relu4] = [a1 sqrt(1 - b1^2) + a2 sqrt(1 - b2^2) + B] / (4 pi)
//                              + r34 [1/8 + (asin rho + asin b1 + asin b2) / (4 pi)],
//      E[step step l3 l4]    = r34 [1/4 + asin(rho) / (2 pi)] + B / (2 pi).
//    relu(x) - relu(-x) = x ties them to relu_i4: I4(C) - I4(C with l4 -> -l4) = E[step step relu3 l4]; this
//    identity holds to ~1e-16 sqrt(C33 C44) on random and degenerate covariances.
//
// Every function here is TWOLAYER_HD (hd.hpp): the CUDA backend evaluates the same quadrature.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "twolayer/hd.hpp"

namespace twolayer::detail {
namespace relu_i4_impl {

inline constexpr double kPi = 3.14159265358979323846;
inline constexpr double kInv2Pi = 0.15915494309189533577;  // 1 / (2 pi)

// Gauss-Legendre rules on [0, 1]: the lower half of the nodes (ascending); node 1 - x carries the same weight. Rules
// are returned by value from TWOLAYER_HD functions: a namespace-scope table is host memory, which device code (the
// CUDA backend) cannot read.
template <int N>
struct HalfRule {
  double x[N], w[N];
};
TWOLAYER_HD inline HalfRule<8> gl16() {
  return {{0.00529953250417503370192, 0.027712488463383711961, 0.0671843988060841280598, 0.122297795822498483052,
           0.191061877798678125777, 0.270991611171386306829, 0.359198224610370543385, 0.452493745081181279907},
          {0.0135762297058770474259, 0.0311267619693239464314, 0.047579255841246392405, 0.0623144856277669360262,
           0.0747979944082883660408, 0.0845782596975012690947, 0.0913017075224617944334, 0.0947253052275342481427}};
}
TWOLAYER_HD inline HalfRule<10> gl20() {
  return {{0.00343570040745253760694, 0.0180140363610431043662, 0.0438827858743370470661, 0.0804415140888905883027,
           0.126834046769924603693, 0.181973159636742487274, 0.244566499024586450998, 0.313146955642290219664,
           0.38610707442917746096, 0.461736739433251333123},
          {0.00880700356957605915593, 0.0203007149001934706655, 0.0313360241670545317848, 0.0416383707883523743624,
           0.0509650599086202175184, 0.0590972659807592086562, 0.0658443192245883134492, 0.0710480546591910256646,
           0.0745864932363018733939, 0.076376693565362925349}};
}
TWOLAYER_HD inline HalfRule<12> gl24() {
  return {{0.00240639000148931991, 0.0126357220143452509008, 0.0308627239986336207382, 0.0567922364977994828934,
           0.089999007013048539023, 0.129937904210722817878, 0.175953174031512215374, 0.227289264305580232171,
           0.283103246186977430756, 0.342478660151918312807, 0.404440566263191845421, 0.467971553568697186957},
          {0.0061706148999935997734, 0.0142656943144668315907, 0.0221387194087099030843, 0.0296492924577183903732,
           0.036673240705540152867, 0.0430950807659766379586, 0.0488093260520569441349, 0.0537221350579828173913,
           0.0577528340268628006767, 0.0608352364639016956022, 0.0629187281734141480607, 0.063969097673376078487}};
}

// Quadrature parameters (section 5).
inline constexpr double kScaleFloor = 0.02;  // resolution kept below near-singular 3x3 / 4x4 minors
inline constexpr double kPlainMin = 0.2;     // a >= kPlainMin: one 20-point rule in t on [0, 1]
inline constexpr double kSplit = 0.5;        // else: 16 points on [kSplit, 1], sinh panels on [0, kSplit]
inline constexpr double kPanel = 5.0;        // longest sinh panel in u; 24 points per panel

TWOLAYER_HD inline double clamp(double x, double lo, double hi) { return x < lo ? lo : (x > hi ? hi : x); }

// sqrt(vi vj) with a single rounding when the product is a normal number, so that exact alignments such as
// C = [[15, -30], [-30, 60]] give correlations of exactly -1.
TWOLAYER_HD inline double norm2(double vi, double vj, double sdi, double sdj) {
  const double p = vi * vj;
  return (p > 1e-290 && p < 1e290) ? std::sqrt(p) : sdi * sdj;
}

// atan2(y, x) for x >= 0, branch-free Cephes atan: reduction to |z| <= tan(pi / 8) and a 4/5 rational (<= 2 ulp).
TWOLAYER_HD inline double angle(double y, double x) {
  constexpr double P0 = -8.750608600031904122785e-1, P1 = -1.615753718733365076637e1,
                   P2 = -7.500855792314704667340e1, P3 = -1.228866684490136173410e2,
                   P4 = -6.485021904942025371773e1;
  constexpr double Q0 = 2.485846490142306297962e1, Q1 = 1.650270098316988542046e2,
                   Q2 = 4.328810604912902668951e2, Q3 = 4.853903996359136964868e2,
                   Q4 = 1.945506571482613964425e2;
  constexpr double kT3P8 = 2.41421356237309504880, kMoreBits = 6.123233995736765886130e-17;
  const double ay = std::fabs(y);
  const bool big = ay > kT3P8 * x, mid = !big && ay > 0.66 * x;
  const double num = big ? -x : (mid ? ay - x : ay);
  const double den = big ? ay : (mid ? ay + x : x);
  const double z = den > 0.0 ? num / den : 0.0;
  const double base = big ? 0.5 * kPi : (mid ? 0.25 * kPi : 0.0);
  const double more = big ? kMoreBits : (mid ? 0.5 * kMoreBits : 0.0);
  const double zz = z * z;
  const double p = (((P0 * zz + P1) * zz + P2) * zz + P3) * zz + P4;
  const double q = ((((zz + Q0) * zz + Q1) * zz + Q2) * zz + Q3) * zz + Q4;
  const double r = base + ((z + z * (zz * p / q)) + more);
  return y < 0.0 ? -r : r;
}

// Pairs (i, j), i < j (0-based), numbered k = 0..5: (0,1) (0,2) (0,3) (1,2) (1,3) (2,3); k and 5 - k are disjoint.
// Row k also names the covariance given one variable used by the Stein terms: S_zx | c. (A table returned by value:
// device code cannot read a namespace-scope one.)
struct PairRow {
  int i, j, z, x, c;
};
TWOLAYER_HD inline PairRow pair_row(int k) {
  constexpr int t[6][5] = {{0, 1, 3, 1, 0}, {0, 2, 3, 2, 0}, {0, 3, 2, 1, 0},
                           {1, 2, 3, 0, 1}, {1, 3, 3, 2, 1}, {2, 3, 2, 0, 1}};
  return {t[k][0], t[k][1], t[k][2], t[k][3], t[k][4]};
}
TWOLAYER_HD inline constexpr int pair_index(int i, int j) {  // not recursive: device code needs a static stack size
  const int lo = i < j ? i : j, hi = i < j ? j : i;
  return lo == 0 ? hi - 1 : (lo == 1 ? hi + 1 : 5);
}

struct Setup {
  double r[6], ar[6], eta[6];       // per pair: correlation, |correlation|, 1 - |correlation|
  double A[6][3], B[6][3], rab[6];  // given pair k, for its complementary pair (a, b): [aa, bb, ab] (section 4)
  double d1[6], e1[6];              // S_zx | c = s (d1 + e1 (1 - s |r_mc|)), pair (m, c) = m1
  int m1[6];
  double scale;  // sqrt(C33 C44)
  double a;      // quadrature scale (section 5)
};

// Fills S; returns false when I4 vanishes identically (a zero variance or an antipodal pair).
TWOLAYER_HD inline bool setup(const double* C, Setup& S) {
  const double v[4] = {C[0], C[5], C[10], C[15]};
  if (!(v[0] > 0.0 && v[1] > 0.0 && v[2] > 0.0 && v[3] > 0.0)) return false;
  const double sd[4] = {std::sqrt(v[0]), std::sqrt(v[1]), std::sqrt(v[2]), std::sqrt(v[3])};
  S.scale = norm2(v[2], v[3], sd[2], sd[3]);
  double R[4][4];
  double a_pair = 1.0;
  for (int k = 0; k < 6; ++k) {
    const int i = pair_row(k).i, j = pair_row(k).j;
    const double c = clamp(0.5 * (C[4 * i + j] + C[4 * j + i]) / norm2(v[i], v[j], sd[i], sd[j]), -1.0, 1.0);
    if (c == -1.0) return false;
    R[i][j] = R[j][i] = c;
    S.r[k] = c, S.ar[k] = std::fabs(c), S.eta[k] = 1.0 - std::fabs(c);
    // the pair density 1 / sqrt(1 - s^2 r^2) is singular at t^2 = 1 - s = -eta / (1 - eta)
    if (S.eta[k] > 0.0 && S.eta[k] < 0.5) a_pair = std::min(a_pair, std::sqrt(S.eta[k] / (1.0 - S.eta[k])));
  }
  for (int i = 0; i < 4; ++i) R[i][i] = 1.0;
  // smallest eigenvalue of the 3x3 and 4x4 principal minors, estimated by det / tr adj
  double a_minor = 1.0, det3sum = 0.0;
  for (int k = 0; k < 4; ++k) {
    const int u = k == 0 ? 1 : 0, w = k <= 1 ? 2 : 1, y = k <= 2 ? 3 : 2;  // the indices other than k
    const double x1 = R[u][w], x2 = R[u][y], x3 = R[w][y];
    const double det3 = std::max(1.0 + 2.0 * x1 * x2 * x3 - x1 * x1 - x2 * x2 - x3 * x3, 0.0);
    const double e = det3 / (3.0 - x1 * x1 - x2 * x2 - x3 * x3 + 1e-300);
    a_minor = std::min(a_minor, std::sqrt(e / (1.0 - e + 1e-300)));
    det3sum += det3;
  }
  {
    const double p = S.r[0], b = S.r[1], c = S.r[2], d = S.r[3], e = S.r[4], f = S.r[5];
    const double det4 = 1.0 - (p * p + b * b + c * c + d * d + e * e + f * f) +
                        (p * p * f * f + b * b * e * e + c * c * d * d) +
                        2.0 * (p * b * d + p * c * e + b * c * f + d * e * f) -
                        2.0 * (p * b * e * f + p * c * d * f + b * c * d * e);
    const double e4 = std::max(det4, 0.0) / (det3sum + 1e-300);
    a_minor = std::min(a_minor, std::sqrt(e4 / (1.0 - e4 + 1e-300)));
  }
  S.a = std::min(a_pair, std::max(a_minor, double{kScaleFloor}));  // a copy: device code cannot refer to kScaleFloor
  for (int k = 0; k < 6; ++k) {  // conditioning on pair k = (c, d); complementary pair (a, b)
    const int c = pair_row(k).i, d = pair_row(k).j, a = pair_row(5 - k).i, b = pair_row(5 - k).j;
    const double sg = R[c][d] < 0.0 ? -1.0 : 1.0;
    const double da = R[a][c] - sg * R[a][d], db = R[b][c] - sg * R[b][d];
    S.A[k][0] = da * da, S.A[k][1] = db * db, S.A[k][2] = da * db;
    S.B[k][0] = 2.0 * sg * R[a][c] * R[a][d], S.B[k][1] = 2.0 * sg * R[b][c] * R[b][d];
    S.B[k][2] = sg * (R[a][c] * R[b][d] + R[a][d] * R[b][c]);
    S.rab[k] = R[a][b];
  }
  for (int j = 0; j < 6; ++j) {  // conditioning on one variable c
    const PairRow row = pair_row(j);
    const int z = row.z, x = row.x, c = row.c;
    const bool x_closer = std::fabs(R[x][c]) >= std::fabs(R[z][c]);
    const int m = x_closer ? x : z, o = x_closer ? z : x;
    const double sg = R[m][c] < 0.0 ? -1.0 : 1.0;
    S.d1[j] = R[z][x] - sg * R[o][c];
    S.e1[j] = sg * R[o][c];
    S.m1[j] = pair_index(m, c);
  }
  return true;
}

// The quantities of R(s), s = 1 - tau, shared by the integrands: per pair k, om = 1 - s |r_k|, isq =
// 1 / sqrt(1 - s^2 r_k^2), rt = sqrt(1 - s^2 r_k^2), q[j] = Q(partial correlation of pair j given pair 5 - j);
// S23 = cov(l3, l4 | l1 = l2 = 0) and sq01 = the square root of its determinant.
struct Partials {
  double om[6], isq[6], rt[6], q[6];
  double S23 = 0.0, sq01 = 0.0;
};
TWOLAYER_HD inline void partials(const Setup& S, double tau, Partials& P) {
  const double s = 1.0 - tau;
  double *om = P.om, *isq = P.isq, *rt = P.rt, *q = P.q;
  for (int k = 0; k < 6; ++k) {
    om[k] = S.eta[k] + tau * S.ar[k];                           // 1 - s |r_k|
    const double dd = std::max(om[k] * (2.0 - om[k]), 1e-300);  // 1 - s^2 r_k^2
    isq[k] = 1.0 / std::sqrt(dd);
    rt[k] = dd * isq[k];
  }
  for (int k = 0; k < 6; ++k) {  // the complementary pair (a, b) given pair k at zero
    const double f = s * s * isq[k] * isq[k];
    const double saa = clamp(1.0 - f * (S.A[k][0] + om[k] * S.B[k][0]), 0.0, 1.0);
    const double sbb = clamp(1.0 - f * (S.A[k][1] + om[k] * S.B[k][1]), 0.0, 1.0);
    const double sab = s * S.rab[k] - f * (S.A[k][2] + om[k] * S.B[k][2]);
    const double det = saa * sbb - sab * sab;
    const double sq = std::sqrt(det > 0.0 ? det : 0.0);
    q[5 - k] = 0.25 + kInv2Pi * angle(sab, sq);  // q[j] = Q(partial correlation of pair j given pair 5 - j)
    if (k == 0) {
      P.S23 = det < 0.0 ? std::copysign(std::sqrt(saa * sbb), sab) : sab;
      P.sq01 = sq;
    }
  }
}

// dP4/ds of section 3 (the quadrivariate orthant probability along the path) at s = 1 - tau.
TWOLAYER_HD inline double orthant4_integrand(const Setup& S, double tau) {
  Partials P;
  partials(S, tau, P);
  double g = 0.0;
  for (int k = 0; k < 6; ++k) g += S.r[k] * P.isq[k] * P.q[5 - k];
  return kInv2Pi * g;
}

// h(s) + r34 (1 - s) g(s) of section 3 at s = 1 - tau; all covariances are those of R(s).
TWOLAYER_HD inline double integrand(const Setup& S, double tau) {
  const double s = 1.0 - tau;
  Partials P;
  partials(S, tau, P);
  const double *om = P.om, *isq = P.isq, *rt = P.rt, *q = P.q;
  const double S23 = P.S23, sq01 = P.sq01;
  // Stein coefficient S_zx / sqrt(S_xx) given l_c = 0, bounded by sqrt(S_zz); j indexes (z, x, c), kx and kz are the
  // pairs (x, c) and (z, c)
  auto coef = [&](int j, int kx, int kz) {
    return clamp(s * (S.d1[j] + S.e1[j] * om[S.m1[j]]) * isq[kx], -rt[kz], rt[kz]);
  };
  // sqrt(2 pi) G(x, y, z | c) of section 3
  const double g023 = coef(0, 0, 2) * q[5] + coef(1, 1, 2) * q[4] + rt[2] * q[3];  // c = 1: x = 2, y = 3, z = 4
  const double g032 = coef(2, 0, 1) * q[5] + coef(1, 2, 1) * q[3] + rt[1] * q[4];  // c = 1: x = 2, y = 4, z = 3
  const double g123 = coef(3, 0, 4) * q[5] + coef(4, 3, 4) * q[2] + rt[4] * q[1];  // c = 2: x = 1, y = 3, z = 4
  const double g132 = coef(5, 0, 3) * q[5] + coef(4, 4, 3) * q[1] + rt[3] * q[2];  // c = 2: x = 1, y = 4, z = 3
  const double err = sq01 + 2.0 * kPi * q[5] * S23;  // 2 pi E[relu3 relu4 | l1 = l2 = 0]
  const double h = kInv2Pi * S.r[0] * isq[0] * err + S.r[1] * g023 + S.r[2] * g032 + S.r[3] * g123 + S.r[4] * g132;
  double g = 0.0;
  for (int k = 0; k < 6; ++k) g += S.r[k] * isq[k] * q[5 - k];
  return kInv2Pi * (h + S.r[5] * tau * g);
}

// Gauss-Legendre sum (half tables) of 2 t integrand(t^2) over t in [lo, hi]
template <int N, class F>
TWOLAYER_HD inline double gl_sum(const Setup& S, F&& integrand, const HalfRule<N>& rule, double lo, double hi) {
  const double L = hi - lo;
  double acc = 0.0;
  for (int i = 0; i < N; ++i) {
    const double t1 = lo + L * rule.x[i], t2 = hi - L * rule.x[i];
    acc += rule.w[i] * (t1 * integrand(S, t1 * t1) + t2 * integrand(S, t2 * t2));
  }
  return 2.0 * L * acc;
}

// int_0^1 2 t integrand(t^2) dt by the rules of section 5
template <class F>
TWOLAYER_HD inline double path_integral(const Setup& S, F&& integrand) {
  if (S.a >= kPlainMin) return gl_sum(S, integrand, gl20(), 0.0, 1.0);
  double acc = gl_sum(S, integrand, gl16(), kSplit, 1.0);
  const HalfRule<12> gl = gl24();
  // t in [0, kSplit] as t = a sinh(u), u in [0, U]: m equal panels of 24 points
  const double U = std::asinh(kSplit / S.a);
  const int m = static_cast<int>(std::ceil(U / kPanel));
  const double h = U / m;
  for (int k = 0; k < m; ++k) {
    double panel = 0.0;
    for (int i = 0; i < 12; ++i) {
      const double u1 = h * (k + gl.x[i]), u2 = h * (k + 1 - gl.x[i]);
      const double em1 = std::expm1(u1), em2 = std::expm1(u2), e1 = 1.0 + em1, e2 = 1.0 + em2;
      const double sh1 = 0.5 * em1 * (1.0 + 1.0 / e1), ch1 = 0.5 * (e1 + 1.0 / e1);  // sinh, cosh
      const double sh2 = 0.5 * em2 * (1.0 + 1.0 / e2), ch2 = 0.5 * (e2 + 1.0 / e2);
      const double t1 = S.a * sh1, t2 = S.a * sh2;
      panel += gl.w[i] * (ch1 * t1 * integrand(S, t1 * t1) + ch2 * t2 * integrand(S, t2 * t2));
    }
    acc += 2.0 * h * S.a * panel;
  }
  return acc;
}

TWOLAYER_HD inline bool has_nan(const double* C) {
  double sum = 0.0;
  for (int i = 0; i < 16; ++i) sum += C[i];
  return std::isnan(sum);
}

// Unit-variance quantities of the linear-teacher closed forms: rho = r12, a_i = r3i, b_i = r4i, r34; false when a
// variance is zero (the expectation is then identically 0).
TWOLAYER_HD inline bool linear_setup(const double* C, double& scale, double& rho, double a[2], double b[2], double& r34) {
  const double v[4] = {C[0], C[5], C[10], C[15]};
  if (!(v[0] > 0.0 && v[1] > 0.0 && v[2] > 0.0 && v[3] > 0.0)) return false;
  const double sd[4] = {std::sqrt(v[0]), std::sqrt(v[1]), std::sqrt(v[2]), std::sqrt(v[3])};
  auto corr = [&](int i, int j) {
    return clamp(0.5 * (C[4 * i + j] + C[4 * j + i]) / norm2(v[i], v[j], sd[i], sd[j]), -1.0, 1.0);
  };
  scale = norm2(v[2], v[3], sd[2], sd[3]);
  rho = corr(0, 1), a[0] = corr(2, 0), a[1] = corr(2, 1), b[0] = corr(3, 0), b[1] = corr(3, 1), r34 = corr(2, 3);
  return true;
}

// B of section 8, accurate as |rho| -> 1 (a1 - sg a2 and b1 - sg b2 are O(sqrt(1 - |rho|)) for PSD C); limit 0.
TWOLAYER_HD inline double stein_pair(double rho, const double a[2], const double b[2]) {
  const double sg = rho < 0.0 ? -1.0 : 1.0, e = 1.0 - std::fabs(rho);
  if (!(e > 0.0)) return 0.0;
  const double num = e * (a[0] * b[0] + a[1] * b[1]) - (a[0] - sg * a[1]) * (b[0] - sg * b[1]);
  return sg * num / std::sqrt(e * (2.0 - e));
}

}  // namespace relu_i4_impl

// E[step(l1) step(l2) relu(l3) relu(l4)], l ~ N(0, C); C: 16 doubles, row-major 4x4 PSD.
TWOLAYER_HD inline double relu_i4(const double* C) {
  namespace impl = relu_i4_impl;
  if (impl::has_nan(C)) return std::numeric_limits<double>::quiet_NaN();
  impl::Setup S;
  if (!impl::setup(C, S)) return 0.0;
  const double v = S.scale * (1.0 / (8.0 * impl::kPi) + S.r[5] / 16.0 + impl::path_integral(S, [](const impl::Setup& s, double tau) { return impl::integrand(s, tau); }));
  return impl::clamp(v, 0.0, 0.5 * S.scale);  // 0 <= I4 <= sqrt(E[relu3^2] E[relu4^2]) = sqrt(C33 C44) / 2
}

// P4(C) = P(l1 > 0, l2 > 0, l3 > 0, l4 > 0), the quadrivariate orthant probability: 1/16 + int_0^1 dP4/ds ds along the
// same path and with the same quadrature (sections 3 and 5). A zero variance or an antipodal pair gives 0.
TWOLAYER_HD inline double orthant4(const double* C) {
  namespace impl = relu_i4_impl;
  if (impl::has_nan(C)) return std::numeric_limits<double>::quiet_NaN();
  impl::Setup S;
  if (!impl::setup(C, S)) return 0.0;
  return impl::clamp(1.0 / 16.0 + impl::path_integral(S, [](const impl::Setup& s, double tau) { return impl::orthant4_integrand(s, tau); }), 0.0, 0.5);
}

// E[step(l1) step(l2) l3 relu(l4)] (relu student, linear unit l3), closed form (section 8).
TWOLAYER_HD inline double relu_i4_linear_relu(const double* C) {
  namespace impl = relu_i4_impl;
  if (impl::has_nan(C)) return std::numeric_limits<double>::quiet_NaN();
  double scale, rho, a[2], b[2], r34;
  if (!impl::linear_setup(C, scale, rho, a, b, r34)) return 0.0;
  const double p3 = 0.125 + (std::asin(rho) + std::asin(b[0]) + std::asin(b[1])) / (4.0 * impl::kPi);
  const double d = a[0] * std::sqrt((1.0 - b[0]) * (1.0 + b[0])) + a[1] * std::sqrt((1.0 - b[1]) * (1.0 + b[1])) +
                   impl::stein_pair(rho, a, b);
  return scale * (d / (4.0 * impl::kPi) + r34 * p3);
}

// E[step(l1) step(l2) l3 l4] (relu student, linear units l3 and l4), closed form (section 8).
TWOLAYER_HD inline double relu_i4_linear_linear(const double* C) {
  namespace impl = relu_i4_impl;
  if (impl::has_nan(C)) return std::numeric_limits<double>::quiet_NaN();
  double scale, rho, a[2], b[2], r34;
  if (!impl::linear_setup(C, scale, rho, a, b, r34)) return 0.0;
  return scale * (r34 * (0.25 + std::asin(rho) / (2.0 * impl::kPi)) + impl::stein_pair(rho, a, b) / (2.0 * impl::kPi));
}

}  // namespace twolayer::detail

// The step-unit gradient flow through alignment (step_flow.hpp): Dormand-Prince steps limited by the time to the
// next meeting, merging of units that meet, Filippov sliding of the clusters; forces and risk from population.cpp.
#include "twolayer/step_flow.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "twolayer/cancel.hpp"
#include "twolayer/divergence.hpp"
#include "twolayer/dormand_prince.hpp"
#include "twolayer/first_passage.hpp"
#include "twolayer/step_size.hpp"
#include "twolayer/format.hpp"
#include "twolayer/gaussian.hpp"
#include "twolayer/linalg.hpp"
#include "twolayer/population.hpp"
#include "twolayer/run_messages.hpp"

namespace twolayer {

bool is_step_flow(const OdeModel& m) {
  return m.student == Activation::Step && m.teacher == Activation::Step && m.regime == Regime::GradientFlow &&
         !m.spherical && !m.target && (!m.biased || (m.lr > 0.0 && m.lr_bias > 0.0));
}

namespace {

using namespace dopri;

constexpr double kNear = 1e-4;      // rad: an approaching unit closer than this has its error measured relative to
constexpr double kSlack = 0.05;     //      kSlack x its distance (its path is only Hoelder at the arrival)
constexpr double kApproach = 0.5;   // a step covers at most this fraction of the time to the nearest meeting,
constexpr double kLinear = 1e-3;    // or, closer than kLinear rad (where the arrival is nearly linear in t),
constexpr double kFinal = 0.98;     // this fraction: the meeting is then reached in a few steps and snapped
constexpr double kStiff = 1.0;      // and at most this multiple of distance / cusp speed near a meeting point
constexpr double kTwoPi = 2.0 * kPi;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

double dot(const double* x, const double* y, int n) {
  double s = 0.0;
  for (int j = 0; j < n; ++j) s += x[j] * y[j];
  return s;
}
void normalise(double* x, int n) {
  const double r = 1.0 / std::sqrt(dot(x, x, n));
  for (int j = 0; j < n; ++j) x[j] *= r;
}

// A student's cluster: on teacher `teacher` (u_i = sign T_r), or with the students of lead `lead` (u_i = sign u_C),
// or free (both -1).
struct Link {
  int teacher = -1, lead = -1;
  double sign = 1.0;
  bool linked() const { return teacher >= 0 || lead >= 0; }
};

class Flow {
 public:
  // With biases the rows live in the augmented space R^(K + M + 1): (x, b / kappa), kappa = sqrt(lr_bias / lr)
  // (step_flow.hpp), in which the flow is the Euclidean gradient flow at rate lr and each row's norm is conserved.
  Flow(const OdeModel& m, const double* y0, const IntegrateOptions& opt)
      : K(m.K), Mt(m.M), nr(m.K + m.M), n(m.K + m.M + (m.biased ? 1 : 0)), biased(m.biased),
        kappa(m.biased ? std::sqrt(m.lr_bias / m.lr) : 0.0), lr(m.lr), lr_a(m.lr_readout), sched(opt.schedule),
        v(m.v) {
    // Omega = X X^T with teachers first; rows x_u = V_u sqrt(lambda)
    std::vector<double> om(static_cast<std::size_t>(nr) * nr), V(om.size());
    const double *Q = y0, *Mo = y0 + m.offset_M();
    for (int r = 0; r < Mt; ++r)
      for (int q = 0; q < Mt; ++q) om[r * nr + q] = m.P[static_cast<std::size_t>(r) * Mt + q];
    for (int i = 0; i < K; ++i) {
      for (int r = 0; r < Mt; ++r) om[(Mt + i) * nr + r] = om[r * nr + Mt + i] = Mo[i * Mt + r];
      for (int k = 0; k < K; ++k) om[(Mt + i) * nr + Mt + k] = 0.5 * (Q[i * K + k] + Q[k * K + i]);
    }
    jacobi_eigen(om.data(), V.data(), nr);
    std::vector<double> X(static_cast<std::size_t>(nr) * n, 0.0);  // the rows, teachers first (augmented)
    for (int u = 0; u < nr; ++u)
      for (int c = 0; c < nr; ++c) X[u * n + c] = V[u * nr + c] * std::sqrt(std::max(om[c * nr + c], 0.0));
    if (biased) {
      for (int r = 0; r < Mt; ++r) X[r * n + nr] = m.teacher_bias[r] / kappa;
      for (int i = 0; i < K; ++i) X[(Mt + i) * n + nr] = y0[m.offset_b() + i] / kappa;
      tb = m.teacher_bias;
    }
    T.assign(X.begin(), X.begin() + static_cast<std::ptrdiff_t>(Mt) * n);
    U0.assign(X.begin() + static_cast<std::ptrdiff_t>(Mt) * n, X.begin() + static_cast<std::ptrdiff_t>(nr) * n);
    tnorm.resize(Mt);
    norm.resize(K);
    norm2.resize(K);
    for (int r = 0; r < Mt; ++r) {
      tnorm[r] = std::sqrt(dot(&T[r * n], &T[r * n], n));
      if (!(dot(&T[r * n], &T[r * n], nr) > 0.0))  // (with biases too: w = 0 is a constant, whatever its bias)
        throw std::invalid_argument("P: step units need P_rr > 0 (a zero teacher vector has no direction)");
      for (int c = 0; c < n; ++c) T[r * n + c] /= tnorm[r];
    }
    for (int i = 0; i < K; ++i) {
      norm[i] = std::sqrt(dot(&U0[i * n], &U0[i * n], n));
      if (!(dot(&U0[i * n], &U0[i * n], nr) > 0.0))
        throw std::invalid_argument("Q: step units need Q_ii > 0 (a zero student vector has no direction)");
      norm2[i] = norm[i] * norm[i];
      for (int c = 0; c < n; ++c) U0[i * n + c] /= norm[i];
    }
    Wt.resize(static_cast<std::size_t>(Mt) * nr);  // the teachers' rows in the realisation (without the bias entry)
    for (int r = 0; r < Mt; ++r)
      for (int c = 0; c < nr; ++c) Wt[r * nr + c] = T[r * n + c] * tnorm[r];
    W.resize(static_cast<std::size_t>(K) * nr);
    dW.resize(W.size());
    b.resize(K);
    db.resize(K);
    ga.resize(K);
    vf.resize(U0.size());
    leave.assign(U0.size(), 0.0);
    for (auto* w : {&ws_f, &ws_x, &ws_F, &ws_g, &ws_eb, &ws_xs}) w->resize(n);
    valid.assign(K, 1);
    link.resize(K);
  }

  const int K, Mt, nr, n;  // nr: the realisation's dimension (K + M); n: the rows' (nr + 1 with biases)
  const bool biased;
  const double kappa;  // sqrt(lr_bias / lr): the augmented rows' bias entry is b / kappa
  const double lr, lr_a;
  const Schedule& sched;
  std::vector<double> v, tb, T, Wt, U0, tnorm, norm, norm2;
  std::vector<Link> link;
  std::vector<double> W, b, dW, db, ga, vf;  // workspace; vf: the last velocity() call's free velocities
  std::vector<double> leave;  // with biases: where each linked student leaves its cluster if its condition fails
  // scratch rows (n entries) of the cusp's helpers, so that no call allocates: velocity()'s constraint force,
  // held()'s offset and relative velocity, the cusp's gradient, e_b and the offset across it
  std::vector<double> ws_f;
  mutable std::vector<double> ws_x, ws_F, ws_g, ws_eb, ws_xs;
  std::vector<char> valid;           // the last velocity() call's sliding condition per linked student
  // limit()'s bodies: direction u, velocity du (null: fixed), cusp weight A, inverse mass im; a teacher's index
  // (teacher) or its lead student (lead)
  struct Body {
    const double *u, *du;
    double A, im;
    int teacher, lead;
  };
  std::vector<Body> bodies;

  // The population of directions U and readouts a: the rows w_i (and biases b_i) in W (and b).
  Population population(const double* U, const double* a) {
    for (int i = 0; i < K; ++i) {
      for (int c = 0; c < nr; ++c) W[i * nr + c] = U[i * n + c] * norm[i];
      if (biased) b[i] = kappa * U[i * n + nr] * norm[i];
    }
    Population p;
    p.student = Layer{W.data(), a, K, Activation::Step};
    p.teacher = Layer{Wt.data(), v.data(), Mt, Activation::Step};
    p.d = nr;
    p.scale = 1.0;
    return p;
  }
  Biases biases() const { return Biases{b.data(), tb.data()}; }

  double risk(const double* U, const double* a) {
    const Population p = population(U, a);
    return biased ? population_risk_mean(p, biases(), 1) : population_risk(p, 1);
  }

  // The state [Q, M, a] (dynamics.hpp), then b with biases, of directions U and readouts a.
  void state(const double* U, const double* a, double* y) const {
    for (int i = 0; i < K; ++i) {
      for (int k = 0; k < K; ++k) y[i * K + k] = norm[i] * norm[k] * dot(&U[i * n], &U[k * n], nr);
      for (int r = 0; r < Mt; ++r) y[K * K + i * Mt + r] = norm[i] * tnorm[r] * dot(&U[i * n], &T[r * n], nr);
      y[K * K + K * Mt + i] = a[i];
      if (biased) y[K * K + K * Mt + K + i] = kappa * U[i * n + nr] * norm[i];
    }
  }

  // The cusp where two biased step units meet (step_flow.hpp, "Biases"): at the unit row u, G(delta) =
  // k E|alpha t + s Z| for a tangent delta, t = delta . e_b, s = |delta - t e_b|.
  struct CuspShape {
    double k, alpha;
    const double* eb;  // (ws_eb)
  };
  CuspShape cusp_shape(const double* u) const {
    const double uw = std::sqrt(dot(u, u, nr)), ub = u[nr], beta = kappa * ub / uw;
    for (int c = 0; c < nr; ++c) ws_eb[c] = -ub * u[c] / uw;
    ws_eb[nr] = uw;
    return {0.5 * kInvSqrt2Pi * std::exp(-0.5 * beta * beta) / uw, std::sqrt(kappa * kappa + beta * beta),
            ws_eb.data()};
  }
  // E|m + s Z|, Z ~ N(0, 1), s >= 0.
  static double abs_mean(double m, double s) {
    if (!(s > 0.0)) return std::fabs(m);
    const double z = m / s;
    return 2.0 * s * kInvSqrt2Pi * std::exp(-0.5 * z * z) + m * std::erf(z / kSqrt2);
  }
  // The dual norm of G at u: max over tangent delta of f . delta / G(delta) (f's radial part dropped): a member
  // stays in its cluster while its constraint force f satisfies cusp_dual(f) <= lr s |a c| / |w|^2 (without biases
  // 2 pi |f|). The maximum over the angle psi of delta = (cos psi, sin psi) in (e_b, f's other part): a grid, then
  // golden sections around its best point.
  double cusp_dual(const double* u, const double* f, double* arg = nullptr) const {
    const CuspShape g = cusp_shape(u);
    const double fu = dot(f, u, n), ft = dot(f, g.eb, n);
    const double fp = std::sqrt(std::max(dot(f, f, n) - fu * fu - ft * ft, 0.0));
    if (!(g.k > 0.0)) {  // a saturated unit (phi(beta) underflows, |beta| > ~38): no cusp holds anything
      if (arg) std::copy(g.eb, g.eb + n, arg);
      return ft == 0.0 && fp == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
    }
    auto ratio = [&](double psi) {
      const double c = std::cos(psi), sn = std::sin(psi);
      return (ft * c + fp * sn) / (g.k * abs_mean(g.alpha * c, sn));
    };
    constexpr int kGrid = 64;
    int best = 0;
    double top = ratio(0.0);
    for (int q = 1; q <= kGrid; ++q) {
      const double r = ratio(kPi * q / kGrid);
      if (r > top) top = r, best = q;
    }
    double lo = kPi * std::max(best - 1, 0) / kGrid, hi = kPi * std::min(best + 1, kGrid) / kGrid;
    constexpr double kGolden = 0.61803398874989485;
    for (int it = 0; it < 40; ++it) {
      const double x1 = hi - kGolden * (hi - lo), x2 = lo + kGolden * (hi - lo);
      if (ratio(x1) < ratio(x2))
        lo = x1;
      else
        hi = x2;
    }
    double psi = 0.5 * (lo + hi), value = ratio(psi);
    if (top > value) psi = kPi * best / kGrid, value = top;
    if (arg) {  // the maximising direction: cos psi e_b + sin psi (f's part across e_b and u, normalised)
      for (int c = 0; c < n; ++c) {
        const double across = fp > 0.0 ? (f[c] - ft * g.eb[c] - fu * u[c]) / fp : 0.0;
        arg[c] = std::cos(psi) * g.eb[c] + std::sin(psi) * across;
      }
    }
    return value;
  }
  // G's gradient at u in the tangent direction x (unit) into out: k (alpha erf(alpha t / (s sqrt 2)) e_b +
  // 2 phi(alpha t / s) x_s / s), x_s = x - t e_b.
  void cusp_gradient(const double* u, const double* x, double* out) const {
    const CuspShape g = cusp_shape(u);
    const double t = dot(x, g.eb, n), xu = dot(x, u, n);
    std::vector<double>& xs = ws_xs;
    for (int c = 0; c < n; ++c) xs[c] = x[c] - t * g.eb[c] - xu * u[c];
    const double sn = std::sqrt(dot(xs.data(), xs.data(), n)), m = g.alpha * t;
    const double along = sn > 0.0 ? g.alpha * std::erf(m / (sn * kSqrt2)) : (t > 0.0 ? g.alpha : -g.alpha);
    const double across = sn > 0.0 ? 2.0 * kInvSqrt2Pi * std::exp(-0.5 * (m / sn) * (m / sn)) / sn : 0.0;
    for (int c = 0; c < n; ++c) out[c] = g.k * (along * g.eb[c] + across * xs[c]);
  }

  // c_i of a linked student: the summed weight of the other units of its cluster, seen from i.
  double cusp_weight(int i, const double* a) const {
    const Link& l = link[i];
    double c = l.teacher >= 0 ? l.sign * v[l.teacher] : 0.0;
    for (int k = 0; k < K; ++k)
      if (k != i && ((l.teacher >= 0 && link[k].teacher == l.teacher) || (l.lead >= 0 && link[k].lead == l.lead)))
        c -= l.sign * link[k].sign * a[k];
    return c;
  }

  // dU, da at rate s; the free velocities go to vf and the sliding conditions to valid.
  void velocity(double s, const double* U, const double* a, double* dU, double* da) {
    if (biased)  // (the bias entry's gradient is kappa dR/db: the rows hold b / kappa)
      population_gradient_mean(population(U, a), biases(), dW.data(), ga.data(), db.data(), 1);
    else
      population_gradient(population(U, a), dW.data(), ga.data(), 1);
    for (int i = 0; i < K; ++i) {
      for (int c = 0; c < nr; ++c) vf[i * n + c] = -lr * s * dW[i * nr + c] / norm[i];
      if (biased) vf[i * n + nr] = -lr * s * kappa * db[i] / norm[i];
    }
    for (int i = 0; i < K; ++i) da[i] = lr_a != 0.0 ? -lr_a * s * ga[i] : 0.0;
    std::copy(vf.begin(), vf.end(), dU);
    for (int i = 0; i < K; ++i) {
      if (!link[i].linked() || (link[i].lead >= 0 && link[i].lead != i)) continue;
      // the cluster of i (i: a student on a teacher, or a free cluster's lead); its velocity uc
      std::vector<int> members;
      if (link[i].teacher >= 0)
        members.push_back(i);
      else
        for (int k = 0; k < K; ++k)
          if (link[k].lead == i) members.push_back(k);
      std::vector<double> uc(n, 0.0);
      if (link[i].lead >= 0) {
        double mass = 0.0;
        for (int k : members) {
          mass += norm2[k];
          for (int c = 0; c < n; ++c) uc[c] += link[k].sign * norm2[k] * vf[k * n + c];
        }
        for (double& x : uc) x /= mass;
      }
      bool all = true;
      for (int k : members) {
        const double ck = cusp_weight(k, a);
        std::vector<double>& f = ws_f;  // the constraint force on k
        for (int c = 0; c < n; ++c) f[c] = link[k].sign * uc[c] - vf[k * n + c];
        if (biased) {  // (leave: -argmax of f . e / G(e), where the velocity beats the cusp when it fails)
          const double dual = cusp_dual(&U[k * n], f.data(), &leave[k * n]);
          for (int c = 0; c < n; ++c) leave[k * n + c] = -leave[k * n + c];
          valid[k] = a[k] * ck > 0.0 && dual <= lr * s * std::fabs(a[k] * ck) / norm2[k];
        } else {
          const double norm_f = std::sqrt(dot(f.data(), f.data(), n));
          valid[k] = a[k] * ck > 0.0 && norm_f <= lr * s * std::fabs(a[k] * ck) / (kTwoPi * norm2[k]);
        }
        all = all && valid[k];
      }
      if (all)
        for (int k : members)
          for (int c = 0; c < n; ++c) dU[k * n + c] = link[k].sign * uc[c];
    }
  }

  // Angle between unit rows x and y, and the rate at which it closes (-dtheta/dt) under velocities dx, dy.
  void approach(const double* x, const double* dx, const double* y, const double* dy, double& theta,
                double& rate) const {
    const CosSin cs = unit_cos_sin(x, 1.0 / std::sqrt(dot(x, x, n)), y, 1.0 / std::sqrt(dot(y, y, n)), n);
    theta = std::atan2(cs.s, cs.c);
    rate = 0.0;
    if (!(cs.s > 0.0)) return;
    for (int c = 0; c < n; ++c) {
      rate += dx[c] * (y[c] - cs.c * x[c]) / cs.s;
      if (dy) rate += dy[c] * (x[c] - cs.c * y[c]) / cs.s;
    }
  }

  // The meeting of bodies b and o at angle 0 (sigma = 1) or pi (sigma = -1): x, the offset of b from the meeting
  // point in the tangent plane at u_b, and F, b's velocity relative to o's there (n entries each).
  void offset(const Body& b, const Body& o, double sigma, double* x, double* F) const {
    double xu = 0.0, wu = 0.0;
    for (int j = 0; j < n; ++j) {
      xu += (b.u[j] - sigma * o.u[j]) * b.u[j];
      wu += (b.du[j] - (o.du ? sigma * o.du[j] : 0.0)) * b.u[j];
    }
    for (int j = 0; j < n; ++j) {
      x[j] = b.u[j] - sigma * o.u[j] - xu * b.u[j];
      F[j] = b.du[j] - (o.du ? sigma * o.du[j] : 0.0) - wu * b.u[j];
    }
  }

  // Whether the cusp (speed c) of the meeting point nearest to bodies b and o (at angle theta) attracts and holds
  // them against the rest of their relative velocity: |F| < c, F = du_b - sigma du_o + c x (x: the unit vector
  // from the meeting point to b in the tangent plane at u_b, sigma = +-1 for the meeting at 0 or pi), so that they
  // close in on it, their direction x turning at the rate |F| / phi.
  bool held(const Body& b, const Body& o, double theta, double c) const {
    const double sigma = theta < 0.5 * kPi ? 1.0 : -1.0;
    if (!(sigma * b.A * o.A < 0.0)) return false;  // a repulsive cusp
    std::vector<double> &x = ws_x, &F = ws_F;
    offset(b, o, sigma, x.data(), F.data());
    const double x2 = dot(x.data(), x.data(), n), rx = x2 > 0.0 ? 1.0 / std::sqrt(x2) : 0.0;
    double f2 = 0.0;
    for (int j = 0; j < n; ++j) {
      const double f = F[j] + c * rx * x[j];
      f2 += f * f;
    }
    return f2 < c * c;
  }

  // held() with biases: whether the cusp of strength L = lr s |A_B A_B'| (1/M_B + 1/M_B') (its field -L grad G(x),
  // x the unit direction from the meeting point to b) holds b and o against the rest of their relative velocity F:
  // cusp_dual(F) < L; speed: the cusp's speed L |grad G(x)|.
  bool held_biased(const Body& b, const Body& o, double theta, double L, double& speed) const {
    const double sigma = theta < 0.5 * kPi ? 1.0 : -1.0;
    if (!(sigma * b.A * o.A < 0.0)) return false;  // a repulsive cusp
    std::vector<double> &x = ws_x, &F = ws_F, &g = ws_g;
    offset(b, o, sigma, x.data(), F.data());
    const double x2 = dot(x.data(), x.data(), n);
    if (!(x2 > 0.0)) return false;
    for (double& e : x) e /= std::sqrt(x2);
    cusp_gradient(b.u, x.data(), g.data());
    speed = L * std::sqrt(dot(g.data(), g.data(), n));
    for (int j = 0; j < n; ++j) F[j] += L * g[j];
    return cusp_dual(b.u, F.data()) < L;
  }

  // The step limiter: the largest step (inf if none) and, per student, the distance to the nearest meeting it
  // approaches (inf if none), from the state U, a and its velocity dU at rate s.
  //
  // It looks at bodies, the units that move as one: a teacher with the students on it (fixed), a free cluster, a
  // free student. A body B has a direction u_B (its members at sigma_k u_B), a mass M_B = sum_k |w_k|^2 (infinite
  // for a teacher) and a cusp weight A_B = sum_k sigma_k a_k (minus v_r for a teacher): near a meeting of B and B'
  // at angle phi from 0 (or pi), their risk is smooth but for the cusp -+A_B A_B' phi / (2 pi), which turns
  // u_B towards (or away from) the meeting point at the angular speed c = lr s |A_B A_B'| (1/M_B + 1/M_B') / (2 pi)
  // (du_B/dt = -lr s dR/du_B / M_B). Two bounds per pair of bodies:
  // - approach: a step covers at most a fraction of the time to the meeting the pair closes in on (angle 0, or pi
  //   when it opens), so that no step jumps over a meeting;
  // - cusp: the cusp's field turns on the length scale of the distance phi to the meeting point (its Lipschitz
  //   constant is c / phi), so while the cusp holds the pair (held()) a step stays below kStiff phi / c, closing
  //   or not, and the explicit stages never straddle the point. Without it a student held off a teacher by a
  //   smooth force nearly as strong as the cusp (closing rate << c) took steps at the stability limit of the
  //   Runge-Kutta method and chattered around the teacher at a distance ~ h c instead of reaching it: the risk
  //   rose between steps, at ~700 steps per unit time.
  //   Cusps that cancel (an antipodal pair of students with equal readouts, which is a constant function; a student
  //   on its teacher with the readout of the teacher) leave a smooth field and bound nothing; a pair that the cusp
  //   does not hold (it separates, or passes by) is left to the approach bound and the error control: bounding it
  //   too cost ~1e5 steps for a pair that left a cluster at the margin of its sliding condition.
  double limit(const double* U, const double* a, const double* dU, double s, std::vector<double>& near) {
    double h = std::numeric_limits<double>::infinity();
    near.assign(K, std::numeric_limits<double>::infinity());
    bodies.clear();
    for (int r = 0; r < Mt; ++r) {
      double A = -v[r];
      for (int k = 0; k < K; ++k)
        if (link[k].teacher == r) A += link[k].sign * a[k];
      bodies.push_back(Body{&T[r * n], nullptr, A, 0.0, r, -1});
    }
    for (int i = 0; i < K; ++i) {
      if (link[i].teacher >= 0 || (link[i].lead >= 0 && link[i].lead != i)) continue;
      double A = 0.0, mass = 0.0;
      for (int k = 0; k < K; ++k)
        if (k == i || (link[i].lead == i && link[k].lead == i)) A += link[k].sign * a[k], mass += norm2[k];
      bodies.push_back(Body{&U[i * n], &dU[i * n], A, 1.0 / mass, -1, i});
    }
    // the students of body b
    auto mark = [&](const Body& b, double dist) {
      for (int k = 0; k < K; ++k)
        if ((b.teacher >= 0 && link[k].teacher == b.teacher) || k == b.lead || (b.lead >= 0 && link[k].lead == b.lead))
          near[k] = std::min(near[k], dist);
    };
    const double pull = lr * s / kTwoPi;
    for (std::size_t q = static_cast<std::size_t>(Mt); q < bodies.size(); ++q) {
      const Body& b = bodies[q];
      for (std::size_t o = 0; o < bodies.size(); ++o) {
        if (o >= static_cast<std::size_t>(Mt) && o <= q) continue;  // each pair of moving bodies once
        const Body& c = bodies[o];
        double theta, rate;
        approach(b.u, b.du, c.u, c.du, theta, rate);
        const double nearest = std::min(theta, kPi - theta);
        double cusp = pull * std::fabs(b.A * c.A) * (b.im + c.im);
        const bool hold = cusp > 0.0 && nearest > kStepSnap &&
                          (biased ? held_biased(b, c, theta, kTwoPi * cusp, cusp) : held(b, c, theta, cusp));
        if (hold) h = std::min(h, kStiff * nearest / cusp);
        // to angle 0 (closing, rate > 0) or to pi (opening, rate < 0)
        const double dist = rate > 0.0 ? theta : kPi - theta, speed = std::fabs(rate);
        if (!(speed > 0.0) || !(dist > kStepSnap)) continue;
        h = std::min(h, (dist < kLinear ? kFinal : kApproach) * dist / speed);
        if (dist < kNear) mark(b, dist), mark(c, dist);
      }
    }
    return h;
  }

  // Puts every linked student exactly on its cluster's direction (teacher, or the norm-weighted mean direction).
  void impose(double* U) const {
    for (int i = 0; i < K; ++i) {
      const Link& l = link[i];
      if (l.teacher >= 0) {
        for (int c = 0; c < n; ++c) U[i * n + c] = l.sign * T[l.teacher * n + c];
      } else if (l.lead == i) {
        std::vector<double> uc(n, 0.0);
        for (int k = 0; k < K; ++k)
          if (link[k].lead == i)
            for (int c = 0; c < n; ++c) uc[c] += link[k].sign * norm2[k] * U[k * n + c];
        normalise(uc.data(), n);
        for (int k = 0; k < K; ++k)
          if (link[k].lead == i)
            for (int c = 0; c < n; ++c) U[k * n + c] = link[k].sign * uc[c];
      }
    }
  }

  // Merges units that met (within kStepSnap of angle 0 or pi); returns whether any did.
  bool merge(double* U) {
    bool any = false;
    auto angle = [&](const double* x, const double* y) {
      const CosSin cs = unit_cos_sin(x, 1.0, y, 1.0, n);
      return std::atan2(cs.s, cs.c);
    };
    // a free student or free cluster (by its lead) meeting a teacher: the whole cluster joins the teacher
    for (int i = 0; i < K; ++i) {
      if (link[i].teacher >= 0 || (link[i].lead >= 0 && link[i].lead != i)) continue;
      for (int r = 0; r < Mt; ++r) {
        const double th = angle(&U[i * n], &T[r * n]);
        if (th >= kStepSnap && kPi - th >= kStepSnap) continue;
        const double side = th < kStepSnap ? 1.0 : -1.0;
        const bool lead = link[i].lead == i;
        for (int k = 0; k < K; ++k)
          if (k == i || (lead && link[k].lead == i)) {
            const double sg = k == i ? 1.0 : link[k].sign;
            link[k] = Link{r, -1, side * sg};
          }
        any = true;
        break;
      }
    }
    // two free students / clusters meeting: one cluster, led by the smaller lead
    for (int i = 0; i < K; ++i) {
      if (link[i].teacher >= 0 || (link[i].lead >= 0 && link[i].lead != i)) continue;
      for (int k = i + 1; k < K; ++k) {
        if (link[k].teacher >= 0 || (link[k].lead >= 0 && link[k].lead != k)) continue;
        const double th = angle(&U[i * n], &U[k * n]);
        if (th >= kStepSnap && kPi - th >= kStepSnap) continue;
        const double side = th < kStepSnap ? 1.0 : -1.0;
        if (link[i].lead < 0) link[i] = Link{-1, i, 1.0};
        const int old = k;
        for (int j = 0; j < K; ++j)
          if (j == k || link[j].lead == old) {
            const double sg = j == k ? 1.0 : link[j].sign;
            link[j] = Link{-1, i, side * sg};
          }
        any = true;
      }
    }
    if (any) impose(U);
    return any;
  }

  // Releases the linked students whose sliding condition failed at the last velocity() call (state U): each leaves
  // along its free velocity, moved off by 10 kStepSnap; clusters left with one student dissolve.
  void release(double* U) {
    for (int i = 0; i < K; ++i) {
      if (!link[i].linked() || valid[i]) continue;
      // along its free velocity, or with biases along the direction where that beats the (anisotropic) cusp
      const double* away = biased ? &leave[i * n] : &vf[i * n];
      double f = std::sqrt(dot(away, away, n));
      if (!(f > 0.0)) continue;
      for (int c = 0; c < n; ++c) U[i * n + c] += 10.0 * kStepSnap * away[c] / f;
      normalise(&U[i * n], n);
      const int lead = link[i].lead;
      link[i] = Link{};
      if (lead < 0) continue;
      // re-lead the rest of the cluster
      int first = -1, count = 0;
      for (int k = 0; k < K; ++k)
        if (link[k].lead == lead) {
          if (first < 0) first = k;
          ++count;
        }
      const double s0 = first >= 0 ? link[first].sign : 1.0;
      for (int k = 0; k < K; ++k)
        if (link[k].lead == lead) link[k] = count > 1 ? Link{-1, first, link[k].sign * s0} : Link{};
    }
  }

  int count_on_teachers() const {
    int c = 0;
    for (const Link& l : link) c += l.teacher >= 0;
    return c;
  }
  int count_in_clusters() const {
    int c = 0;
    for (const Link& l : link) c += l.lead >= 0;
    return c;
  }
};

void check(const IntegrateOptions& opt, const StopRule& stop) {
  if (opt.max_steps < 1) throw std::invalid_argument("max_steps: expected a positive number of steps");
  if (!(opt.rtol >= 0.0 && opt.atol >= 0.0 && opt.rtol + opt.atol > 0.0))
    throw std::invalid_argument("rtol, atol: expected numbers >= 0, not both 0");
  for (std::size_t i = 0; i < opt.times.size(); ++i)
    if (!std::isfinite(opt.times[i]) || opt.times[i] < 0.0 || (i > 0 && opt.times[i] < opt.times[i - 1]))
      throw std::invalid_argument("times: expected finite, non-negative, non-decreasing output times");
  if (!(stop.risk_tol >= 0.0 && stop.risk_rtol >= 0.0))
    throw std::invalid_argument("risk_tol, risk_rtol: expected numbers >= 0");
}

}  // namespace

IntegrateResult step_flow_integrate(const OdeModel& model, const double* y0, const IntegrateOptions& opt,
                                    const StopRule& stop) {
  validate_model(model);
  check(opt, stop);
  Flow flow(model, y0, opt);
  const int K = flow.K, n = flow.n;
  // the integrated state Y = [U (K x n directions), a (K)]
  const std::size_t nu = static_cast<std::size_t>(K) * n, N = nu + static_cast<std::size_t>(K);
  IntegrateResult res;
  std::vector<double> Y(N), yrow(model.state_size()), Yi(N);
  std::copy(flow.U0.begin(), flow.U0.end(), Y.begin());
  std::copy(y0 + model.offset_a(), y0 + model.offset_a() + K, Y.begin() + static_cast<std::ptrdiff_t>(nu));
  auto risk = [&](const double* X) { return flow.risk(X, X + nu); };
  auto record = [&](double t, const double* X) {
    flow.state(X, X + nu, yrow.data());
    res.t.push_back(t);
    res.y.insert(res.y.end(), yrow.begin(), yrow.end());
    res.risk.push_back(risk(X));
  };
  const bool scheduled = !opt.schedule.identity(), piecewise = opt.schedule.piecewise_constant();
  double step_rate = scheduled && piecewise ? opt.schedule(0.0) : 1.0;
  auto rate = [&](double t) { return !scheduled ? 1.0 : piecewise ? step_rate : opt.schedule(t); };
  auto velocity = [&](double t, const double* X, double* dX) {
    flow.velocity(rate(t), X, X + nu, dX, dX + nu);
    ++res.n_rhs;
  };

  double t = 0.0;
  std::size_t next = 0;
  const std::size_t nt = opt.times.size();
  const double t_end = nt ? opt.times.back() : 0.0;
  std::vector<double> dY(N);
  flow.merge(Y.data());
  velocity(0.0, Y.data(), dY.data());
  flow.release(Y.data());
  velocity(0.0, Y.data(), dY.data());
  while (next < nt && opt.times[next] <= 0.0) record(opt.times[next++], Y.data());
  const double r0 = risk(Y.data());
  const double threshold = std::max(stop.risk_tol, stop.risk_rtol * r0);
  if (stop.active() && r0 <= threshold) {
    if (res.t.empty()) record(0.0, Y.data());
    res.status = "converged", res.stop_time = 0.0;
    res.message = converged_message(r0, threshold, stop, 0.0);
    return res;
  }

  std::vector<double> k[7], Ys(N), Yn(N), r2(N), r3(N), r4(N), r5(N), near;
  for (auto& kj : k) kj.resize(N);
  static constexpr double A[7][6] = {{0, 0, 0, 0, 0, 0},         {a21, 0, 0, 0, 0, 0},
                                     {a31, a32, 0, 0, 0, 0},     {a41, a42, a43, 0, 0, 0},
                                     {a51, a52, a53, a54, 0, 0}, {a61, a62, a63, a64, a65, 0},
                                     {b1, 0, b3, b4, b5, b6}};
  static constexpr double C[7] = {0.0, c2, c3, c4, c5, 1.0, 1.0};
  static constexpr double E[7] = {e1, 0.0, e3, e4, e5, e6, e7};
  // the state at fraction th of the accepted step (dense output, directions normalised)
  auto dense = [&](double th, double* out) {
    dense_value(Y.data(), r2.data(), r3.data(), r4.data(), r5.data(), th, N, out);
    for (int i = 0; i < K; ++i) normalise(out + static_cast<std::size_t>(i) * n, n);
  };
  double h = 1e-3;
  while (next < nt) {
    if (cancel_requested() || res.n_steps >= opt.max_steps) {
      if (cancel_requested()) {
        res.message = interrupted_message(t, res.n_steps);
        res.status = "interrupted";
      } else {
        res.message = max_steps_message(opt.max_steps, t);
        res.status = "max_steps";
      }
      res.stop_time = t;
      return res;
    }
    h = std::min({h, flow.limit(Y.data(), Y.data() + nu, dY.data(), rate(t), near), t_end - t});
    h = step_size::capped(h, opt.h_max);
    if (scheduled && piecewise) {
      h = std::min(h, opt.schedule.next_jump(t) - t);
      const double r = opt.schedule(t + 0.5 * h);
      if (r != step_rate) {  // k1 at the rate of this step
        step_rate = r;
        velocity(t, Y.data(), dY.data());
      }
    }
    h = std::max(h, 1e-300);
    k[0] = dY;
    for (int st = 1; st < 7; ++st) {
      std::vector<double>& Yt = st == 6 ? Yn : Ys;
      for (std::size_t j = 0; j < N; ++j) {
        double x = 0.0;
        for (int q = 0; q < st; ++q) x += A[st][q] * k[q][j];
        Yt[j] = Y[j] + h * x;
      }
      velocity(t + C[st] * h, Yt.data(), k[st].data());
    }
    // error: RMS of h sum_j E_j k_j over atol + rtol max(|y|, |y_new|), plus the slack of approaching students
    double e2 = 0.0;
    for (std::size_t j = 0; j < N; ++j) {
      double err = 0.0;
      for (int q = 0; q < 7; ++q) err += E[q] * k[q][j];
      const std::size_t i = j / static_cast<std::size_t>(n);
      const double slack = j < nu && std::isfinite(near[i]) && flow.link[i].teacher < 0 ? kSlack * near[i] : 0.0;
      const double q = step_size::scaled(h * err, Y[j], Yn[j], opt.atol, opt.rtol, slack);
      e2 += q * q;
    }
    const double e = step_size::rms(e2, N);
    if (!step_size::accepts(e)) {
      ++res.n_rejected;
      h = step_size::after_rejected(h, e);
      continue;
    }
    ++res.n_steps;
    const double t_new = t + h;
    dense_coefficients(Y.data(), Yn.data(), k[0].data(), k[2].data(), k[3].data(), k[4].data(), k[5].data(),
                       k[6].data(), h, N, r2.data(), r3.data(), r4.data(), r5.data());
    for (int i = 0; i < K; ++i) normalise(&Yn[static_cast<std::size_t>(i) * n], n);
    flow.impose(Yn.data());
    flow.merge(Yn.data());
    for (double x : Yn)
      if (!std::isfinite(x)) {
        res.status = "diverged", res.stop_time = t_new;
        res.message = diverged_message(t_new, divergence_message(kNotFinite));
        return res;
      }
    // outputs in (t, t_new], or the early stop located on the dense output
    if (stop.active()) {
      const double r_new = risk(Yn.data());
      if (r_new <= threshold) {
        std::vector<double> Ystop(N);
        const double w = locate_first_passage(dense, risk, threshold, t, h, risk(Y.data()), r_new, Ystop.data());
        const double t_stop = w < 1.0 ? t + w * h : t_new;
        while (next < nt && opt.times[next] < t_stop) {
          dense((opt.times[next] - t) / h, Yi.data());
          record(opt.times[next++], Yi.data());
        }
        if (w < 1.0)
          dense(w, Ystop.data());
        else
          Ystop = Yn;
        record(t_stop, Ystop.data());
        res.status = "converged", res.stop_time = t_stop;
        res.message = converged_message(res.risk.back(), threshold, stop, t_stop);
        return res;
      }
    }
    for (; next < nt && opt.times[next] <= t_new; ++next) {
      const double w = (opt.times[next] - t) / h;
      if (w >= 1.0) {
        record(opt.times[next], Yn.data());
      } else {
        dense(w, Yi.data());
        record(opt.times[next], Yi.data());
      }
    }
    t = t_new;
    std::swap(Y, Yn);
    velocity(t, Y.data(), dY.data());
    bool release = false;
    for (int i = 0; i < K; ++i) release = release || (flow.link[i].linked() && !flow.valid[i]);
    if (release) {
      flow.release(Y.data());
      velocity(t, Y.data(), dY.data());
    }
    h = step_size::after_accepted(h, e, opt.h_max);
  }
  res.message = concat("integrated to t = ", t_end, " in ", res.n_steps, " steps (", res.n_rhs,
                       " right-hand sides; step units: event location at alignment, Filippov sliding; ",
                       flow.count_on_teachers(), " of ", K, " students on a teacher, ", flow.count_in_clusters(),
                       " in clusters of students at the end)");
  return res;
}

}  // namespace twolayer

// The large-batch map of the overlaps (see large_batch.hpp for the derivation).
#include "twolayer/large_batch.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "twolayer/cancel.hpp"
#include "twolayer/divergence.hpp"
#include "twolayer/gaussian.hpp"
#include "twolayer/gaussian_error_square.hpp"
#include "twolayer/gaussian_mean.hpp"
#include "twolayer/linalg.hpp"
#include "twolayer/parallel.hpp"
#include "twolayer/run_messages.hpp"
#include "twolayer/target.hpp"

namespace twolayer {


std::size_t large_batch_workspace(int n) {
  const std::size_t N = static_cast<std::size_t>(n);
  return 2 * N * N + N * N;  // A, U, X (K x n <= n x n)
}

void large_batch_update(int K, int n, const double* omega, const double* psi, const double* hd, const double* a,
                        double gamma0, double alpha, bool spherical, double* Q_new, double* M_new, double* ws) {
  const int k_t = n - K;
  double *A = ws, *U = ws + static_cast<std::size_t>(n) * n, *X = U + static_cast<std::size_t>(n) * n;
  // psi_i^T Omega^+ psi_k through Omega = U diag(e) U^T: X_ie = (U^T psi_i)_e / sqrt(e), eigenvalues below
  // 1e-12 max(e) dropped (psi_i lies in Omega's range, so they carry nothing but round-off).
  std::copy(omega, omega + static_cast<std::size_t>(n) * n, A);
  jacobi_eigen(A, U, n);
  double emax = 0.0;
  for (int e = 0; e < n; ++e) emax = std::max(emax, A[e * n + e]);
  const double cut = 1e-12 * emax;
  for (int i = 0; i < K; ++i)
    for (int e = 0; e < n; ++e) {
      const double ev = A[e * n + e];
      double s = 0.0;
      for (int c = 0; c < n; ++c) s += U[c * n + e] * psi[i * n + c];
      X[i * n + e] = ev > cut ? s / std::sqrt(ev) : 0.0;
    }
  for (int i = 0; i < K; ++i) {
    for (int k = i; k < K; ++k) {
      double g = 0.0;
      for (int e = 0; e < n; ++e) g += X[i * n + e] * X[k * n + e];
      const double v = omega[i * n + k] + gamma0 * (a[i] * psi[i * n + k] + a[k] * psi[k * n + i]) +
                       gamma0 * gamma0 * a[i] * a[k] * (g + hd[i * K + k] / alpha);
      Q_new[i * K + k] = Q_new[k * K + i] = v;
    }
    for (int r = 0; r < k_t; ++r) M_new[i * k_t + r] = omega[i * n + K + r] + gamma0 * a[i] * psi[i * n + K + r];
  }
  if (spherical) {
    for (int i = 0; i < K; ++i) A[i] = 1.0 / std::sqrt(Q_new[i * K + i]);
    for (int i = 0; i < K; ++i) {
      for (int k = 0; k < K; ++k) Q_new[i * K + k] = i == k ? 1.0 : Q_new[i * K + k] * A[i] * A[k];
      for (int r = 0; r < k_t; ++r) M_new[i * k_t + r] *= A[i];
    }
  }
}

namespace {

// The result of a map stopped by Ctrl-C inside the iteration after its last row (an Interrupted from the kernels'
// parallel loops): "interrupted" with the rows so far, as the ODE's driver keeps them (lane_driver.hpp).
IntegrateResult& interrupted_during(IntegrateResult& res) {
  const long long last = res.t.empty() ? 0 : static_cast<long long>(res.t.back());
  res.status = "interrupted";
  res.message = "interrupted (Ctrl-C) during iteration " + std::to_string(last + 1);
  res.stop_time = static_cast<double>(last);
  return res;
}

// Records iteration t's row (y, its excess risk r) in res; false (status "diverged", nothing recorded) where r is
// not finite (divergence.hpp's rule 4: finite overlaps whose risk overflows, e.g. a_i a_k past the double range).
bool record_row(IntegrateResult& res, long long t, const std::vector<double>& y, double r) {
  if (!std::isfinite(r)) {
    res.status = "diverged";
    res.message = std::string("diverged at iteration ") + std::to_string(t) + ": " + divergence_message(kRiskNotFinite);
    res.stop_time = static_cast<double>(t);
    return false;
  }
  res.t.push_back(static_cast<double>(t));
  res.y.insert(res.y.end(), y.begin(), y.end());
  res.risk.push_back(r);
  return true;
}

// The committee parts of the map with student biases b (students only, v = 0): psi (K x n) -= sum_j a_j
// E[g'(lambda_i) l_c g(lambda_j)], hd (K x K) += sum_jl a_j a_l E[g'(lambda_i) g'(lambda_k) g(lambda_j) g(lambda_l)]
// + Delta E[g'(lambda_i) g'(lambda_k)]; returns the committee part of the risk, 1/2 sum_ik a_i a_k
// E[g(lambda_i) g(lambda_k)]. omega: the n x n covariance of (students, target directions).
double biased_committee(Activation g, int K, int n, const double* om, const double* a, const double* b, double noise,
                        double* psi, double* hd, int n_threads) {
  auto cov = [&](const int* u, int m, double* C) {
    for (int p = 0; p < m; ++p)
      for (int q = 0; q < m; ++q) C[p * m + q] = om[u[p] * n + u[q]];
  };
  auto mean = [&](int u) { return u < K ? b[u] : 0.0; };
  double C[16], mu[4], risk = 0.0;
  for (int i = 0; i < K; ++i)
    for (int c = 0; c < n; ++c)
      for (int j = 0; j < K; ++j) {
        const int u[3] = {i, c, j};
        cov(u, 3, C);
        mu[0] = b[i], mu[1] = 0.0, mu[2] = b[j];  // l_c centred
        psi[i * n + c] -= a[j] * i3_mean(g, g, C, mu);
      }
  // sum_jl a_j a_l I4 = E[g'(lambda_i) g'(lambda_k) (sum_j a_j g(lambda_j))^2]: the smooth students' lattices over
  // the subsets of the student fields (gaussian_error_square.hpp), else (or where they cannot certify) I4 by I4
  std::vector<int> pairs;
  for (int i = 0; i < K; ++i)
    for (int k = i; k < K; ++k) pairs.insert(pairs.end(), {i, k});
  const int np = K * (K + 1) / 2;
  std::vector<double> quad(np), Cs(static_cast<std::size_t>(K) * K);
  for (int i = 0; i < K; ++i)
    for (int k = 0; k < K; ++k) Cs[i * K + k] = om[i * n + k];
  const std::vector<Activation> acts(K, g);
  const bool lattices = smooth::error_square_applies(g, g) &&
                        smooth::error_square_moments(g, K, acts.data(), Cs.data(), b, a, pairs.data(), np, quad.data(),
                                                     resolve_threads(n_threads));
  for (int p = 0; p < np; ++p) {
    const int i = pairs[2 * p], k = pairs[2 * p + 1];
    const int u2[2] = {i, k};
    cov(u2, 2, C);
    mu[0] = b[i], mu[1] = b[k];
    double v = noise != 0.0 ? noise * j2_mean(g, C, mu) : 0.0;
    risk += (i == k ? 0.5 : 1.0) * a[i] * a[k] * i2_mean(g, g, C, mu);
    if (lattices) v += quad[p];
    for (int j = 0; j < K && !lattices; ++j)
      for (int l = j; l < K; ++l) {  // symmetric in (j, l)
        const int u[4] = {i, k, j, l};
        cov(u, 4, C);
        for (int q = 0; q < 4; ++q) mu[q] = mean(u[q]);
        v += (l == j ? 1.0 : 2.0) * a[j] * a[l] * i4_mean(g, g, g, C, mu);
      }
    hd[i * K + k] += v;
    if (k != i) hd[k * K + i] += v;
  }
  return risk;
}

// The map against a polynomial target with student biases (LargeBatchOptions::bias), and for the smooth activations
// without closed-form kernels at any bias (their committee terms through the kernels with means, student units only).
IntegrateResult iterate_biased(const OdeModel& model_in, const double* y0, const LargeBatchOptions& opt,
                               int n_threads, std::vector<double>* bias_rows) {
  OdeModel model = model_in;
  model.regime = Regime::Online;
  model.spherical = false;
  model.lr = 1.0;
  model.lr_readout = 0.0;
  OdeModel plain = model;
  plain.target.reset();
  OdeRhs f(plain);  // Omega and the state checks only (no kernel evaluated)
  const int K = model.K, M = model.M, n = K + M;
  std::vector<double> b = opt.bias.empty() ? std::vector<double>(static_cast<std::size_t>(K), 0.0) : opt.bias, gb(K);
  TargetRhs target(*model.target, model.student, K, true, 1.0, 0.0, b);
  const std::size_t S = model.state_size();
  std::vector<double> y(y0, y0 + S), om(static_cast<std::size_t>(n) * n), hd(static_cast<std::size_t>(K) * K),
      psi(static_cast<std::size_t>(K) * n), ws(large_batch_workspace(n)), scratch;
  IntegrateResult res;
  const double bound = divergence_bound(y0, S, model.P.data(), model.P.size(), model.v.data(), model.v.size());
  const double* a = y.data() + model.offset_a();
  // psi, hd and the risk at the current state
  auto expectations = [&] {
    f.omega(y.data(), om.data());
    std::fill(psi.begin(), psi.end(), 0.0);
    std::fill(hd.begin(), hd.end(), 0.0);
    const double r = biased_committee(model.student, K, n, om.data(), a, b.data(), model.noise, psi.data(),
                                      hd.data(), n_threads);
    target.add_raw(y.data(), psi.data(), hd.data(), n_threads);
    return r + target.risk_part(y.data());
  };
  // A state outside the kernels' domain (a std::domain_error of the expectations: a quadrature that cannot certify,
  // a value beyond the double range) stops the map there, "diverged" with the reason and the rows so far, as the ODE's driver
  // does (lane_driver.hpp); before, the error left the whole run.
  try {
    double r = expectations();
    for (long long t = 0;; ++t) {
      if (!record_row(res, t, y, r)) return res;
      if (bias_rows) bias_rows->insert(bias_rows->end(), b.begin(), b.end());
      if (t == opt.steps) return res;
      if (cancel_requested()) {
        res.status = "interrupted";
        res.message = "interrupted (Ctrl-C) before iteration " + std::to_string(t + 1);
        res.stop_time = static_cast<double>(t);
        return res;
      }
      ++res.n_rhs;
      if (opt.lr_bias != 0.0) {  // gb_i = E[g'(lambda_i) E] = E[g'(lambda_i) f] - sum_j a_j E[g'(lambda_i) g(lambda_j)]
        std::fill(gb.begin(), gb.end(), 0.0);
        target.add_bias_raw(y.data(), gb.data());
        for (int i = 0; i < K; ++i)
          for (int j = 0; j < K; ++j)
            gb[i] -= a[j] * pair_moment(model.student, 1, model.student, 0, b[i], b[j], om[i * n + i], om[i * n + j],
                                        om[j * n + j]);
      }
      large_batch_update(K, n, om.data(), psi.data(), hd.data(), a, opt.gamma0, opt.alpha, opt.spherical, y.data(),
                         y.data() + model.offset_M(), ws.data());
      if (opt.lr_bias != 0.0) {
        for (int i = 0; i < K; ++i) b[i] += opt.lr_bias * a[i] * gb[i];
        target.set_bias(b);
      }
      ++res.n_steps;
      if (const char* why = state_error(f, y.data(), bound, scratch)) {
        res.status = "diverged";
        res.message = std::string("diverged at iteration ") + std::to_string(t + 1) + ": " + why;
        res.stop_time = static_cast<double>(t + 1);
        return res;
      }
      r = expectations();
    }
  } catch (const std::domain_error& e) {
    const long long t = res.n_steps;  // the iteration whose state's expectations were refused
    res.status = "diverged";
    res.message = std::string("diverged at iteration ") + std::to_string(t) + ": " + singular_message(e.what());
    res.stop_time = static_cast<double>(t);
    return res;
  } catch (const Interrupted&) {  // Ctrl-C inside an iteration's expectations: the rows so far are kept
    return interrupted_during(res);
  }
}

}  // namespace

IntegrateResult iterate_large_batch(const OdeModel& model_in, const double* y0, const LargeBatchOptions& opt,
                                    int n_threads, std::vector<double>* bias_rows) {
  if (opt.lr_bias != 0.0 && opt.bias.empty())
    throw std::invalid_argument("lr_bias: trained biases need the biases' start (LargeBatchOptions::bias)");
  if (!opt.bias.empty() && static_cast<int>(opt.bias.size()) != model_in.K)
    throw std::invalid_argument("bias: expected one bias per student unit");
  if (!opt.teacher_bias.empty() && (model_in.target || opt.bias.empty() ||
                                    static_cast<int>(opt.teacher_bias.size()) != model_in.M))
    throw std::invalid_argument("teacher_bias: expected one bias per teacher unit of a committee, with the students'");
  if (model_in.target && (!opt.bias.empty() || !is_classic(model_in.student)))
    return iterate_biased(model_in, y0, opt, n_threads, opt.bias.empty() ? nullptr : bias_rows);
  OdeModel model = model_in;
  model.regime = Regime::Online;  // the second-moment table of the online right-hand side
  model.spherical = false;        // the projection is the map's own (exact rescaling, not its derivative)
  model.lr = 1.0;
  model.lr_readout = 0.0;
  const std::size_t S0 = model.state_size();
  // A committee teacher with biases: the right-hand side with means (dynamics.hpp "Biases") on the state
  // [Q, M, a, b]; at lr_bias = 1 its db is the bias pull a_i E[g'(lambda_i) E]
  if (!opt.bias.empty()) {
    model.biased = true;
    model.teacher_bias = opt.teacher_bias.empty() ? std::vector<double>(static_cast<std::size_t>(model.M), 0.0)
                                                  : opt.teacher_bias;
    model.lr_bias = 1.0;
  }
  OdeRhs f(model);  // risk, Omega, the state checks (with the target's risk part)
  // With a polynomial target, the committee part (the student's own units, v = 0) gives psi and the second moment
  // of -fhat; the target's raw parts (TargetRhs::add_raw) complete them to E = f - fhat.
  OdeModel committee = model;
  committee.target.reset();
  OdeRhs fc(committee);
  std::unique_ptr<TargetRhs> target;
  if (model.target) target = std::make_unique<TargetRhs>(*model.target, model.student, model.K, true, 1.0, 0.0);
  const int K = model.K, M = model.M, n = K + M;
  const std::size_t S = model.state_size();
  std::vector<double> y(y0, y0 + S0), dy(S), om(static_cast<std::size_t>(n) * n), hd(static_cast<std::size_t>(K) * K),
      ws(large_batch_workspace(n)), scratch, psi_t;
  y.insert(y.end(), opt.bias.begin(), opt.bias.end());
  IntegrateResult res;
  const double bound = divergence_bound(y.data(), S, model.P.data(), model.P.size(), model.v.data(), model.v.size());
  auto record = [&](long long t) { return record_row(res, t, y, f.risk(y.data())); };
  if (!record(0)) return res;
  try {
    for (long long t = 1; t <= opt.steps; ++t) {
      if (cancel_requested()) {
        res.status = "interrupted";
        res.message = "interrupted (Ctrl-C) before iteration " + std::to_string(t);
        res.stop_time = static_cast<double>(t - 1);
        return res;
      }
      fc(y.data(), dy.data(), n_threads);
      ++res.n_rhs;
      f.omega(y.data(), om.data());
      for (int p = 0, i = 0; i < K; ++i)
        for (int k = i; k < K; ++k, ++p) hd[i * K + k] = hd[k * K + i] = fc.second_moment(p);
      const double* psi = fc.psi();
      if (target) {
        psi_t.assign(fc.psi(), fc.psi() + static_cast<std::size_t>(K) * n);
        target->add_raw(y.data(), psi_t.data(), hd.data(), n_threads);
        psi = psi_t.data();
      }
      large_batch_update(K, n, om.data(), psi, hd.data(), y.data() + model.offset_a(), opt.gamma0, opt.alpha,
                         opt.spherical, y.data(), y.data() + model.offset_M(), ws.data());
      if (model.biased)  // simultaneous with the weights': the pull of the state before the step
        for (int i = 0; i < K; ++i) y[model.offset_b() + i] += opt.lr_bias * dy[model.offset_b() + i];
      ++res.n_steps;
      if (const char* why = state_error(f, y.data(), bound, scratch)) {
        res.status = "diverged";
        res.message = std::string("diverged at iteration ") + std::to_string(t) + ": " + why;
        res.stop_time = static_cast<double>(t);
        return res;
      }
      if (!record(t)) return res;
    }
  } catch (const Interrupted&) {  // Ctrl-C inside an iteration's right-hand side: the rows so far are kept
    return interrupted_during(res);
  }
  return res;
}

}  // namespace twolayer

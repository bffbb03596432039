// Batched L-BFGS on the population risk (two-loop recursion, backtracking Armijo line search).
#include "twolayer/landscape.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "twolayer/parallel.hpp"

namespace twolayer {

namespace {

struct Objective {
  Population p;  // student.W / student.a point into x
  int K, d;
  bool train_a, train_b, biased;
  const double* teacher_bias;
  std::size_t n;
  std::vector<double> dW, da, db;

  Objective(const Population& p0, bool train_readout, bool train_bias, bool with_bias, const double* bt)
      : p(p0), K(p0.student.units), d(p0.d), train_a(train_readout), train_b(train_bias), biased(with_bias),
        teacher_bias(bt),
        n(static_cast<std::size_t>(K) * d + (train_readout ? K : 0) + (train_bias ? K : 0)),
        dW(static_cast<std::size_t>(K) * d), da(K), db(K) {}

  // x = [vec(W), a, b] (a, b where trained); returns the risk, writes the gradient (throws std::domain_error where
  // it is singular).
  double eval(const double* x, const double* a_fixed, const double* b_fixed, double* g) {
    const std::size_t nW = static_cast<std::size_t>(K) * d;
    p.student.W = x;
    p.student.a = train_a ? x + nW : a_fixed;
    double r;
    if (biased) {
      const Biases b{train_b ? x + nW + (train_a ? K : 0) : b_fixed, teacher_bias};
      r = population_risk_mean(p, b, 1);
      population_gradient_mean(p, b, dW.data(), da.data(), db.data(), 1);
    } else {
      r = population_risk_gradient(p, dW.data(), da.data(), 1);
    }
    std::copy(dW.begin(), dW.end(), g);
    if (train_a) std::copy(da.begin(), da.end(), g + nW);
    if (train_b) std::copy(db.begin(), db.end(), g + nW + (train_a ? K : 0));
    return r;
  }
};

inline double dot(const std::vector<double>& u, const std::vector<double>& v) {
  double s = 0.0;
  for (std::size_t i = 0; i < u.size(); ++i) s += u[i] * v[i];
  return s;
}

int lbfgs_one(Objective& f, double* W, double* a, double* b, const LbfgsOptions& opt, double& loss, double& gnorm,
              int& iters) {
  const std::size_t n = f.n, nW = static_cast<std::size_t>(f.K) * f.d, nb = nW + (f.train_a ? f.K : 0);
  std::vector<double> x(n), g(n), xn(n), gn(n), dir(n), alpha(opt.memory);
  std::copy(W, W + nW, x.begin());
  if (f.train_a) std::copy(a, a + f.K, x.begin() + nW);
  if (f.train_b) std::copy(b, b + f.K, x.begin() + nb);
  std::vector<std::vector<double>> S, Y;
  std::vector<double> rho;
  auto finish = [&](int status) {
    std::copy(x.begin(), x.begin() + nW, W);
    if (f.train_a) std::copy(x.begin() + nW, x.begin() + nb, a);
    if (f.train_b) std::copy(x.begin() + nb, x.end(), b);
    return status;
  };
  double fx = f.eval(x.data(), a, b, g.data());
  gnorm = std::sqrt(dot(g, g));
  loss = fx;
  iters = 0;
  if (!std::isfinite(fx) || !std::isfinite(gnorm)) return finish(kDiverged);
  int flat = 0;  // consecutive iterations whose decrease is below the risk's resolution
  for (int it = 0; it < opt.max_iter; ++it) {
    if (gnorm <= opt.gtol) return finish(kConverged);
    if (cancel_requested()) return finish(kInterrupted);
    // two-loop recursion: dir = -H g
    dir = g;
    const int m = static_cast<int>(S.size());
    for (int j = m - 1; j >= 0; --j) {
      alpha[j] = rho[j] * dot(S[j], dir);
      for (std::size_t c = 0; c < n; ++c) dir[c] -= alpha[j] * Y[j][c];
    }
    const double gamma = m > 0 ? dot(S[m - 1], Y[m - 1]) / dot(Y[m - 1], Y[m - 1]) : 1.0 / std::max(gnorm, 1.0);
    for (double& v : dir) v *= gamma;
    for (int j = 0; j < m; ++j) {
      const double beta = rho[j] * dot(Y[j], dir);
      for (std::size_t c = 0; c < n; ++c) dir[c] += S[j][c] * (alpha[j] - beta);
    }
    for (double& v : dir) v = -v;
    double slope = dot(g, dir);
    if (!(slope < 0.0)) {  // not a descent direction: restart from steepest descent
      S.clear();
      Y.clear();
      rho.clear();
      for (std::size_t c = 0; c < n; ++c) dir[c] = -g[c] / std::max(gnorm, 1.0);
      slope = dot(g, dir);
    }
    // backtracking Armijo line search
    double step = 1.0, fn = 0.0;
    bool accepted = false;
    for (int ls = 0; ls < 40; ++ls) {
      if (cancel_requested()) return finish(kInterrupted);  // up to 40 evaluations: long at large k and d
      for (std::size_t c = 0; c < n; ++c) xn[c] = x[c] + step * dir[c];
      bool ok = true;
      try {
        fn = f.eval(xn.data(), a, b, gn.data());
      } catch (const std::domain_error&) {
        ok = false;
      }
      if (ok && std::isfinite(fn) && fn <= fx + 1e-4 * step * slope) {
        accepted = true;
        break;
      }
      // Near convergence the risk stops resolving decreases: accept a step that shrinks the gradient.
      if (ok && std::isfinite(fn) && std::fabs(fn - fx) <= 1e-15 * std::max(1.0, std::fabs(fx))) {
        const double gg = std::sqrt(dot(gn, gn));
        if (gg < gnorm) {
          accepted = true;
          break;
        }
      }
      step *= 0.5;
    }
    iters = it + 1;
    if (!accepted) return finish(kLineSearchFailed);
    std::vector<double> s(n), y(n);
    for (std::size_t c = 0; c < n; ++c) {
      s[c] = xn[c] - x[c];
      y[c] = gn[c] - g[c];
    }
    const double sy = dot(s, y);
    if (sy > 1e-300) {
      if (static_cast<int>(S.size()) == opt.memory) {
        S.erase(S.begin());
        Y.erase(Y.begin());
        rho.erase(rho.begin());
      }
      S.push_back(std::move(s));
      Y.push_back(std::move(y));
      rho.push_back(1.0 / sy);
    }
    flat = (fx - fn <= 1e-15 * std::max(1.0, std::fabs(fx))) ? flat + 1 : 0;
    x.swap(xn);
    g.swap(gn);
    fx = fn;
    if (flat >= 5) {  // the risk no longer resolves progress: hand over to Newton refinement
      gnorm = std::sqrt(dot(g, g));
      loss = fx;
      return finish(gnorm <= opt.gtol ? kConverged : kLineSearchFailed);
    }
    gnorm = std::sqrt(dot(g, g));
    loss = fx;
    if (!std::isfinite(gnorm)) return finish(kDiverged);
  }
  return finish(gnorm <= opt.gtol ? kConverged : kMaxIter);
}

}  // namespace

void multistart_lbfgs(const Population& p, int runs, double* W, double* a, const LbfgsOptions& opt, double* loss,
                      double* grad_norm, int* iterations, int* status, int n_threads,
                      std::atomic<long long>* finished, double* b, const double* teacher_bias) {
  if (runs < 0) throw std::invalid_argument("runs: must be non-negative");
  if (opt.memory < 1) throw std::invalid_argument("memory: must be positive");
  if (opt.train_bias && b == nullptr) throw std::invalid_argument("b: train_bias needs the students' biases");
  const std::size_t nW = static_cast<std::size_t>(p.student.units) * p.d;
  for (int r = 0; r < runs; ++r) {  // what a run never started reports
    status[r] = kInterrupted;
    loss[r] = grad_norm[r] = std::nan("");
    iterations[r] = 0;
  }
  try {
    parallel_for(
        static_cast<std::size_t>(runs), n_threads,
        [&](std::size_t r) {
          Objective f(p, opt.train_readout, opt.train_bias, b != nullptr, teacher_bias);
          double* Wr = W + r * nW;
          double* ar = a + r * static_cast<std::size_t>(p.student.units);
          double* br = b == nullptr ? nullptr : b + r * static_cast<std::size_t>(p.student.units);
          try {
            status[r] = lbfgs_one(f, Wr, ar, br, opt, loss[r], grad_norm[r], iterations[r]);
          } catch (const std::domain_error&) {
            status[r] = kDiverged;
            loss[r] = grad_norm[r] = std::nan("");
            iterations[r] = 0;
          } catch (const Interrupted&) {  // inside an evaluation: the run keeps its last accepted iterate
            status[r] = kInterrupted;
          }
          if (finished) finished->fetch_add(1, std::memory_order_relaxed);
        },
        1);
  } catch (const Interrupted&) {  // runs not started are marked as such above
  }
}

}  // namespace twolayer

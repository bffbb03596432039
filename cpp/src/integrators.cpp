// Euler, RK4 and Dormand-Prince 5(4) for the order-parameter ODE, with divergence detection and a batched driver.
#include "twolayer/integrators.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <initializer_list>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "twolayer/batch_integrators.hpp"
#include "twolayer/cancel.hpp"
#include "twolayer/divergence.hpp"
#include "twolayer/dormand_prince.hpp"
#include "twolayer/first_passage.hpp"
#include "twolayer/format.hpp"
#include "twolayer/run_messages.hpp"
#include "twolayer/step_size.hpp"
#include "twolayer/gaussian.hpp"
#include "twolayer/parallel.hpp"
#include "twolayer/step_flow.hpp"

namespace twolayer {

const char* state_error(const OdeRhs& f, const double* y, double bound, std::vector<double>& s) {
  const OdeModel& m = f.model();
  s.resize(static_cast<std::size_t>(m.K + m.M) * (m.K + m.M));
  return divergence_message(divergence_code(y, m.K, m.M, m.P.data(), bound, s.data()));
}

namespace {

using namespace dopri;  // the Dormand-Prince 5(4) tableau (dormand_prince.hpp)

struct Runner {
  OdeRhs f;
  const IntegrateOptions& opt;
  const StopRule& rule;
  int threads;
  std::size_t n;
  IntegrateResult res;
  std::vector<double> scratch;
  double t_now = 0.0;       // start of the step in progress (for error messages)
  double threshold = 0.0;   // the early-stop threshold on the excess risk (rule.active() only)
  double risk_now = 0.0;    // excess risk of the last accepted state (rule.active() only)
  double bound = 0.0;       // the divergence bound of this run (divergence.hpp)

  Runner(const OdeModel& m, const IntegrateOptions& o, const StopRule& s, int th)
      : f(m), opt(o), rule(s), threads(th), n(m.state_size()) {}

  // Learning-rate schedule (scheduled runs only). A piecewise-constant schedule is evaluated once per step, at its
  // midpoint (steps end at its jumps, so the rate is exact over the whole step); a continuous one at every stage.
  const bool scheduled = !opt.schedule.identity();
  const bool piecewise = opt.schedule.piecewise_constant();
  double step_rate = 1.0;  // piecewise: the rate of the step in progress
  // dy = f(t, y): the schedule's multiplier at time t (a scheduled run), then the model's right-hand side.
  void rhs(double t, const double* y, double* dy) {
    if (scheduled) f.set_rate(piecewise ? step_rate : opt.schedule(t));
    f(y, dy, threads);
    ++res.n_rhs;
  }
  // Piecewise schedules: the rate of the step [t, t + h]; true when it differs from the one k1 was computed with.
  bool begin_step(double t, double h) {
    if (!scheduled || !piecewise) return false;
    const double r = opt.schedule(t + 0.5 * h);
    const bool changed = r != step_rate;
    step_rate = r;
    return changed;
  }
  // Thrown by record() after diverge(): the run ends there (caught in run()).
  struct RiskOverflow {};

  void record(double t, const double* y) {
    const double r = f.risk(y);
    if (!std::isfinite(r)) {  // finite overlaps whose risk overflows (e.g. quadratic units near the bound)
      diverge(t, divergence_message(kRiskNotFinite));
      throw RiskOverflow{};
    }
    res.t.push_back(t);
    res.y.insert(res.y.end(), y, y + n);
    res.risk.push_back(r);
  }
  void stop(double t, const char* status, const std::string& message) {
    res.status = status;
    res.stop_time = t;
    res.message = message;
  }
  void diverge(double t, const std::string& why) {
    stop(t, "diverged", diverged_message(t, why));
  }
  // Checked before every step, accepted or not: false (and the status set) if the run must stop here.
  bool may_continue(double t) {
    if (cancel_requested()) {
      stop(t, "interrupted", interrupted_message(t, res.n_steps));
      return false;
    }
    if (res.n_steps >= opt.max_steps) {
      stop(t, "max_steps", max_steps_message(opt.max_steps, t));
      return false;
    }
    return true;
  }
  // After an accepted step: false (and the status set) if the run must stop.
  bool accept(double t, const double* y, bool check_state = true) {
    ++res.n_steps;
    t_now = t;
    if (check_state) {
      if (const char* why = state_error(f, y, bound, scratch)) {
        diverge(t, why);
        return false;
      }
    }
    return true;
  }
  // Whether the accepted state y (risk stored in risk_now) has reached the early-stop threshold.
  bool crossed(const double* y) {
    if (!rule.active()) return false;
    const double r = f.risk(y);
    const bool hit = r <= threshold;
    if (!hit) risk_now = r;
    return hit;
  }
  // Records the crossing state y_stop at t_stop and stops with "converged".
  void converge(double t_stop, const double* y_stop) {
    record(t_stop, y_stop);
    stop(t_stop, "converged", converged_message(res.risk.back(), threshold, rule, t_stop));
  }
  // First passage inside an accepted step of length h from t (first_passage.hpp); at(theta, out) writes the
  // interpolated state.
  template <class At>
  double first_passage(At&& at, double t, double h, double r0, double r1, std::vector<double>& out) {
    return locate_first_passage(at, [&](const double* x) { return f.risk(x); }, threshold, t, h, r0, r1, out.data());
  }

  void run_fixed(std::vector<double>& y) {
    std::vector<double> k1(n), k2(n), k3(n), k4(n), tmp(n), y_old, y_stop;
    if (rule.active()) y_old.resize(n), y_stop.resize(n);
    const bool rk4 = opt.method == Method::Rk4;
    const double dt = opt.dt;
    double t = 0.0;
    for (double target : opt.times) {
      while (t < target) {
        if (!may_continue(t)) return;
        bool land;
        const double h = step_size::towards(t, target, dt, land);
        if (rule.active()) std::copy(y.begin(), y.end(), y_old.begin());
        const double r_old = risk_now;
        begin_step(t, h);
        rhs(t, y.data(), k1.data());
        if (!rk4) {
          for (std::size_t i = 0; i < n; ++i) y[i] += h * k1[i];
        } else {
          for (std::size_t i = 0; i < n; ++i) tmp[i] = y[i] + 0.5 * h * k1[i];
          rhs(t + 0.5 * h, tmp.data(), k2.data());
          for (std::size_t i = 0; i < n; ++i) tmp[i] = y[i] + 0.5 * h * k2[i];
          rhs(t + 0.5 * h, tmp.data(), k3.data());
          for (std::size_t i = 0; i < n; ++i) tmp[i] = y[i] + h * k3[i];
          rhs(t + h, tmp.data(), k4.data());
          for (std::size_t i = 0; i < n; ++i) y[i] += h / 6.0 * (k1[i] + 2.0 * (k2[i] + k3[i]) + k4[i]);
        }
        const double t_new = land ? target : t + h;
        if (!accept(t_new, y.data())) return;
        if (crossed(y.data())) {  // linear interpolation between the last two states (the chord)
          const double r_new = f.risk(y.data());
          auto chord = [&](double th, double* out) {
            for (std::size_t i = 0; i < n; ++i) out[i] = y_old[i] + th * (y[i] - y_old[i]);
          };
          const double th = first_passage(chord, t, t_new - t, r_old, r_new, y_stop);
          if (th < 1.0) {
            chord(th, y_stop.data());
            converge(t + th * (t_new - t), y_stop.data());
          } else {
            converge(t_new, y.data());
          }
          return;
        }
        t = t_new;
      }
      record(target, y.data());
    }
  }

  double norm(const std::vector<double>& x, const std::vector<double>& ya, const std::vector<double>& yb) const {
    double s = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      const double sc = opt.atol + opt.rtol * std::max(std::fabs(ya[i]), std::fabs(yb[i]));
      const double e = x[i] / sc;
      s += e * e;
    }
    return std::sqrt(s / static_cast<double>(n));
  }

  // Dormand-Prince 5(4) with FSAL; outputs come from its 4th-order continuous extension (Hairer's dopri5), so the
  // output times do not constrain the steps; only the final time is landed on exactly. The early stop's crossing
  // is located on the same continuous extension.
  void run_adaptive(std::vector<double>& y) {
    std::vector<double> k1(n), k2(n), k3(n), k4(n), k5(n), k6(n), k7(n), tmp(n), ynew(n), err(n), y_stop(n);
    std::vector<double> r2(n), r3(n), r4(n), r5(n);
    double t = 0.0;
    std::size_t next = 0;
    const std::size_t nout = opt.times.size();
    while (next < nout && opt.times[next] <= 0.0) record(opt.times[next++], y.data());
    if (next == nout) return;
    const double t_end = opt.times.back();
    if (scheduled && piecewise) step_rate = opt.schedule(0.0);
    rhs(0.0, y.data(), k1.data());
    // Initial step (Hairer, Norsett & Wanner, II.4).
    double h = opt.h0;
    if (!(h > 0.0)) {
      const double d0 = norm(y, y, y), d1 = norm(k1, y, y);
      const double hh = step_size::initial_guess(d0, d1);
      for (std::size_t i = 0; i < n; ++i) tmp[i] = y[i] + hh * k1[i];
      rhs(hh, tmp.data(), k2.data());
      for (std::size_t i = 0; i < n; ++i) err[i] = (k2[i] - k1[i]) / hh;
      h = step_size::initial(hh, d1, norm(err, y, y));
    }
    if (opt.h_max > 0.0) h = std::min(h, opt.h_max);
    while (t < t_end) {
      if (!may_continue(t)) return;
      if (step_size::underflows(h, t)) {
        diverge(t, kStepUnderflow);
        return;
      }
      bool last = step_size::reaches_end(t, h, t_end);
      double hs = last ? t_end - t : h;
      if (scheduled) {  // a jump of the schedule ends the step; the step after it recomputes k1 at the new rate
        const double jump = opt.schedule.next_jump(t);
        if (jump < t + hs) {
          hs = jump - t;
          last = false;
        }
        if (begin_step(t, hs)) rhs(t, y.data(), k1.data());
      }
      auto stage = [&](std::vector<double>& out, double c,
                       std::initializer_list<std::pair<const std::vector<double>*, double>> ks) {
        for (std::size_t i = 0; i < n; ++i) {
          double s = 0.0;
          for (const auto& kc : ks) s += kc.second * (*kc.first)[i];
          tmp[i] = y[i] + hs * s;
        }
        rhs(t + c * hs, tmp.data(), out.data());
      };
      bool ok = true;
      try {
        stage(k2, c2, {{&k1, a21}});
        stage(k3, c3, {{&k1, a31}, {&k2, a32}});
        stage(k4, c4, {{&k1, a41}, {&k2, a42}, {&k3, a43}});
        stage(k5, c5, {{&k1, a51}, {&k2, a52}, {&k3, a53}, {&k4, a54}});
        stage(k6, 1.0, {{&k1, a61}, {&k2, a62}, {&k3, a63}, {&k4, a64}, {&k5, a65}});
        for (std::size_t i = 0; i < n; ++i)
          ynew[i] = y[i] + hs * (b1 * k1[i] + b3 * k3[i] + b4 * k4[i] + b5 * k5[i] + b6 * k6[i]);
        rhs(t + hs, ynew.data(), k7.data());
      } catch (const std::domain_error&) {
        ok = false;  // a stage left the kernels' domain: retry with a smaller step
      }
      double e = std::numeric_limits<double>::infinity();
      if (ok) {
        for (std::size_t i = 0; i < n; ++i)
          err[i] = hs * (e1 * k1[i] + e3 * k3[i] + e4 * k4[i] + e5 * k5[i] + e6 * k6[i] + e7 * k7[i]);
        e = norm(err, y, ynew);
        if (!std::isfinite(e)) e = std::numeric_limits<double>::infinity();
      }
      if (e <= 1.0) {
        const double t_new = last ? t_end : t + hs;
        if (const char* why = state_error(f, ynew.data(), bound, scratch)) {
          diverge(t_new, why);
          return;
        }
        const double r_old = risk_now;
        const bool cross = crossed(ynew.data());
        // Dense output for the output times in (t, t_new) and for the crossing.
        auto dense = [&](double th, double* out) {
          dense_value(y.data(), r2.data(), r3.data(), r4.data(), r5.data(), th, n, out);
        };
        if (cross || (next < nout && opt.times[next] < t_new))
          dense_coefficients(y.data(), ynew.data(), k1.data(), k3.data(), k4.data(), k5.data(), k6.data(), k7.data(),
                             hs, n, r2.data(), r3.data(), r4.data(), r5.data());
        double t_stop = t_new, th_stop = 1.0;
        if (cross) {
          th_stop = first_passage(dense, t, hs, r_old, f.risk(ynew.data()), y_stop);
          if (th_stop < 1.0) t_stop = t + th_stop * hs;
        }
        while (next < nout && opt.times[next] < t_stop) {
          dense((opt.times[next] - t) / hs, tmp.data());
          record(opt.times[next++], tmp.data());
        }
        if (cross) {
          ++res.n_steps;
          if (th_stop < 1.0) {
            dense(th_stop, y_stop.data());
            converge(t_stop, y_stop.data());
          } else {
            converge(t_new, ynew.data());
          }
          return;
        }
        t = t_new;
        y.swap(ynew);
        k1.swap(k7);  // FSAL
        if (!accept(t, y.data(), false)) return;
        while (next < nout && opt.times[next] <= t) record(opt.times[next++], y.data());
        h = hs * step_size::accepted_factor(e);
        if (opt.h_max > 0.0) h = std::min(h, opt.h_max);
      } else {
        ++res.n_rejected;
        h = hs * step_size::rejected_factor(e);
      }
    }
  }

  void run(const double* y0) {
    std::vector<double> y(y0, y0 + n);
    const OdeModel& m = f.model();
    bound = divergence_bound(y0, n, m.P.data(), m.P.size(), m.v.data(), m.v.size());
    if (const char* why = state_error(f, y.data(), bound, scratch)) {
      diverge(0.0, why);
      return;
    }
    try {
      if (rule.active()) {
        risk_now = f.risk(y.data());
        threshold = std::max(rule.risk_tol, rule.risk_rtol * risk_now);
        if (risk_now <= threshold) {  // already there: the first passage is at t = 0
          converge(0.0, y.data());
          return;
        }
      }
      if (opt.method == Method::Adaptive)
        run_adaptive(y);
      else
        run_fixed(y);
    } catch (const std::domain_error& e) {
      diverge(t_now, std::string("a kernel became singular (") + e.what() + ")");
    } catch (const RiskOverflow&) {  // status and message set by record()
    }
    if (res.status == "completed") {
      res.message = completed_message(opt.times.empty() ? 0.0 : opt.times.back(), res.n_steps, res.n_rhs);
    }
  }
};

void check_stop(const StopRule& s) {
  if (!(s.risk_tol >= 0.0 && std::isfinite(s.risk_tol)))
    throw std::invalid_argument("risk_tol: expected a finite number >= 0 (0: no absolute threshold)");
  if (!(s.risk_rtol >= 0.0 && std::isfinite(s.risk_rtol)))
    throw std::invalid_argument("risk_rtol: expected a finite number >= 0 (0: no relative threshold)");
}

void check_options(const IntegrateOptions& o) {
  if (o.method != Method::Adaptive && !(o.dt > 0.0 && std::isfinite(o.dt)))
    throw std::invalid_argument("dt: expected a finite number > 0");
  if (o.method != Method::Adaptive && !o.times.empty() && o.times.back() + o.dt == o.times.back()) {
    throw std::invalid_argument(concat("dt: a step of ", o.dt, " cannot advance the time up to t = ", o.times.back(),
                                       " in double precision"));
  }
  if (o.max_steps < 1) throw std::invalid_argument("max_steps: expected a positive number of steps");
  if (o.method == Method::Adaptive && !(o.rtol >= 0.0 && o.atol >= 0.0 && o.rtol + o.atol > 0.0))
    throw std::invalid_argument("rtol, atol: expected numbers >= 0, not both 0");
  for (std::size_t i = 0; i < o.times.size(); ++i)
    if (!std::isfinite(o.times[i]) || o.times[i] < 0.0 || (i > 0 && o.times[i] < o.times[i - 1]))
      throw std::invalid_argument("times: expected finite, non-negative, non-decreasing output times");
  check_stop(o.stop);
}

}  // namespace

IntegrateResult integrate(const OdeModel& model, const double* y0, const IntegrateOptions& opt, const StopRule& stop,
                          int n_threads) {
  check_options(opt);
  check_stop(stop);
  if (is_step_flow(model)) return step_flow_integrate(model, y0, opt, stop);  // discontinuous at alignment
  if (lanes_supported(model, opt)) return integrate_lanes(model, y0, opt, stop);  // batch_integrators.cpp
  Runner r(model, opt, stop, n_threads);
  r.run(y0);
  return std::move(r.res);
}

IntegrateResult integrate(const OdeModel& model, const double* y0, const IntegrateOptions& opt, int n_threads) {
  return integrate(model, y0, opt, opt.stop, n_threads);
}

std::vector<IntegrateResult> integrate_batch(const std::vector<OdeModel>& models,
                                             const std::vector<const double*>& y0s, const IntegrateOptions& opt,
                                             int n_threads, const std::vector<StopRule>& stops,
                                             std::atomic<std::int64_t>* finished, RowSink* sink) {
  check_options(opt);
  if (models.size() != y0s.size()) throw std::invalid_argument("y0s: one initial state per model");
  if (!stops.empty() && stops.size() != models.size())
    throw std::invalid_argument("risk_tol, risk_rtol: one stop rule per batch member expected");
  for (const auto& m : models) validate_model(m);
  for (const auto& s : stops) check_stop(s);
  // Supported members in SIMD lane blocks, the others one by one (batch_integrators.cpp).
  return integrate_batch_lanes(models, y0s, opt, stops.empty() ? std::vector<StopRule>(models.size(), opt.stop) : stops,
                               n_threads, finished, sink);
}

}  // namespace twolayer

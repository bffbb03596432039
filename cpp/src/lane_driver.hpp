// The one integrator driver of the order-parameter ODE (private to cpp/src): explicit Euler, classical RK4 and
// Dormand-Prince 5(4) over L systems held in lanes (structure of arrays: entry e of lane l at y[e * L + l]). Each
// lane keeps its own time, step size, output cursor, stop rule and status; the right-hand side and the element-wise
// stage arithmetic run over all lanes at once, the control (acceptance, records, first passage, divergence,
// messages) lane by lane. Finished lanes keep being evaluated (their results are no longer read), so that the lanes
// stay in lockstep without masks. A single system is one lane: integrators.cpp drives OdeRhs (any model) with L = 1,
// batch_integrators.cpp the SIMD committee lanes with L = 1 (one system) or 8 (a batch block). Included only by
// files compiled with -ffp-contract=off (CMakeLists.txt): a lane does the same IEEE operations whatever L is.
//
// A System of L lanes gives the driver:
//   static constexpr int kLanes;                    L
//   std::size_t state_size() const;                 n (the state of one lane)
//   void load(int l, const OdeModel& m);            lane l integrates model m (padding lanes repeat lane 0's)
//   void set_rate(int l, double s);                 the learning-rate schedule's multiplier of lane l's next rhs
//   void rhs(const double* y, double* dy);          dy = f(y) over all lanes (may throw std::domain_error)
//   double risk(int l, const double* x);            the excess risk of lane l at its contiguous state x
//   void risk_all(const double* y, double* r);      the excess risks of all lanes (NaN: recomputed by risk())
//   void check(const double* y, const double* bound, int* code);  the divergence codes (divergence.hpp) of all
//                                                   lanes, lane l against its bound[l]
#pragma once
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "twolayer/batch_dynamics.hpp"  // TWOLAYER_LANES
#include "twolayer/cancel.hpp"
#include "twolayer/divergence.hpp"
#include "twolayer/dormand_prince.hpp"
#include "twolayer/first_passage.hpp"
#include "twolayer/integrators.hpp"
#include "twolayer/run_messages.hpp"
#include "twolayer/step_size.hpp"

namespace twolayer {

template <class System>
class LaneDriver {
  static constexpr int L = System::kLanes;

 public:
  LaneDriver(System& sys, const IntegrateOptions& opt) : sys_(sys), opt_(opt), n_(sys.state_size()) {
    for (auto* v : {&y_, &k1_, &k2_, &k3_, &k4_, &k5_, &k6_, &k7_, &tmp_, &ynew_, &err_, &yold_}) v->resize(n_ * L);
    for (auto* v : {&a_, &b_, &c_, &r2_, &r3_, &r4_, &r5_}) v->resize(n_);
  }

  // Runs count <= L members: lane l integrates models[l] from y0s[l] with stops[l] into out[l]; its rows go into
  // out[l] or, with a sink, to the sink as those of member members[l] (in one pass when all lanes have ended).
  void run(const OdeModel* const* models, const double* const* y0s, const StopRule* const* stops, int count,
           IntegrateResult* const* out, RowSink* sink = nullptr, const std::size_t* members = nullptr) {
    count_ = count;
    sink_ = sink;
    for (int l = 0; l < L; ++l) {
      const int s = l < count ? l : 0;  // padding lanes repeat lane 0 and are never live
      const OdeModel& m = *models[s];
      lane_[l] = Lane{stops[s], l < count ? out[l] : nullptr, l < count, sink ? members[s] : 0};
      sys_.load(l, m);
      for (std::size_t e = 0; e < n_; ++e) y_[e * L + l] = y0s[s][e];
      bound_[l] = divergence_bound(y0s[s], n_, m.P.data(), m.P.size(), m.v.data(), m.v.size());
      if (sink && l < count) {  // the staged rows, allocated once
        staged_[l].clear();
        staged_[l].reserve((opt_.times.size() + 1) * (n_ + 2));
      }
    }
    try {
      start();
      if (any_live()) {
        if (opt_.method == Method::Adaptive)
          run_adaptive();
        else
          run_fixed();
      }
    } catch (const std::domain_error& e) {  // a right-hand side outside a step attempt left the kernels' domain
      for (int l = 0; l < count_; ++l)
        if (lane_[l].live) diverge(l, lane_[l].t_now, singular_message(e.what()));
    } catch (const Interrupted&) {  // Ctrl-C inside a long right-hand side: the step is dropped, the rows kept
      for (int l = 0; l < count_; ++l)
        if (lane_[l].live)
          stop(l, lane_[l].t_now, "interrupted", interrupted_message(lane_[l].t_now, lane_[l].res->n_steps));
    }
    flush();
    for (int l = 0; l < count; ++l) {
      IntegrateResult& res = *lane_[l].res;
      if (res.status == "completed")
        res.message = completed_message(opt_.times.empty() ? 0.0 : opt_.times.back(), res.n_steps, res.n_rhs);
    }
  }

 private:
  struct Lane {
    const StopRule* rule;
    IntegrateResult* res;
    bool live;
    std::size_t member;  // the sink's member index
    double threshold = 0.0, risk_now = 0.0, last_risk = 0.0;  // last_risk: of the last recorded row
    double t_now = 0.0;     // the time of the last accepted state (for a singular kernel's message)
    double rate = 1.0;      // piecewise-constant schedules: the rate of the step in progress
  };

  // The start: divergence of y(0), and the stop rule's threshold (a run already below it stops at t = 0).
  void start() {
    int code[L];
    sys_.check(y_.data(), bound_, code);
    for (int l = 0; l < count_; ++l)
      if (code[l]) diverge(l, 0.0, divergence_message(code[l]));
    for (int l = 0; l < count_; ++l) {
      Lane& ln = lane_[l];
      if (!ln.live || !ln.rule->active()) continue;
      const double* x = lane_state(l, y_.data(), a_.data());
      ln.risk_now = sys_.risk(l, x);
      ln.threshold = std::max(ln.rule->risk_tol, ln.rule->risk_rtol * ln.risk_now);
      if (ln.risk_now <= ln.threshold) converge(l, 0.0, x);
    }
  }

  // --- lanes and their states ---
  bool any_live() const {
    for (int l = 0; l < count_; ++l)
      if (lane_[l].live) return true;
    return false;
  }
  // Lane l's state in src (structure of arrays) as a contiguous array: src itself for one lane, else copied to buf.
  const double* lane_state(int l, const double* src, double* buf) const {
    if (L == 1) return src;
    for (std::size_t e = 0; e < n_; ++e) buf[e] = src[e * L + l];
    return buf;
  }
  void set_lane_state(int l, const double* src, double* dst) const {
    for (std::size_t e = 0; e < n_; ++e) dst[e * L + l] = src[e];
  }

  // --- the right-hand side at the lanes' times t (a scheduled run's multipliers) ---
  void rhs(const double* t, const double* y, double* dy) {
    if (scheduled_)
      for (int l = 0; l < L; ++l) sys_.set_rate(l, piecewise_ ? lane_[l].rate : opt_.schedule(t[l]));
    sys_.rhs(y, dy);
    for (int l = 0; l < count_; ++l)
      if (lane_[l].live) ++lane_[l].res->n_rhs;
  }
  // A piecewise-constant schedule is evaluated once per step, at its midpoint (steps end at its jumps, so the rate
  // is exact over the whole step): the rate of lane l's step [t, t + h]; true when it differs from the last one.
  bool begin_step(int l, double t, double h) {
    if (!scheduled_ || !piecewise_) return false;
    const double r = opt_.schedule(t + 0.5 * h);
    const bool changed = r != lane_[l].rate;
    lane_[l].rate = r;
    return changed;
  }

  // --- per-lane control ---
  void stop(int l, double t, const char* status, const std::string& message) {
    IntegrateResult& res = *lane_[l].res;
    res.status = status;
    res.stop_time = t;
    res.message = message;
    lane_[l].live = false;
  }
  void diverge(int l, double t, const std::string& why) { stop(l, t, "diverged", diverged_message(t, why)); }
  // Records the row (x contiguous; r: its risk if known, else NaN); false (and the lane stopped) if its risk
  // overflows (finite overlaps whose risk does not, e.g. quadratic units near the bound).
  bool record(int l, double t, const double* x, double r = std::numeric_limits<double>::quiet_NaN()) {
    if (std::isnan(r)) r = sys_.risk(l, x);
    if (!std::isfinite(r)) {
      diverge(l, t, divergence_message(kRiskNotFinite));
      return false;
    }
    lane_[l].last_risk = r;
    if (sink_) {  // handed over when all lanes have ended (flush)
      std::vector<double>& s = staged_[l];
      s.push_back(t);
      s.push_back(r);
      s.insert(s.end(), x, x + n_);
    } else {
      IntegrateResult& res = *lane_[l].res;
      res.t.push_back(t);
      res.risk.push_back(r);
      res.y.insert(res.y.end(), x, x + n_);
    }
    return true;
  }
  // The staged rows to the sink, lane by lane: a member's rows go out in one sequential pass (contiguous in the
  // sink's (B, T, ...) arrays), not scattered over the rows of L members at every output time.
  void flush() {
    if (!sink_) return;
    const std::size_t w = n_ + 2;
    for (int l = 0; l < count_; ++l) {
      const std::vector<double>& s = staged_[l];
      for (std::size_t i = 0; i + w <= s.size(); i += w) sink_->row(lane_[l].member, s[i], s.data() + i + 2, s[i + 1]);
    }
  }
  // Checked before every step attempt: false (and the lane stopped) if the lane must stop here.
  bool may_continue(int l, double t) {
    const IntegrateResult& res = *lane_[l].res;
    if (cancel_requested()) {
      stop(l, t, "interrupted", interrupted_message(t, res.n_steps));
      return false;
    }
    if (res.n_steps >= opt_.max_steps) {
      stop(l, t, "max_steps", max_steps_message(opt_.max_steps, t));
      return false;
    }
    return true;
  }
  // Whether the accepted state x (contiguous) reached the lane's threshold (its risk kept in risk_now if not).
  bool crossed(int l, const double* x) {
    Lane& ln = lane_[l];
    if (!ln.rule->active()) return false;
    const double r = sys_.risk(l, x);
    const bool hit = r <= ln.threshold;
    if (!hit) ln.risk_now = r;
    return hit;
  }
  // The first passage inside lane l's accepted step of length h from t (first_passage.hpp); at(theta, out) writes
  // the interpolated state.
  template <class At>
  double first_passage(int l, At&& at, double t, double h, double r0, double r1) {
    return locate_first_passage(at, [&](const double* x) { return sys_.risk(l, x); }, lane_[l].threshold, t, h, r0,
                                r1, c_.data());
  }
  // Records the crossing state x at t_stop and stops the lane with "converged".
  void converge(int l, double t_stop, const double* x) {
    if (!record(l, t_stop, x)) return;
    const Lane& ln = lane_[l];
    stop(l, t_stop, "converged", converged_message(ln.last_risk, ln.threshold, *ln.rule, t_stop));
  }

  // --- Euler and RK4: all lanes step together, landing on every output time ---
  void run_fixed() {
    const bool rk4 = opt_.method == Method::Rk4;
    const double dt = opt_.dt;
    bool any_rule = false;
    for (int l = 0; l < count_; ++l) any_rule = any_rule || lane_[l].rule->active();
    const std::size_t N = n_ * L;
    double *y = y_.data(), *k1 = k1_.data(), *k2 = k2_.data(), *k3 = k3_.data(), *k4 = k4_.data(),
           *tmp = tmp_.data();
    double t = 0.0, ts[L];
    // The live lanes' step counts grow alike: the lane-by-lane checks of may_continue run only when the largest
    // count reaches max_steps or a cancel is requested.
    long long steps = 0;
    for (int l = 0; l < count_; ++l)
      if (lane_[l].live) steps = std::max(steps, static_cast<long long>(lane_[l].res->n_steps));
    auto at = [&](double time) {
      for (int l = 0; l < L; ++l) ts[l] = time;
      return ts;
    };
    for (double target : opt_.times) {
      while (t < target) {
        if (cancel_requested() || steps >= static_cast<long long>(opt_.max_steps)) {
          for (int l = 0; l < count_; ++l)
            if (lane_[l].live) may_continue(l, t);
        }
        if (!any_live()) return;
        ++steps;
        bool land;
        const double h = step_size::towards(t, target, dt, land);
        if (any_rule) std::copy(y_.begin(), y_.end(), yold_.begin());
        double r_old[L];
        for (int l = 0; l < L; ++l) r_old[l] = lane_[l].risk_now, begin_step(l, t, h);
        rhs(at(t), y, k1);
        if (!rk4) {
          TWOLAYER_LANES
          for (std::size_t i = 0; i < N; ++i) y[i] += h * k1[i];
        } else {
          TWOLAYER_LANES
          for (std::size_t i = 0; i < N; ++i) tmp[i] = y[i] + 0.5 * h * k1[i];
          rhs(at(t + 0.5 * h), tmp, k2);
          TWOLAYER_LANES
          for (std::size_t i = 0; i < N; ++i) tmp[i] = y[i] + 0.5 * h * k2[i];
          rhs(at(t + 0.5 * h), tmp, k3);
          TWOLAYER_LANES
          for (std::size_t i = 0; i < N; ++i) tmp[i] = y[i] + h * k3[i];
          rhs(at(t + h), tmp, k4);
          TWOLAYER_LANES
          for (std::size_t i = 0; i < N; ++i) y[i] += h / 6.0 * (k1[i] + 2.0 * (k2[i] + k3[i]) + k4[i]);
        }
        const double t_new = land ? target : t + h;
        int code[L];
        sys_.check(y, bound_, code);
        for (int l = 0; l < count_; ++l) {
          if (!lane_[l].live) continue;
          ++lane_[l].res->n_steps;
          lane_[l].t_now = t_new;
          if (code[l]) {
            diverge(l, t_new, divergence_message(code[l]));
            continue;
          }
          if (!lane_[l].rule->active()) continue;
          const double* yl = lane_state(l, y, a_.data());
          if (!crossed(l, yl)) continue;
          const double* yo = lane_state(l, yold_.data(), b_.data());
          const double r_new = sys_.risk(l, yl);
          auto chord = [&](double th, double* o) {  // the chord between the last two states
            for (std::size_t i = 0; i < n_; ++i) o[i] = yo[i] + th * (yl[i] - yo[i]);
          };
          const double th = first_passage(l, chord, t, t_new - t, r_old[l], r_new);
          if (th < 1.0) {
            chord(th, c_.data());
            converge(l, t + th * (t_new - t), c_.data());
          } else {
            converge(l, t_new, yl);
          }
        }
        t = t_new;
      }
      double r[L];
      sys_.risk_all(y, r);
      for (int l = 0; l < count_; ++l)
        if (lane_[l].live) record(l, target, lane_state(l, y, a_.data()), r[l]);
    }
  }

  // The error norm of every lane (step_size.hpp), the lanes in SIMD.
  void norm(const double* x, const double* ya, const double* yb, double* out) const {
    double s[L];
    for (int l = 0; l < L; ++l) s[l] = 0.0;
    for (std::size_t i = 0; i < n_; ++i) {
      const double *xi = x + i * L, *ai = ya + i * L, *bi = yb + i * L;
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) {
        const double e = step_size::scaled(xi[l], ai[l], bi[l], opt_.atol, opt_.rtol);
        s[l] += e * e;
      }
    }
    for (int l = 0; l < L; ++l) out[l] = step_size::rms(s[l], n_);
  }

  // --- Dormand-Prince 5(4) with FSAL, one step attempt per live lane per round: outputs come from its 4th-order
  // continuous extension (Hairer's dopri5), so the output times do not constrain the steps; only the final time
  // (and a piecewise schedule's jumps) are landed on exactly. The early stop's crossing is located on the same
  // continuous extension. ---
  void run_adaptive() {
    const std::size_t nout = opt_.times.size();
    std::size_t next0 = 0;
    for (; next0 < nout && opt_.times[next0] <= 0.0; ++next0)
      for (int l = 0; l < count_; ++l)
        if (lane_[l].live) record(l, opt_.times[next0], lane_state(l, y_.data(), a_.data()));
    if (next0 == nout || !any_live()) return;
    const double t_end = opt_.times.back();
    double *y = y_.data(), *k1 = k1_.data(), *k2 = k2_.data(), *k3 = k3_.data(), *k4 = k4_.data(),
           *k5 = k5_.data(), *k6 = k6_.data(), *k7 = k7_.data(), *tmp = tmp_.data(), *ynew = ynew_.data(),
           *err = err_.data();
    double t[L], h[L], hs[L], e[L], ts[L];
    bool last[L];
    std::size_t next[L];
    for (int l = 0; l < L; ++l) t[l] = 0.0, h[l] = opt_.h0, hs[l] = 0.0, last[l] = false, next[l] = next0;
    if (scheduled_ && piecewise_)
      for (int l = 0; l < L; ++l) lane_[l].rate = opt_.schedule(0.0);
    rhs(t, y, k1);
    if (!(opt_.h0 > 0.0)) {  // the initial step (step_size.hpp)
      double d0[L], d1[L], d2[L], hh[L];
      norm(y, y, y, d0);
      norm(k1, y, y, d1);
      for (int l = 0; l < L; ++l) hh[l] = step_size::initial_guess(d0[l], d1[l]);
      for (std::size_t i = 0; i < n_; ++i) {
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) tmp[i * L + l] = y[i * L + l] + hh[l] * k1[i * L + l];
      }
      rhs(hh, tmp, k2);
      for (std::size_t i = 0; i < n_; ++i) {
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) err[i * L + l] = (k2[i * L + l] - k1[i * L + l]) / hh[l];
      }
      norm(err, y, y, d2);
      for (int l = 0; l < L; ++l) h[l] = step_size::initial(hh[l], d1[l], d2[l]);
    }
    for (int l = 0; l < L; ++l) h[l] = step_size::capped(h[l], opt_.h_max);
    // tmp = y + hs sum_j a_j k_j, then out = f(tmp) at t + c hs.
    auto stage = [&](double* out, double c, std::initializer_list<std::pair<const double*, double>> ks) {
      for (std::size_t i = 0; i < n_; ++i) {
        double s[L];
        for (int l = 0; l < L; ++l) s[l] = 0.0;
        for (const auto& kc : ks) {
          const double* k = kc.first + i * L;
          const double a = kc.second;
          TWOLAYER_LANES
          for (int l = 0; l < L; ++l) s[l] += a * k[l];
        }
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) tmp[i * L + l] = y[i * L + l] + hs[l] * s[l];
      }
      for (int l = 0; l < L; ++l) ts[l] = t[l] + c * hs[l];
      rhs(ts, tmp, out);
    };
    while (true) {
      bool new_rate = false;
      for (int l = 0; l < count_; ++l) {
        if (!lane_[l].live) continue;
        if (!(t[l] < t_end)) {
          lane_[l].live = false;  // completed
          continue;
        }
        if (!may_continue(l, t[l])) continue;
        if (step_size::underflows(h[l], t[l])) {
          diverge(l, t[l], step_size::kUnderflowMessage);
          continue;
        }
        last[l] = step_size::reaches_end(t[l], h[l], t_end);
        hs[l] = last[l] ? t_end - t[l] : h[l];
        if (scheduled_) {  // a jump of the schedule ends the step; the step after it recomputes k1 at the new rate
          const double jump = opt_.schedule.next_jump(t[l]);
          if (jump < t[l] + hs[l]) {
            hs[l] = jump - t[l];
            last[l] = false;
          }
          new_rate = begin_step(l, t[l], hs[l]) || new_rate;
        }
      }
      if (!any_live()) return;
      if (new_rate) rhs(t, y, k1);
      bool ok = true;
      try {
        using namespace dopri;
        stage(k2, c2, {{k1, a21}});
        stage(k3, c3, {{k1, a31}, {k2, a32}});
        stage(k4, c4, {{k1, a41}, {k2, a42}, {k3, a43}});
        stage(k5, c5, {{k1, a51}, {k2, a52}, {k3, a53}, {k4, a54}});
        stage(k6, 1.0, {{k1, a61}, {k2, a62}, {k3, a63}, {k4, a64}, {k5, a65}});
        for (std::size_t i = 0; i < n_; ++i) {
          TWOLAYER_LANES
          for (int l = 0; l < L; ++l) {
            const std::size_t x = i * L + l;
            ynew[x] = y[x] + hs[l] * (b1 * k1[x] + b3 * k3[x] + b4 * k4[x] + b5 * k5[x] + b6 * k6[x]);
          }
        }
        for (int l = 0; l < L; ++l) ts[l] = t[l] + hs[l];
        rhs(ts, ynew, k7);
      } catch (const std::domain_error&) {
        ok = false;  // a stage left the kernels' domain: every lane retries with a smaller step
      }
      if (ok) {
        using namespace dopri;
        for (std::size_t i = 0; i < n_; ++i) {
          TWOLAYER_LANES
          for (int l = 0; l < L; ++l) {
            const std::size_t x = i * L + l;
            err[x] = hs[l] * (e1 * k1[x] + e3 * k3[x] + e4 * k4[x] + e5 * k5[x] + e6 * k6[x] + e7 * k7[x]);
          }
        }
        norm(err, y, ynew, e);
      } else {
        for (int l = 0; l < L; ++l) e[l] = std::numeric_limits<double>::infinity();
      }
      int code[L];
      sys_.check(ynew, bound_, code);
      for (int l = 0; l < count_; ++l) {
        Lane& ln = lane_[l];
        if (!ln.live) continue;
        IntegrateResult& res = *ln.res;
        if (!step_size::accepts(e[l])) {
          ++res.n_rejected;
          h[l] = step_size::after_rejected(hs[l], e[l]);
          continue;
        }
        const double t0 = t[l], hl = hs[l];
        const double t_new = last[l] ? t_end : t0 + hl;
        if (code[l]) {
          diverge(l, t_new, divergence_message(code[l]));
          continue;
        }
        const double* yn = lane_state(l, ynew, a_.data());
        const double r_old = ln.risk_now;
        const bool cross = crossed(l, yn);
        // The dense output for the output times in (t, t_new) and for the crossing.
        auto dense = [&](double th, double* o) {
          dopri::dense_value(y + l, r2_.data(), r3_.data(), r4_.data(), r5_.data(), th, n_, o, L);
        };
        if (cross || (next[l] < nout && opt_.times[next[l]] < t_new))
          dopri::dense_coefficients(y + l, ynew + l, k1 + l, k3 + l, k4 + l, k5 + l, k6 + l, k7 + l, hl, n_,
                                    r2_.data(), r3_.data(), r4_.data(), r5_.data(), L);
        double t_stop = t_new, th_stop = 1.0;
        if (cross) {
          th_stop = first_passage(l, dense, t0, hl, r_old, sys_.risk(l, yn));
          if (th_stop < 1.0) t_stop = t0 + th_stop * hl;
        }
        bool ok_rows = true;
        while (ok_rows && next[l] < nout && opt_.times[next[l]] < t_stop) {
          dense((opt_.times[next[l]] - t0) / hl, b_.data());
          ok_rows = record(l, opt_.times[next[l]++], b_.data());
        }
        if (!ok_rows) continue;
        ++res.n_steps;
        if (cross) {
          if (th_stop < 1.0) {
            dense(th_stop, c_.data());
            converge(l, t_stop, c_.data());
          } else {
            converge(l, t_new, yn);
          }
          continue;
        }
        t[l] = t_new;
        ln.t_now = t_new;
        for (std::size_t i = 0; i < n_; ++i) {  // y <- ynew, k1 <- k7 (FSAL)
          y[i * L + l] = ynew[i * L + l];
          k1[i * L + l] = k7[i * L + l];
        }
        while (ok_rows && next[l] < nout && opt_.times[next[l]] <= t[l])
          ok_rows = record(l, opt_.times[next[l]++], lane_state(l, y, a_.data()));
        if (!ok_rows) continue;
        h[l] = step_size::after_accepted(hl, e[l], opt_.h_max);
      }
    }
  }

  System& sys_;
  const IntegrateOptions& opt_;
  const bool scheduled_ = !opt_.schedule.identity();
  const bool piecewise_ = opt_.schedule.piecewise_constant();
  std::size_t n_;
  int count_ = 0;
  RowSink* sink_ = nullptr;
  std::vector<double> staged_[L];  // with a sink: lane l's rows (t, risk, state) until all lanes have ended
  Lane lane_[L];
  double bound_[L] = {};  // each lane's divergence bound (divergence_bound of its start)
  std::vector<double> y_, k1_, k2_, k3_, k4_, k5_, k6_, k7_, tmp_, ynew_, err_, yold_;  // all lanes
  std::vector<double> a_, b_, c_, r2_, r3_, r4_, r5_;                                 // one lane, contiguous
};

}  // namespace twolayer

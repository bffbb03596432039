// Euler, RK4 and Dormand-Prince 5(4) over L systems in the SIMD lanes (batch_integrators.hpp). Each lane keeps its
// own time, step size, output cursor, stop rule and status; the right-hand side and the element-wise stage arithmetic
// run over all lanes at once, and the per-lane control (acceptance, records, first passage, messages) is the one-
// system Runner's (integrators.cpp), lane by lane. Finished lanes keep being evaluated (their results are no longer
// read), so that a block's lanes stay in lockstep without masks. Compiled with -ffp-contract=off (CMakeLists.txt):
// every lane does the same IEEE operations whatever L is, which makes a batch member bitwise equal to its run alone.
#include "twolayer/batch_integrators.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

#include "twolayer/batch_dynamics.hpp"
#include "twolayer/cancel.hpp"
#include "twolayer/divergence.hpp"
#include "twolayer/dormand_prince.hpp"
#include "twolayer/first_passage.hpp"
#include "twolayer/format.hpp"
#include "twolayer/run_messages.hpp"
#include "twolayer/step_size.hpp"
#include "twolayer/parallel.hpp"
#include "twolayer/population.hpp"

namespace twolayer {

namespace {

constexpr int kBatchLanes = 8;  // lanes per block in a batch (two AVX2 vectors; 16 lanes measured no faster)

template <int L>
class LaneRunner {
 public:
  LaneRunner(const LaneShape& shape, Activation act, const IntegrateOptions& opt)
      : sh_(shape), act_(act), opt_(opt), K_(shape.K), M_(shape.M), u_(shape.K + shape.M), n_(shape.state_size()) {
    const std::size_t nl = n_ * L;
    for (auto* v : {&y_, &k1_, &k2_, &k3_, &k4_, &k5_, &k6_, &k7_, &tmp_, &ynew_, &err_, &yold_}) v->resize(nl);
    ws_.resize(committee_rhs_lanes_workspace(shape, L, act));
    chol_.resize(omega_check_lanes_workspace(shape, L));
    P_.resize(static_cast<std::size_t>(M_) * M_ * L);
    v_.resize(static_cast<std::size_t>(M_) * L);
    lr_.resize(L);
    lra_.resize(L);
    noise_.resize(L);
    a_.resize(n_);
    b_.resize(n_);
    c_.resize(n_);
    r2_.resize(n_);
    r3_.resize(n_);
    r4_.resize(n_);
    r5_.resize(n_);
  }

  // Runs count <= L members (lane l: models[l], y0s[l], stops[l], results into out[l]; its rows into out[l] or,
  // with a sink, to sink as those of member members[l]).
  void run(const OdeModel* const* models, const double* const* y0s, const StopRule* const* stops, int count,
           IntegrateResult* const* out, RowSink* sink = nullptr, const std::size_t* members = nullptr) {
    count_ = count;
    sink_ = sink;
    for (int l = 0; l < L; ++l) {
      const int s = l < count ? l : 0;  // padding lanes repeat lane 0 and are never live
      const OdeModel& m = *models[s];
      lane_[l] = Lane{&m, stops[s], l < count ? out[l] : nullptr, l < count, sink ? members[s] : 0};
      for (int e = 0; e < M_ * M_; ++e) P_[e * L + l] = m.P[e];
      for (int e = 0; e < M_; ++e) v_[e * L + l] = m.v[e];
      lr_[l] = m.lr;
      lra_[l] = m.lr_readout;
      noise_[l] = sh_.online ? m.noise : 0.0;
      for (std::size_t e = 0; e < n_; ++e) y_[e * L + l] = y0s[s][e];
      bound_[l] = divergence_bound(y0s[s], n_, m.P.data(), m.P.size(), m.v.data(), m.v.size());
      if (l < count) {  // the output rows, allocated once
        staged_[l].clear();
        staged_[l].reserve((opt_.times.size() + 1) * (n_ + 2));
      }
    }
    int code[L];
    check_states(y_.data(), code);
    for (int l = 0; l < count; ++l)
      if (code[l]) diverge(l, 0.0, divergence_message(code[l]));
    for (int l = 0; l < count; ++l) {
      Lane& ln = lane_[l];
      if (!ln.live || !ln.rule->active()) continue;
      gather(l, y_.data(), a_.data());
      ln.risk_now = risk(l, a_.data());
      ln.threshold = std::max(ln.rule->risk_tol, ln.rule->risk_rtol * ln.risk_now);
      if (ln.risk_now <= ln.threshold) converge(l, 0.0, a_.data());  // already there: first passage at t = 0
    }
    if (any_live()) {
      if (opt_.method == Method::Adaptive)
        run_adaptive();
      else
        run_fixed();
    }
    flush();
    for (int l = 0; l < count; ++l) {
      IntegrateResult& res = *lane_[l].res;
      if (res.status == "completed") {
        res.message = completed_message(opt_.times.empty() ? 0.0 : opt_.times.back(), res.n_steps, res.n_rhs);
      }
    }
  }

 private:
  struct Lane {
    const OdeModel* model;
    const StopRule* rule;
    IntegrateResult* res;
    bool live;
    std::size_t member;  // the sink's member index
    double threshold = 0.0, risk_now = 0.0, last_risk = 0.0;  // last_risk: of the last recorded row
  };

  // The staged rows to the sink or else the lane's result, lane by lane: a member's rows go out in one sequential
  // pass at the end of its block (contiguous in the sink's (B, T, ...) arrays), not scattered over the rows of L
  // members at every output time.
  void flush() {
    const std::size_t w = n_ + 2;
    for (int l = 0; l < count_; ++l) {
      const std::vector<double>& s = staged_[l];
      IntegrateResult& res = *lane_[l].res;
      for (std::size_t i = 0; i + w <= s.size(); i += w) {
        const double* y = s.data() + i + 2;
        if (sink_) {
          sink_->row(lane_[l].member, s[i], y, s[i + 1]);
        } else {
          res.t.push_back(s[i]);
          res.risk.push_back(s[i + 1]);
          res.y.insert(res.y.end(), y, y + n_);
        }
      }
    }
  }
  bool any_live() const {
    for (int l = 0; l < count_; ++l)
      if (lane_[l].live) return true;
    return false;
  }
  void rhs(const double* y, double* dy) {
    const LaneParams p{P_.data(), v_.data(), lr_.data(), lra_.data(), noise_.data()};
    rhs_fn_(sh_, p, y, dy, ws_.data());
    for (int l = 0; l < count_; ++l)
      if (lane_[l].live) ++lane_[l].res->n_rhs;
  }
  void gather(int l, const double* src, double* dst) const {
    for (std::size_t e = 0; e < n_; ++e) dst[e] = src[e * L + l];
  }
  void scatter(int l, const double* src, double* dst) const {
    for (std::size_t e = 0; e < n_; ++e) dst[e * L + l] = src[e];
  }
  // The excess risk of lane l at the contiguous state x: committee_risk_lanes with one lane, the arithmetic of every
  // lane of risk_lanes (so that a row's risk is the same whichever of the two computed it).
  double risk(int l, const double* x) const {
    const OdeModel& m = *lane_[l].model;
    double r;
    risk1_fn_(sh_, m.P.data(), m.v.data(), x, &r);
    return r;
  }

  // --- per-lane control, as Runner (integrators.cpp) ---
  void stop(int l, double t, const char* status, const std::string& message) {
    IntegrateResult& res = *lane_[l].res;
    res.status = status;
    res.stop_time = t;
    res.message = message;
    lane_[l].live = false;
  }
  void diverge(int l, double t, const std::string& why) {
    stop(l, t, "diverged", diverged_message(t, why));
  }
  // Records the row (x contiguous; r: its risk if known, else NaN); false (and the lane stopped) if its risk
  // overflows.
  bool record(int l, double t, const double* x, double r = std::numeric_limits<double>::quiet_NaN()) {
    if (std::isnan(r)) r = risk(l, x);
    if (!std::isfinite(r)) {
      diverge(l, t, divergence_message(kRiskNotFinite));
      return false;
    }
    lane_[l].last_risk = r;
    std::vector<double>& s = staged_[l];  // handed over when the block ends (flush)
    s.push_back(t);
    s.push_back(r);
    s.insert(s.end(), x, x + n_);
    return true;
  }
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
    const double r = risk(l, x);
    const bool hit = r <= ln.threshold;
    if (!hit) ln.risk_now = r;
    return hit;
  }
  void converge(int l, double t_stop, const double* x) {
    if (!record(l, t_stop, x)) return;
    const Lane& ln = lane_[l];
    stop(l, t_stop, "converged", converged_message(ln.last_risk, ln.threshold, *ln.rule, t_stop));
  }

  // The divergence rule over the lanes (omega_check_lanes in batch_dynamics.hpp).
  void check_states(const double* y, int* code) {
    check_fn_(sh_, P_.data(), y, bound_, chol_.data(), code);
  }

  void run_fixed() {
    const bool rk4 = opt_.method == Method::Rk4;
    const double dt = opt_.dt;
    bool any_rule = false;
    for (int l = 0; l < count_; ++l) any_rule = any_rule || lane_[l].rule->active();
    const std::size_t N = n_ * L;
    double *y = y_.data(), *k1 = k1_.data(), *k2 = k2_.data(), *k3 = k3_.data(), *k4 = k4_.data(),
           *tmp = tmp_.data();
    double t = 0.0;
    // The live lanes step together, so that their step counts grow alike: the lane-by-lane checks of may_continue
    // run only when this block's largest count reaches max_steps or a cancel is requested.
    long long steps = 0;
    for (int l = 0; l < count_; ++l)
      if (lane_[l].live) steps = std::max(steps, static_cast<long long>(lane_[l].res->n_steps));
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
        for (int l = 0; l < L; ++l) r_old[l] = lane_[l].risk_now;
        rhs(y, k1);
        if (!rk4) {
          TWOLAYER_LANES
          for (std::size_t i = 0; i < N; ++i) y[i] += h * k1[i];
        } else {
          TWOLAYER_LANES
          for (std::size_t i = 0; i < N; ++i) tmp[i] = y[i] + 0.5 * h * k1[i];
          rhs(tmp, k2);
          TWOLAYER_LANES
          for (std::size_t i = 0; i < N; ++i) tmp[i] = y[i] + 0.5 * h * k2[i];
          rhs(tmp, k3);
          TWOLAYER_LANES
          for (std::size_t i = 0; i < N; ++i) tmp[i] = y[i] + h * k3[i];
          rhs(tmp, k4);
          TWOLAYER_LANES
          for (std::size_t i = 0; i < N; ++i) y[i] += h / 6.0 * (k1[i] + 2.0 * (k2[i] + k3[i]) + k4[i]);
        }
        const double t_new = land ? target : t + h;
        int code[L];
        check_states(y, code);
        for (int l = 0; l < count_; ++l) {
          if (!lane_[l].live) continue;
          ++lane_[l].res->n_steps;
          if (code[l]) {
            diverge(l, t_new, divergence_message(code[l]));
            continue;
          }
          if (!lane_[l].rule->active()) continue;
          double* yl = a_.data();
          gather(l, y, yl);
          if (!crossed(l, yl)) continue;
          // the chord between the last two states
          double* yo = b_.data();
          gather(l, yold_.data(), yo);
          const double r_new = risk(l, yl);
          auto chord = [&](double th, double* o) {
            for (std::size_t i = 0; i < n_; ++i) o[i] = yo[i] + th * (yl[i] - yo[i]);
          };
          const double th = locate_first_passage(chord, [&](const double* x) { return risk(l, x); },
                                                 lane_[l].threshold, t, t_new - t, r_old[l], r_new, c_.data());
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
      risk_fn_(sh_, P_.data(), v_.data(), y, r);  // all lanes at once
      for (int l = 0; l < count_; ++l) {
        if (!lane_[l].live) continue;
        gather(l, y, a_.data());
        record(l, target, a_.data(), std::isnan(r[l]) ? risk(l, a_.data()) : r[l]);
      }
    }
  }

  // sqrt(mean((x / (atol + rtol max(|ya|, |yb|)))^2)) per lane.
  void norm(const double* x, const double* ya, const double* yb, double* out) const {
    double s[L];
    for (int l = 0; l < L; ++l) s[l] = 0.0;
    for (std::size_t i = 0; i < n_; ++i) {
      const double *xi = x + i * L, *ai = ya + i * L, *bi = yb + i * L;
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) {
        const double sc = opt_.atol + opt_.rtol * std::max(std::fabs(ai[l]), std::fabs(bi[l]));
        const double e = xi[l] / sc;
        s[l] += e * e;
      }
    }
    for (int l = 0; l < L; ++l) out[l] = std::sqrt(s[l] / static_cast<double>(n_));
  }

  void run_adaptive() {
    const std::size_t N = n_ * L;
    const std::size_t nout = opt_.times.size();
    std::size_t next0 = 0;
    while (next0 < nout && opt_.times[next0] <= 0.0) {
      for (int l = 0; l < count_; ++l) {
        if (!lane_[l].live) continue;
        gather(l, y_.data(), a_.data());
        record(l, opt_.times[next0], a_.data());
      }
      ++next0;
    }
    if (next0 == nout || !any_live()) return;
    const double t_end = opt_.times.back();
    double *y = y_.data(), *k1 = k1_.data(), *k2 = k2_.data(), *k3 = k3_.data(), *k4 = k4_.data(),
           *k5 = k5_.data(), *k6 = k6_.data(), *k7 = k7_.data(), *tmp = tmp_.data(), *ynew = ynew_.data(),
           *err = err_.data();
    rhs(y, k1);
    double t[L], h[L], hs[L], e[L];
    bool last[L];
    std::size_t next[L];
    for (int l = 0; l < L; ++l) t[l] = 0.0, h[l] = opt_.h0, hs[l] = 0.0, last[l] = false, next[l] = next0;
    if (!(opt_.h0 > 0.0)) {  // initial step (Hairer, Norsett & Wanner, II.4)
      double d0[L], d1[L], d2[L], hh[L];
      norm(y, y, y, d0);
      norm(k1, y, y, d1);
      for (int l = 0; l < L; ++l) hh[l] = step_size::initial_guess(d0[l], d1[l]);
      for (std::size_t i = 0; i < n_; ++i) {
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) tmp[i * L + l] = y[i * L + l] + hh[l] * k1[i * L + l];
      }
      rhs(tmp, k2);
      for (std::size_t i = 0; i < n_; ++i) {
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) err[i * L + l] = (k2[i * L + l] - k1[i * L + l]) / hh[l];
      }
      norm(err, y, y, d2);
      for (int l = 0; l < L; ++l) h[l] = step_size::initial(hh[l], d1[l], d2[l]);
    }
    if (opt_.h_max > 0.0)
      for (int l = 0; l < L; ++l) h[l] = std::min(h[l], opt_.h_max);
    // One step attempt per live lane per round.
    auto stage = [&](double* out, std::initializer_list<std::pair<const double*, double>> ks) {
      for (std::size_t i = 0; i < n_; ++i) {
        double s[L];
        for (int l = 0; l < L; ++l) s[l] = 0.0;
        for (const auto& kc : ks) {
          const double* k = kc.first + i * L;
          const double c = kc.second;
          TWOLAYER_LANES
          for (int l = 0; l < L; ++l) s[l] += c * k[l];
        }
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) tmp[i * L + l] = y[i * L + l] + hs[l] * s[l];
      }
      rhs(tmp, out);
    };
    while (true) {
      for (int l = 0; l < count_; ++l) {
        if (!lane_[l].live) continue;
        if (!(t[l] < t_end)) {
          lane_[l].live = false;  // completed
          continue;
        }
        if (!may_continue(l, t[l])) continue;
        if (step_size::underflows(h[l], t[l])) {
          diverge(l, t[l], kStepUnderflow);
          continue;
        }
        last[l] = step_size::reaches_end(t[l], h[l], t_end);
        hs[l] = last[l] ? t_end - t[l] : h[l];
      }
      if (!any_live()) return;
      stage(k2, {{k1, dopri::a21}});
      stage(k3, {{k1, dopri::a31}, {k2, dopri::a32}});
      stage(k4, {{k1, dopri::a41}, {k2, dopri::a42}, {k3, dopri::a43}});
      stage(k5, {{k1, dopri::a51}, {k2, dopri::a52}, {k3, dopri::a53}, {k4, dopri::a54}});
      stage(k6, {{k1, dopri::a61}, {k2, dopri::a62}, {k3, dopri::a63}, {k4, dopri::a64}, {k5, dopri::a65}});
      for (std::size_t i = 0; i < n_; ++i) {
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) {
          const std::size_t x = i * L + l;
          ynew[x] = y[x] + hs[l] * (dopri::b1 * k1[x] + dopri::b3 * k3[x] + dopri::b4 * k4[x] + dopri::b5 * k5[x] +
              dopri::b6 * k6[x]);
        }
      }
      rhs(ynew, k7);
      for (std::size_t i = 0; i < n_; ++i) {
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) {
          const std::size_t x = i * L + l;
          err[x] = hs[l] * (dopri::e1 * k1[x] + dopri::e3 * k3[x] + dopri::e4 * k4[x] + dopri::e5 * k5[x] +
              dopri::e6 * k6[x] + dopri::e7 * k7[x]);
        }
      }
      norm(err, y, ynew, e);
      int code[L];
      check_states(ynew, code);
      for (int l = 0; l < count_; ++l) {
        Lane& ln = lane_[l];
        if (!ln.live) continue;
        IntegrateResult& res = *ln.res;
        const double el = std::isfinite(e[l]) ? e[l] : std::numeric_limits<double>::infinity();
        if (!(el <= 1.0)) {
          ++res.n_rejected;
          h[l] = hs[l] * step_size::rejected_factor(el);
          continue;
        }
        const double t0 = t[l], hl = hs[l];
        const double t_new = last[l] ? t_end : t0 + hl;
        if (code[l]) {
          diverge(l, t_new, divergence_message(code[l]));
          continue;
        }
        double* yn = a_.data();
        gather(l, ynew, yn);
        const double r_old = ln.risk_now;
        const bool cross = crossed(l, yn);
        // Dense output (Hairer's dopri5 CONTD5) for the output times in (t, t_new) and for the crossing.
        auto dense = [&](double th, double* o) {
          const double th1 = 1.0 - th;
          for (std::size_t i = 0; i < n_; ++i)
            o[i] = y[i * L + l] + th * (r2_[i] + th1 * (r3_[i] + th * (r4_[i] + th1 * r5_[i])));
        };
        if (cross || (next[l] < nout && opt_.times[next[l]] < t_new)) {
          for (std::size_t i = 0; i < n_; ++i) {
            const std::size_t x = i * L + l;
            r2_[i] = ynew[x] - y[x];
            r3_[i] = hl * k1[x] - r2_[i];
            r4_[i] = r2_[i] - hl * k7[x] - r3_[i];
            r5_[i] = hl * (dopri::d1 * k1[x] + dopri::d3 * k3[x] + dopri::d4 * k4[x] + dopri::d5 * k5[x] +
                dopri::d6 * k6[x] + dopri::d7 * k7[x]);
          }
        }
        double t_stop = t_new, th_stop = 1.0;
        if (cross) {
          th_stop = locate_first_passage(dense, [&](const double* x) { return risk(l, x); }, ln.threshold, t0, hl,
                                         r_old, risk(l, yn), c_.data());
          if (th_stop < 1.0) t_stop = t0 + th_stop * hl;
        }
        bool ok = true;
        while (ok && next[l] < nout && opt_.times[next[l]] < t_stop) {
          dense((opt_.times[next[l]] - t0) / hl, b_.data());
          ok = record(l, opt_.times[next[l]++], b_.data());
        }
        if (!ok) continue;
        if (cross) {
          ++res.n_steps;
          if (th_stop < 1.0) {
            dense(th_stop, c_.data());
            converge(l, t_stop, c_.data());
          } else {
            converge(l, t_new, yn);
          }
          continue;
        }
        t[l] = t_new;
        scatter(l, yn, y);  // y <- ynew, k1 <- k7 (FSAL)
        for (std::size_t i = 0; i < n_; ++i) k1[i * L + l] = k7[i * L + l];
        ++res.n_steps;
        while (ok && next[l] < nout && opt_.times[next[l]] <= t[l]) ok = record(l, opt_.times[next[l]++], yn);
        if (!ok) continue;
        h[l] = hl * step_size::accepted_factor(el);
        if (opt_.h_max > 0.0) h[l] = std::min(h[l], opt_.h_max);
      }
    }
    (void)N;
  }

  LaneShape sh_;
  Activation act_;  // of the student and teacher units alike
  const IntegrateOptions& opt_;
  CommitteeRhsLanesFn rhs_fn_ = select_committee_rhs_lanes<L>(act_, sh_.K, sh_.M);
  OmegaCheckLanesFn check_fn_ = select_omega_check_lanes<L>(sh_.K, sh_.M);
  CommitteeRiskLanesFn risk_fn_ = select_committee_risk_lanes<L>(act_, sh_.K, sh_.M),
                       risk1_fn_ = select_committee_risk_lanes<1>(act_, sh_.K, sh_.M);
  int K_, M_, u_;
  std::size_t n_;
  int count_ = 0;
  RowSink* sink_ = nullptr;
  std::vector<double> staged_[L];  // lane l's rows (t, risk, state) until the block ends
  Lane lane_[L];
  double bound_[L] = {};  // each lane's divergence bound (divergence_bound of its start)
  std::vector<double> y_, k1_, k2_, k3_, k4_, k5_, k6_, k7_, tmp_, ynew_, err_, yold_;
  std::vector<double> ws_, chol_, P_, v_, lr_, lra_, noise_;
  std::vector<double> a_, b_, c_, r2_, r3_, r4_, r5_;  // one lane, contiguous
};

LaneShape shape_of(const OdeModel& m) {
  LaneShape s;
  s.K = m.K;
  s.M = m.M;
  s.online = m.regime == Regime::Online;
  s.spherical = m.spherical;
  return s;
}

template <int L>
void rhs_lanes_impl(const std::vector<OdeModel>& models, const double* y, double* dy, double* risk) {
  const OdeModel& m0 = models[0];
  const LaneShape sh = shape_of(m0);
  const int K = m0.K, M = m0.M;
  const std::size_t n = sh.state_size(), B = models.size(), mm = static_cast<std::size_t>(M) * M;
  const CommitteeRhsLanesFn rhs = select_committee_rhs_lanes<L>(m0.student, K, M);
  const CommitteeRiskLanesFn rsk = select_committee_risk_lanes<L>(m0.student, K, M);
  std::vector<double> ys(n * L), dys(n * L), ws(committee_rhs_lanes_workspace(sh, L, m0.student)), P(mm * L),
      v(static_cast<std::size_t>(M) * L), lr(L), lra(L), noise(L);
  for (std::size_t b0 = 0; b0 < B; b0 += L) {
    for (int l = 0; l < L; ++l) {
      const std::size_t b = std::min(b0 + l, B - 1);
      const OdeModel& m = models[b];
      for (std::size_t e = 0; e < n; ++e) ys[e * L + l] = y[b * n + e];
      for (std::size_t e = 0; e < mm; ++e) P[e * L + l] = m.P[e];
      for (int e = 0; e < M; ++e) v[e * L + l] = m.v[e];
      lr[l] = m.lr;
      lra[l] = m.lr_readout;
      noise[l] = sh.online ? m.noise : 0.0;
    }
    const LaneParams p{P.data(), v.data(), lr.data(), lra.data(), noise.data()};
    rhs(sh, p, ys.data(), dys.data(), ws.data());
    double r[L];
    rsk(sh, P.data(), v.data(), ys.data(), r);
    for (int l = 0; l < L && b0 + l < B; ++l) {
      for (std::size_t e = 0; e < n; ++e) dy[(b0 + l) * n + e] = dys[e * L + l];
      risk[b0 + l] = r[l];
    }
  }
}

}  // namespace

void rhs_lanes(const std::vector<OdeModel>& models, const double* y, int lanes, double* dy, double* risk) {
  if (models.empty()) return;
  const OdeModel& m0 = models[0];
  for (const OdeModel& m : models) {
    validate_model(m);
    if (m.K != m0.K || m.M != m0.M || m.student != m0.student || m.regime != m0.regime ||
        m.spherical != m0.spherical)
      throw std::invalid_argument("models: expected one shape (K, M, activation, regime, spherical) for all");
    if (m.teacher != m.student || m.target)
      throw std::invalid_argument("models: the lanes need one activation for student and teacher and no target");
  }
  if (!committee_lanes_activation(m0.student))
    throw std::invalid_argument(std::string("act: the lanes cover erf, relu, quadratic and linear committees, got '") +
                                activation_name(m0.student) + "'");
  if (m0.K > kLaneMaxUnits || m0.M > kLaneMaxUnits)
    throw std::invalid_argument("K, M: the lanes hold at most " + std::to_string(kLaneMaxUnits) + " units each");
  if (lanes == 1) return rhs_lanes_impl<1>(models, y, dy, risk);
  if (lanes == kBatchLanes) return rhs_lanes_impl<kBatchLanes>(models, y, dy, risk);
  throw std::invalid_argument("lanes: expected 1 or " + std::to_string(kBatchLanes) + ", got " + std::to_string(lanes));
}

// The lanes hold the committee right-hand side of one activation for student and teacher at a constant learning rate,
// K, M <= kLaneMaxUnits: erf, quadratic and linear committees (measured at K = M = 2, 10^3 members: the quadratic lanes
// 10x faster than OdeRhs). Relu committees stay on the one-system path: their cost is the I4 path integral, the same
// per lane as in OdeRhs (the lanes measured no faster, within 5%); the GPU uses their lanes (committee_rhs_lanes). A
// polynomial target's terms (target.hpp) and a learning-rate schedule (schedule.hpp) run on the one-system path too.
bool lanes_supported(const OdeModel& m, const IntegrateOptions& opt) {
  return m.student == m.teacher && committee_lanes_activation(m.student) && m.student != Activation::Relu &&
         m.K <= kLaneMaxUnits && m.M <= kLaneMaxUnits && !m.target && opt.schedule.identity();
}

IntegrateResult integrate_lanes(const OdeModel& model, const double* y0, const IntegrateOptions& opt,
                                const StopRule& stop) {
  validate_model(model);
  IntegrateResult res;
  LaneRunner<1> runner(shape_of(model), model.student, opt);
  const OdeModel* m = &model;
  const StopRule* s = &stop;
  IntegrateResult* r = &res;
  runner.run(&m, &y0, &s, 1, &r);
  return res;
}

std::vector<IntegrateResult> integrate_batch_lanes(const std::vector<OdeModel>& models,
                                                   const std::vector<const double*>& y0s,
                                                   const IntegrateOptions& opt, const std::vector<StopRule>& stops,
                                                   int n_threads, std::atomic<std::int64_t>* finished,
                                                   RowSink* sink) {
  const std::size_t B = models.size();
  std::vector<IntegrateResult> out(B);
  // Work items: blocks of up to kBatchLanes supported members of one shape (in input order), or one other member.
  struct Item {
    std::vector<std::size_t> members;
    bool lanes;
  };
  std::vector<Item> items;
  std::map<std::tuple<int, int, bool, bool, Activation>, std::size_t> open;  // shape -> its block being filled
  for (std::size_t b = 0; b < B; ++b) {
    if (!lanes_supported(models[b], opt)) {
      items.push_back({{b}, false});
      continue;
    }
    const auto key = std::make_tuple(models[b].K, models[b].M, models[b].regime == Regime::Online,
                                     models[b].spherical, models[b].student);
    auto it = open.find(key);
    if (it == open.end() || items[it->second].members.size() == static_cast<std::size_t>(kBatchLanes)) {
      open[key] = items.size();
      items.push_back({{b}, true});
    } else {
      items[it->second].members.push_back(b);
    }
  }
  std::exception_ptr error;
  std::mutex mu;
  const int threads = resolve_threads(n_threads);
  const auto count = static_cast<std::ptrdiff_t>(items.size());
  (void)threads;
#ifdef TWOLAYER_OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1 && count > 1)
#endif
  for (std::ptrdiff_t w = 0; w < count; ++w) {
    const Item& item = items[w];
    if (cancel_requested()) {  // not started: no rows
      for (std::size_t b : item.members) {
        out[b].status = "interrupted";
        out[b].stop_time = 0.0;
        out[b].message = "interrupted before it started";
      }
      continue;
    }
    try {
      if (!item.lanes) {
        const std::size_t b = item.members[0];
        out[b] = integrate(models[b], y0s[b], opt, stops[b], 1);
        if (sink) {  // its rows, recorded by the one-system path, handed over
          IntegrateResult& r = out[b];
          const std::size_t n = models[b].state_size();
          for (std::size_t i = 0; i < r.t.size(); ++i) sink->row(b, r.t[i], r.y.data() + i * n, r.risk[i]);
          r.t = {};
          r.y = {};
          r.risk = {};
        }
      } else {
        const OdeModel* ms[kBatchLanes];
        const double* ys[kBatchLanes];
        const StopRule* ss[kBatchLanes];
        IntegrateResult* rs[kBatchLanes];
        const int cnt = static_cast<int>(item.members.size());
        for (int l = 0; l < cnt; ++l) {
          const std::size_t b = item.members[l];
          ms[l] = &models[b];
          ys[l] = y0s[b];
          ss[l] = &stops[b];
          rs[l] = &out[b];
        }
        LaneRunner<kBatchLanes> runner(shape_of(models[item.members[0]]), models[item.members[0]].student, opt);
        runner.run(ms, ys, ss, cnt, rs, sink, item.members.data());
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
    }
    if (finished) finished->fetch_add(static_cast<std::int64_t>(item.members.size()), std::memory_order_relaxed);
  }
  if (error) std::rethrow_exception(error);
  return out;
}

}  // namespace twolayer

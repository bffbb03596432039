// The entry points of the order-parameter integrators (integrators.hpp): options checked once, then each system to
// the step-unit flow (step_flow.cpp), the SIMD committee lanes (batch_integrators.cpp) or OdeRhs as the one lane of
// the integrator driver (lane_driver.hpp); a batch in blocks of lanes and single members, OpenMP across them.
// Compiled with -ffp-contract=off like every file that includes the driver (CMakeLists.txt).
#include "twolayer/integrators.hpp"

#include <cmath>
#include <exception>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>

#include "lane_driver.hpp"
#include "twolayer/batch_integrators.hpp"
#include "twolayer/cancel.hpp"
#include "twolayer/divergence.hpp"
#include "twolayer/format.hpp"
#include "twolayer/parallel.hpp"
#include "twolayer/run_messages.hpp"
#include "twolayer/step_flow.hpp"

namespace twolayer {

const char* state_error(const OdeRhs& f, const double* y, double bound, std::vector<double>& s) {
  const OdeModel& m = f.model();
  s.resize(static_cast<std::size_t>(m.K + m.M) * (m.K + m.M));
  return divergence_message(divergence_code(y, m.K, m.M, m.P.data(), bound, s.data()));
}

namespace {

// One system's right-hand side (OdeRhs: any model, schedules, targets, threads inside the right-hand side) as the
// one lane of the integrator driver (lane_driver.hpp).
class OneSystem {
 public:
  static constexpr int kLanes = 1;
  // rtol, atol: the divergence rule's (IntegrateOptions::psd_rtol, psd_atol)
  OneSystem(const OdeModel& m, int threads, double rtol, double atol)
      : f_(m), threads_(threads), rtol_(rtol), atol_(atol), scratch_(omega_size(m)) {}
  std::size_t state_size() const { return f_.model().state_size(); }
  void load(int, const OdeModel&) {}
  void set_rate(int, double s) { f_.set_rate(s); }
  void rhs(const double* y, double* dy) { f_(y, dy, threads_); }
  double risk(int, const double* x) const { return f_.risk(x); }
  void risk_all(const double* y, double* r) const { r[0] = f_.risk(y); }
  void check(const double* y, const double* bound, int* code) {
    const OdeModel& m = f_.model();
    code[0] = divergence_code(y, m.K, m.M, m.P.data(), bound[0], scratch_.data(), rtol_, atol_);
    if (code[0] == kStateOk && m.biased)  // rules 1 and 2 on the biases too
      for (std::size_t i = m.offset_b(); i < m.state_size() && code[0] == kStateOk; ++i)
        code[0] = !std::isfinite(y[i]) ? kNotFinite : std::fabs(y[i]) > bound[0] ? kGrew : kStateOk;
  }

 private:
  static std::size_t omega_size(const OdeModel& m) { return static_cast<std::size_t>(m.K + m.M) * (m.K + m.M); }
  OdeRhs f_;
  int threads_;
  double rtol_, atol_;
  std::vector<double> scratch_;
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
  IntegrateResult res;
  OneSystem f(model, n_threads, opt.psd_rtol(), opt.psd_atol());
  LaneDriver<OneSystem> driver(f, opt);
  const OdeModel* m = &model;
  const StopRule* s = &stop;
  IntegrateResult* r = &res;
  driver.run(&m, &y0, &s, 1, &r);
  return res;
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
  const std::vector<StopRule> same(stops.empty() ? models.size() : 0, opt.stop);
  const std::vector<StopRule>& rules = stops.empty() ? same : stops;
  const std::size_t B = models.size();
  std::vector<IntegrateResult> out(B);
  // Work items: blocks of up to kBatchLanes lane-supported members of one shape (in input order), or one other
  // member (integrate()).
  struct Item {
    std::vector<std::size_t> members;
    bool lanes;
  };
  std::vector<Item> items;
  std::map<std::tuple<int, int, bool, bool, Activation, Activation, bool>, std::size_t> open;  // shape -> its block
  for (std::size_t b = 0; b < B; ++b) {
    if (!lanes_supported(models[b], opt)) {
      items.push_back({{b}, false});
      continue;
    }
    const auto key = std::make_tuple(models[b].K, models[b].M, models[b].regime == Regime::Online,
                                     models[b].spherical, models[b].student, models[b].teacher, models[b].biased);
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
        out[b].message = kNotStartedMessage;
      }
      continue;
    }
    try {
      if (!item.lanes) {
        const std::size_t b = item.members[0];
        out[b] = integrate(models[b], y0s[b], opt, rules[b], 1);
        if (sink) {  // its rows, recorded in its result, handed over
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
          ss[l] = &rules[b];
          rs[l] = &out[b];
        }
        integrate_lane_block(ms, ys, ss, cnt, opt, rs, sink, item.members.data());  // batch_integrators.cpp
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

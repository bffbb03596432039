// Learning-rate schedules: a dimensionless multiplier s(t) >= 0 of the learning rates, lr(t) = lr s(t) and
// lr_readout(t) = lr_readout s(t), shared by every engine (population descent, the ODE integrators, SGD). The
// Python side (twolayer/schedules.py) builds the one representation below; each engine evaluates it at its own
// time: iterations for population descent, t = steps / d for SGD (step n uses s(n / d)) and the ODE (continuous t).
//
// With u = max(t - start, 0):
//   constant:      s = value
//   step:          s = value gamma^floor(u / every)          (step decay)
//   geometric:     s = value gamma^(u / every)               (continuous exponential decay)
//   inverse_time:  s = value / (1 + u / every)               (Saad-Solla annealing, every = t0)
//   table:         values on t_j = j dt, "previous" (s = table[floor(t / dt)]) or linear interpolation, the end
//                  values held outside; per_step tables are indexed by the engine's step counter (no dt), so an
//                  array given per SGD step or per iteration is used exactly (the ODE has no steps: refused).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <vector>

namespace twolayer {

struct Schedule {
  enum class Kind : int { Constant = 0, Step = 1, Geometric = 2, InverseTime = 3, Table = 4 };
  Kind kind = Kind::Constant;
  double value = 1.0, gamma = 1.0, every = 1.0, start = 0.0, dt = 1.0;
  bool linear = false, per_step = false;
  std::vector<double> table;

  // The constant multiplier 1: the engines then take their schedule-free path (bitwise today's results).
  bool identity() const { return kind == Kind::Constant && value == 1.0; }

  void validate() const {
    auto finite_nonneg = [](double x) { return std::isfinite(x) && x >= 0.0; };
    if (!finite_nonneg(value)) throw std::invalid_argument("schedule.value: expected a finite number >= 0");
    if (!finite_nonneg(gamma)) throw std::invalid_argument("schedule.gamma: expected a finite number >= 0");
    if (!(std::isfinite(every) && every > 0.0)) throw std::invalid_argument("schedule.every: expected a number > 0");
    if (!finite_nonneg(start)) throw std::invalid_argument("schedule.start: expected a finite number >= 0");
    if (kind == Kind::Table) {
      if (table.empty()) throw std::invalid_argument("schedule.table: expected at least one value");
      for (double x : table)
        if (!finite_nonneg(x)) throw std::invalid_argument("schedule.table: expected finite values >= 0");
      if (!per_step && !(std::isfinite(dt) && dt > 0.0)) throw std::invalid_argument("schedule.dt: expected > 0");
    }
  }

  // s at continuous time t (not for per_step tables).
  double operator()(double t) const {
    const double u = std::max(t - start, 0.0);
    switch (kind) {
      case Kind::Constant:
        return value;
      case Kind::Step:
        return value * std::pow(gamma, std::floor(u / every));
      case Kind::Geometric:
        return value * std::pow(gamma, u / every);
      case Kind::InverseTime:
        return value / (1.0 + u / every);
      case Kind::Table:
        break;
    }
    const std::size_t n = table.size();
    const double x = std::max(t, 0.0) / dt;
    if (!(x < static_cast<double>(n - 1))) return table[n - 1];
    const auto j = static_cast<std::size_t>(x);
    if (!linear) return table[j];
    const double f = x - static_cast<double>(j);
    return table[j] + f * (table[j + 1] - table[j]);
  }

  // s at step `step` of an engine whose steps last `step_time` (1 for iterations, 1 / d for SGD).
  double at_step(long long step, double step_time) const {
    if (kind == Kind::Table && per_step) {
      const auto j = static_cast<std::size_t>(std::max(step, 0LL));
      return table[std::min(j, table.size() - 1)];
    }
    return (*this)(static_cast<double>(step) * step_time);
  }

  // Piecewise constant in t (step decay, "previous" tables): then s is constant between jumps.
  bool piecewise_constant() const {
    return kind == Kind::Step || (kind == Kind::Table && !linear) || kind == Kind::Constant;
  }

  // The first time > t where s(t) jumps (step kinds, "previous" tables), +inf when there is none: the adaptive
  // ODE integrator ends its steps there, so that a jump never falls inside a step.
  double next_jump(double t) const {
    const double inf = std::numeric_limits<double>::infinity();
    if (kind == Kind::Step && gamma != 1.0) {
      if (t < start) return start + every;
      const double k = std::floor((t - start) / every) + 1.0;
      double tj = start + k * every;
      if (!(tj > t)) tj = start + (k + 1.0) * every;
      return tj;
    }
    if (kind == Kind::Table && !linear && !per_step) {  // the next entry whose value differs
      const double x = std::floor(std::max(t, 0.0) / dt);
      if (!(x < static_cast<double>(table.size() - 1))) return inf;
      auto k = static_cast<std::size_t>(x) + 1;
      if (!(static_cast<double>(k) * dt > t)) ++k;  // t rounded onto a grid point
      while (k < table.size() && table[k] == table[k - 1]) ++k;
      return k < table.size() ? static_cast<double>(k) * dt : inf;
    }
    return inf;
  }
};

}  // namespace twolayer

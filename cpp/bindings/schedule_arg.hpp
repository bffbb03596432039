// The learning-rate schedule argument of the engines' bindings: None (no schedule) or the tuple
// (kind, value, gamma, every, start, dt, linear, per_step, table) built by twolayer.schedules.Schedule._core().
#pragma once
#include <stdexcept>

#include "common.hpp"
#include "twolayer/schedule.hpp"

namespace twolayer::bind {

inline Schedule schedule_arg(const py::object& o) {
  Schedule s;
  if (o.is_none()) return s;
  const auto t = o.cast<py::tuple>();
  if (t.size() != 9) throw std::invalid_argument("schedule: expected a twolayer.schedules.Schedule");
  const int kind = t[0].cast<int>();
  if (kind < 0 || kind > 4) throw std::invalid_argument("schedule: unknown kind");
  s.kind = static_cast<Schedule::Kind>(kind);
  s.value = t[1].cast<double>();
  s.gamma = t[2].cast<double>();
  s.every = t[3].cast<double>();
  s.start = t[4].cast<double>();
  s.dt = t[5].cast<double>();
  s.linear = t[6].cast<bool>();
  s.per_step = t[7].cast<bool>();
  const Array table = t[8].cast<Array>();
  s.table.assign(table.data(), table.data() + table.size());
  s.validate();
  return s;
}

}  // namespace twolayer::bind

// Progress counters for long loops: a thread adds its finished steps to a shared counter (read by the binding's
// progress bar) at most every few milliseconds of wall time, whatever one step costs (a clock poll per call, and
// only when there is a counter), so that the counter is neither contended by cheap steps nor stale for long ones.
#pragma once
#include <atomic>
#include <chrono>

namespace twolayer {

class ProgressReporter {
 public:
  explicit ProgressReporter(std::atomic<long long>* counter) noexcept : counter_(counter) {}
  ~ProgressReporter() { flush(); }
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  // Counts `steps` more finished steps.
  void add(long long steps) noexcept {
    if (!counter_) return;
    pending_ += steps;
    const auto now = Clock::now();
    if (now >= next_) {
      flush();
      next_ = now + kPeriod;
    }
  }
  // Publishes the steps counted so far.
  void flush() noexcept {
    if (counter_ && pending_ != 0) counter_->fetch_add(pending_, std::memory_order_relaxed);
    pending_ = 0;
  }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kPeriod{5};
  std::atomic<long long>* counter_;
  long long pending_ = 0;
  Clock::time_point next_{};
};

}  // namespace twolayer

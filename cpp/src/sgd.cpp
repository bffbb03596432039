// Finite-d SGD simulator (see sgd.hpp). One run = one thread; OpenMP across runs.
#include "twolayer/sgd.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "twolayer/cancel.hpp"
#include "twolayer/cuda.hpp"
#include "twolayer/divergence.hpp"
#include "twolayer/memory.hpp"
#include "twolayer/parallel.hpp"
#include "twolayer/population.hpp"
#include "twolayer/rng.hpp"
#include "twolayer/sgd_sample.hpp"
#include "twolayer/target.hpp"

namespace twolayer {

namespace {

// out[r] = rows[r] . x for R rows at once (x read once per 8 entries; 8 independent accumulators per row).
// The summation order is fixed, so the result does not depend on anything but the inputs.
template <int R>
inline void dot_rows(const double* const* rows, const double* x, int d, double* out) {
  double acc[R][8] = {};
  int c = 0;
  for (; c + 8 <= d; c += 8)
    for (int r = 0; r < R; ++r) {
      const double* w = rows[r] + c;
#pragma omp simd
      for (int j = 0; j < 8; ++j) acc[r][j] += w[j] * x[c + j];
    }
  for (int r = 0; r < R; ++r) {
    double s = ((acc[r][0] + acc[r][4]) + (acc[r][1] + acc[r][5])) + ((acc[r][2] + acc[r][6]) + (acc[r][3] + acc[r][7]));
    for (int k = c; k < d; ++k) s += rows[r][k] * x[k];
    out[r] = s;
  }
}

void dots(const double* const* rows, int n, const double* x, int d, double* out) {
  int r = 0;
  for (; r + 4 <= n; r += 4) dot_rows<4>(rows + r, x, d, out + r);
  if (n - r == 3) dot_rows<3>(rows + r, x, d, out + r);
  if (n - r == 2) dot_rows<2>(rows + r, x, d, out + r);
  if (n - r == 1) dot_rows<1>(rows + r, x, d, out + r);
}

// The exact excess risk of the overlaps (Q, M, a) and, in a run with biases, the student's biases b and the teacher's
// bt (null: none): the committee's (population.hpp, the kernels with means when biased) or the polynomial target's
// (target.hpp, with the biases).
double excess_risk(const SgdSpec& sp, const double* Q, const double* Mo, const double* a, const double* P,
                   const double* v, const double* b = nullptr, const double* bt = nullptr) {
  if (sp.target) return target_risk(*sp.target, Q, Mo, a, sp.K, sp.student, b);
  if (b || bt) return overlap_risk_mean(Q, Mo, P, a, v, b, bt, sp.K, sp.M, sp.student, sp.teacher);
  return overlap_risk(Q, Mo, P, a, v, sp.K, sp.M, sp.student, sp.teacher);
}

// The early-stop threshold of a run (sgd.hpp) from its tolerances; risk0() is its excess risk at step 0, asked only
// when risk_rtol is on.
template <class Risk0>
double early_stop_threshold(const SgdRun& rp, Risk0&& risk0) {
  double threshold = -std::numeric_limits<double>::infinity();
  if (rp.risk_tol >= 0.0) threshold = rp.risk_tol;
  if (rp.risk_rtol >= 0.0) threshold = std::max(threshold, rp.risk_rtol * risk0());
  return threshold;
}

// Appends the row (Q, M, a, risk, and the biases b when given and kept) of record step `step` to out; true (status
// converged, stop step and the interpolated stop_time set) when the risk is below the threshold.
bool record_row(const SgdSpec& sp, double threshold, long long step, const double* Q, const double* Mo,
                const double* a, double r, SgdOut& out, const double* b = nullptr) {
  const std::size_t t = out.recorded;
  const std::size_t K = static_cast<std::size_t>(sp.K), M = static_cast<std::size_t>(sp.M);
  std::copy(Q, Q + K * K, out.Q + t * K * K);
  std::copy(Mo, Mo + K * M, out.M + t * K * M);
  std::copy(a, a + K, out.a + t * K);
  if (b && out.bias) std::copy(b, b + K, out.bias + t * K);
  out.risk[t] = r;
  out.recorded = t + 1;
  if (!(r < threshold)) return false;
  out.status = 3;
  out.stop_step = step;
  double at = static_cast<double>(step);
  if (t > 0) {  // the previous record is at or above the threshold, this one below: interpolate linearly
    const double prev = static_cast<double>(sp.record_steps[t - 1]), r_prev = out.risk[t - 1];
    at = prev + (at - prev) * ((r_prev - threshold) / (r_prev - r));
  }
  out.stop_time = at / sp.d;
  return true;
}

// A run's fields before it starts (and the state of one that never starts when cancelled: interrupted at step 0).
void reset_out(SgdOut& o) {
  o.recorded = 0;
  o.status = 0;
  o.stop_step = -1;
  o.reason = 0;
  o.stop_time = std::numeric_limits<double>::quiet_NaN();
}
void stop_out(SgdOut& o, int status, long long step, int reason, int d) {
  o.status = status;
  o.stop_step = step;
  o.reason = reason;
  o.stop_time = static_cast<double>(step) / d;
}

// The divergence rule's rules 1 and 2 for the K biases b of a run with biases (0: they are fine).
int bias_divergence_code(const double* b, int K, double bound) {
  for (int i = 0; i < K; ++i) {
    if (!std::isfinite(b[i])) return kNotFinite;
    if (std::fabs(b[i]) > bound) return kGrew;
  }
  return kStateOk;
}

// A run's divergence bound (divergence.hpp) from its start state (Q, M, a) and, with biases, its biases b and the
// teacher's bt (null: none).
double run_bound(const double* y0, int K, int M, const double* P, const double* v, const double* b, const double* bt) {
  const std::size_t n = static_cast<std::size_t>(K) * (K + M + 1), MM = static_cast<std::size_t>(M) * M;
  double bound = divergence_bound(y0, n, P, MM, v, static_cast<std::size_t>(M));
  if (b)
    bound = std::max(bound, divergence_bound(b, static_cast<std::size_t>(K), bt, bt ? static_cast<std::size_t>(M) : 0,
                                             nullptr, 0));
  return bound;
}

// Thrown where a run breaks the divergence rule (divergence.hpp): the step and the DivergenceCode.
struct Diverged {
  long long step;
  int code;
};

class Run {
 public:
  Run(const SgdSpec& sp, const SgdRun& rp, const double* W0, const double* a0, const double* Wt, const double* v,
      const double* P, SgdOut& out, const double* b0, const double* bt)
      : sp_(sp), rp_(rp), K_(sp.K), M_(sp.M), d_(sp.d), Wt_(Wt), v_(v), P_(P), bt_(bt), out_(out),
        W_(W0, W0 + static_cast<std::size_t>(sp.K) * sp.d), a_(a0, a0 + sp.K),
        inputs_{sp.seed, rp.id, rng::kInputs}, noise_{sp.seed, rp.id, rng::kLabelNoise},
        train_x_{sp.seed, rp.id, rng::kTrainInputs}, train_noise_{sp.seed, rp.id, rng::kTrainNoise},
        shuffle_{sp.seed, rp.id, rng::kShuffle} {
    inv_sqrt_s_ = 1.0 / std::sqrt(sp.scale);
    const double B = sp.batch;
    gw_ = sp.train_first ? rp.lr * std::sqrt(sp.scale) / (sp.d * B) : 0.0;
    ga_ = rp.lr_readout / (sp.d * B);
    gw0_ = gw_;
    ga0_ = ga_;
    biased_ = b0 || bt;
    if (biased_) {  // the student's biases (zeros when only the teacher has some), and their step factor
      b_.assign(static_cast<std::size_t>(K_), 0.0);
      if (b0) std::copy(b0, b0 + K_, b_.begin());
      bp_ = b_.data();
      db_.assign(static_cast<std::size_t>(K_), 0.0);
      gb_ = gb0_ = rp.lr_bias / (sp.d * B);
    }
    scheduled_ = !sp.schedule.identity();
    sqrt_noise_ = std::sqrt(rp.noise);
    has_noise_ = rp.noise > 0.0;
    norms_.assign(K_, 0.0);
    for (int i = 0; i < K_; ++i) {
      const double* w = W_.data() + static_cast<std::size_t>(i) * d_;
      double n = 0.0;
      for (int c = 0; c < d_; ++c) n += w[c] * w[c];
      norms_[i] = n;
    }
    if (sp.spherical) project();
    // Rows for the fused dot products: student units, then (online) teacher units, then (spherical, B = 1) x.
    for (int i = 0; i < K_; ++i) rows_.push_back(W_.data() + static_cast<std::size_t>(i) * d_);
    online_ = sp.n_samples == 0;
    if (online_)
      for (int r = 0; r < M_; ++r) rows_.push_back(Wt_ + static_cast<std::size_t>(r) * d_);
    fused_sphere_ = sp.spherical && sp.batch == 1;
    n_dot_ = static_cast<int>(rows_.size()) + (fused_sphere_ ? 1 : 0);
    rows_.push_back(nullptr);  // slot for x
    lam_.assign(n_dot_, 0.0);
    sig_.assign(K_, 0.0);
    lam_next_.assign(K_, 0.0);
    cw_.assign(static_cast<std::size_t>(K_) * sp.batch, 0.0);
    da_.assign(K_, 0.0);
    xrow_.assign(sp.batch, nullptr);
    if (online_) {
      steps_per_chunk_ = std::max<long long>(sp.batch == 1 ? 2 : 1, 8192 / (static_cast<long long>(sp.batch) * d_));
      // one spare row: the single-sample path keeps the next step's input in the buffer
      xbuf_.assign(static_cast<std::size_t>(steps_per_chunk_ + 1) * sp.batch * d_, 0.0);
      nbuf_.assign(static_cast<std::size_t>(steps_per_chunk_ + 1) * sp.batch, 0.0);
    } else {
      make_training_set();
    }
    Q_.assign(static_cast<std::size_t>(K_) * K_, 0.0);
    Mo_.assign(static_cast<std::size_t>(K_) * M_, 0.0);
    state_.assign(static_cast<std::size_t>(K_) * (K_ + M_ + 1), 0.0);
    scratch_.assign(static_cast<std::size_t>(K_ + M_) * (K_ + M_), 0.0);
    overlaps();  // the start's state, whose scale sets the run's divergence bound
    bound_ = run_bound(state_.data(), K_, M_, P_, v_, bp_, bt_);
  }

  void go(std::atomic<long long>* progress) {
    long long reported = 0;
    const auto& rec = sp_.record_steps;
    std::size_t next = 0;
    long long step = 0;
    try {
      threshold_ = early_stop_threshold(rp_, [this] { return risk_now(0); });
      for (; step <= sp_.steps; ++step) {
        if (next < rec.size() && rec[next] == step) {
          ++next;
          if (record(step)) break;  // early stop
        }
        if (step == sp_.steps) break;
        if (step % d_ == 0) check(step);  // the divergence rule once per unit of time between records too
        if (cancel_requested()) {
          out_.status = 2;
          out_.stop_step = step;
          break;
        }
        if (scheduled_) {  // the learning rates of step n: lr s(n / d), lr_readout s(n / d)
          const double rate = sp_.schedule.at_step(step, 1.0 / d_);
          gw_ = gw0_ * rate;
          ga_ = ga0_ * rate;
          gb_ = gb0_ * rate;
        }
        do_step(step);
        if (progress && ((step + 1) & 4095) == 0) {
          progress->fetch_add(step + 1 - reported, std::memory_order_relaxed);
          reported = step + 1;
        }
      }
    } catch (const Diverged& e) {
      out_.status = 1;
      out_.stop_step = e.step;
      out_.reason = e.code;
    } catch (const Interrupted&) {  // Ctrl-C seen by a helper (gram's parallel loop): the rows so far are kept
      out_.status = 2;
      out_.stop_step = step;
    }
    if (out_.status == 0) out_.stop_time = std::numeric_limits<double>::quiet_NaN();
    else if (out_.status != 3) out_.stop_time = static_cast<double>(out_.stop_step) / d_;
    if (progress) progress->fetch_add(sp_.steps - reported, std::memory_order_relaxed);
    if (out_.W) std::copy(W_.begin(), W_.end(), out_.W);
    if (out_.a_final) std::copy(a_.begin(), a_.end(), out_.a_final);
    if (out_.b_final) std::copy(b_.begin(), b_.end(), out_.b_final);
  }

 private:
  const SgdSpec& sp_;
  const SgdRun& rp_;
  int K_, M_, d_;
  const double *Wt_, *v_, *P_;
  const double* bt_;  // the teacher's biases (null: none)
  SgdOut& out_;
  std::vector<double> W_, a_, norms_;
  bool biased_ = false;     // a run with biases (student's, teacher's or both)
  std::vector<double> b_;   // the student's biases (empty without)
  std::vector<double> db_;  // their change over a batch
  const double* bp_ = nullptr;  // b_.data() with biases, else null (the per-sample functions skip the + b)
  double gb_ = 0.0, gb0_ = 0.0;  // lr_bias / (d B), scheduled and not
  rng::StreamId inputs_, noise_, train_x_, train_noise_, shuffle_;
  double inv_sqrt_s_, gw_, ga_, sqrt_noise_;
  double gw0_ = 0.0, ga0_ = 0.0;  // the unscheduled step factors (gw_, ga_ = these times s(n / d))
  bool scheduled_ = false;
  bool has_noise_ = false;
  double threshold_ = -std::numeric_limits<double>::infinity();  // early stop below this recorded risk
  std::vector<const double*> rows_;
  bool online_ = true, fused_sphere_ = false;
  int n_dot_ = 0;
  std::vector<double> lam_, cw_, da_, sig_, lam_next_;
  bool have_lam_ = false;  // lam_[0, K) already holds the student dots of the current step's input (fused path)
  std::vector<const double*> xrow_;  // the rows of the current batch
  long long step_ = 0;
  // online
  long long steps_per_chunk_ = 1, chunk_first_ = -1;
  std::vector<double> xbuf_, nbuf_;
  // training set
  std::vector<double> X_, y_;
  std::vector<std::size_t> perm_;
  long long epoch_ = -1;
  std::vector<double> Q_, Mo_;
  std::vector<double> state_, scratch_;  // (Q, M, a) of the last check, and divergence_code's workspace
  double bound_ = 0.0;                   // the run's divergence bound (divergence.hpp)

  void project() {
    for (int i = 0; i < K_; ++i) {
      if (!(norms_[i] > 0.0) || !std::isfinite(norms_[i])) throw Diverged{step_, kNotFinite};
      double* w = W_.data() + static_cast<std::size_t>(i) * d_;
      const double r = std::sqrt(sp_.scale / norms_[i]);
      double n = 0.0;
      for (int c = 0; c < d_; ++c) {
        w[c] *= r;
        n += w[c] * w[c];
      }
      norms_[i] = n;
    }
  }

  // f = sum_i a_i sigma(l_i) from the raw dots in lam_; keeps sigma(l_i) in sig_.
  double output() {
    return sgd_output(sp_.student, lam_.data(), a_.data(), K_, inv_sqrt_s_, sig_.data(), bp_);
  }

  double teacher_label(const double* lam_t, double xi) const {
    if (sp_.target) {
      double z[16];
      std::vector<double> heap;
      double* zp = z;
      if (M_ > 16) {
        heap.resize(static_cast<std::size_t>(M_));
        zp = heap.data();
      }
      for (int r = 0; r < M_; ++r) zp[r] = lam_t[r] * inv_sqrt_s_;
      return sp_.target->eval(zp) + sqrt_noise_ * xi;
    }
    return sgd_committee_label(sp_.teacher, lam_t, v_, M_, inv_sqrt_s_, sqrt_noise_, xi, bt_);
  }

  void make_training_set() {
    const long long n = sp_.n_samples;
    check_buffer(static_cast<std::size_t>(n) * d_, "the training set (n_samples x d inputs)");
    X_.resize(static_cast<std::size_t>(n) * d_);
    y_.resize(static_cast<std::size_t>(n));
    rng::gaussians(train_x_, 0, X_.size(), X_.data());
    std::vector<double> xi(static_cast<std::size_t>(n), 0.0);
    if (has_noise_) rng::gaussians(train_noise_, 0, xi.size(), xi.data());
    std::vector<const double*> trows;
    for (int r = 0; r < M_; ++r) trows.push_back(Wt_ + static_cast<std::size_t>(r) * d_);
    std::vector<double> lt(M_);
    for (long long k = 0; k < n; ++k) {
      dots(trows.data(), M_, X_.data() + static_cast<std::size_t>(k) * d_, d_, lt.data());
      y_[k] = teacher_label(lt.data(), xi[k]);
    }
    perm_.resize(static_cast<std::size_t>(n));
    std::iota(perm_.begin(), perm_.end(), std::size_t{0});
  }

  // Sample index of position p in the sequence of epochs.
  std::size_t train_index(long long p) {
    const long long n = sp_.n_samples;
    const long long e = p / n, i = p % n;
    if (!sp_.shuffle || sp_.batch == n) return static_cast<std::size_t>(i);
    if (e != epoch_) {  // Fisher-Yates from the (run, epoch) shuffle stream
      std::iota(perm_.begin(), perm_.end(), std::size_t{0});
      for (long long k = n - 1; k > 0; --k) {
        const auto j = rng::bounded(shuffle_, (static_cast<std::uint64_t>(e) << 32) | static_cast<std::uint64_t>(k),
                                    static_cast<std::uint64_t>(k + 1));
        std::swap(perm_[k], perm_[j]);
      }
      epoch_ = e;
    }
    return perm_[static_cast<std::size_t>(i)];
  }

  void fill_chunk(long long step) {
    const long long first = step, count = std::min(steps_per_chunk_, sp_.steps - step);
    const auto B = static_cast<std::uint64_t>(sp_.batch);
    const auto rows = static_cast<std::size_t>(count) * B;
    rng::gaussians(inputs_, static_cast<std::uint64_t>(first) * B * static_cast<std::uint64_t>(d_),
                   rows * static_cast<std::size_t>(d_), xbuf_.data());
    if (has_noise_) rng::gaussians(noise_, static_cast<std::uint64_t>(first) * B, rows, nbuf_.data());
    chunk_first_ = first;
  }

  // Online, one sample per step: the update pass over w_i also forms w_i(new) . x_next, the student dots of the
  // next step, so W is read once per step. Rows [chunk_first_, chunk_first_ + steps_per_chunk_] are in xbuf_ (one
  // more than a chunk: the next step's input is always there).
  void ensure_rows(long long step) {
    const long long n = steps_per_chunk_;
    const std::size_t dd = static_cast<std::size_t>(d_);
    long long first_new;
    double* dst;
    if (chunk_first_ >= 0 && step == chunk_first_ + n) {  // keep the row we have, generate the rest
      std::copy(xbuf_.begin() + static_cast<std::ptrdiff_t>(n * d_), xbuf_.begin() + static_cast<std::ptrdiff_t>((n + 1) * d_),
                xbuf_.begin());
      if (has_noise_) nbuf_[0] = nbuf_[static_cast<std::size_t>(n)];
      first_new = step + 1;
      dst = xbuf_.data() + dd;
    } else if (chunk_first_ < 0 || step < chunk_first_ || step > chunk_first_ + n) {
      first_new = step;
      dst = xbuf_.data();
    } else {
      return;
    }
    const long long count = step + n + 1 - first_new;
    rng::gaussians(inputs_, static_cast<std::uint64_t>(first_new) * dd, static_cast<std::size_t>(count) * dd, dst);
    if (has_noise_)
      rng::gaussians(noise_, static_cast<std::uint64_t>(first_new), static_cast<std::size_t>(count),
                     nbuf_.data() + (first_new - step));
    chunk_first_ = step;
  }

  void step_online_single(long long step) {
    ensure_rows(step);
    const std::size_t row = static_cast<std::size_t>(step - chunk_first_);
    const double* x = xbuf_.data() + row * d_;
    const bool has_next = step + 1 < sp_.steps && gw_ != 0.0;
    const double* xn = has_next ? x + d_ : nullptr;
    // teacher dots (and |x|^2 for the sphere) always; student dots only if the last pass did not form them
    rows_.back() = x;
    if (have_lam_) dots(rows_.data() + K_, n_dot_ - K_, x, d_, lam_.data() + K_);
    else dots(rows_.data(), n_dot_, x, d_, lam_.data());
    const double y = teacher_label(lam_.data() + K_, has_noise_ ? nbuf_[row] : 0.0);
    const double E = y - output();
    if (!sgd_error_ok(E, sp_.blowup)) throw Diverged{step, kSampleOverflow};
    const double xx = fused_sphere_ ? lam_[n_dot_ - 1] : 0.0;
    for (int i = 0; i < K_; ++i) {
      const double c = sgd_weight_coef(sp_.student, gw_, a_[i], lam_[i], inv_sqrt_s_, E, bp_, i);
      const double db = gb_ != 0.0 ? sgd_weight_coef(sp_.student, gb_, a_[i], lam_[i], inv_sqrt_s_, E, bp_, i) : 0.0;
      if (ga_ != 0.0) a_[i] += sgd_readout_step(ga_, sig_[i], E);
      if (gb_ != 0.0) b_[i] += db;
      if (gw_ == 0.0) continue;
      double r = 1.0, rc = c;
      if (fused_sphere_) {
        // |w + c x|^2 = |w|^2 + 2 c w.x + c^2 |x|^2; then w <- r (w + c x), r = sqrt(s / that)
        const double n_new = sgd_sphere_norm(norms_[i], c, lam_[i], xx);
        if (!sgd_sphere_ok(n_new)) throw Diverged{step, kNotFinite};
        r = std::sqrt(sp_.scale / n_new);
        rc = r * c;
      }
      update_and_dot(W_.data() + static_cast<std::size_t>(i) * d_, x, xn, r, rc, i);
    }
    have_lam_ = has_next;
    if (has_next) std::copy(lam_next_.begin(), lam_next_.end(), lam_.begin());
  }

  // w <- r w + rc x (r = 1 off the sphere); accumulates |w|^2 (sphere) and w . xn (into lam_next_[i]) if xn.
  void update_and_dot(double* w, const double* x, const double* xn, double r, double rc, int i) {
    double acc[8] = {}, nn[8] = {};
    int k = 0;
    if (fused_sphere_) {
      if (xn) {
        for (; k + 8 <= d_; k += 8)
#pragma omp simd
          for (int j = 0; j < 8; ++j) {
            const double u = r * w[k + j] + rc * x[k + j];
            w[k + j] = u;
            nn[j] += u * u;
            acc[j] += u * xn[k + j];
          }
      } else {
        for (; k + 8 <= d_; k += 8)
#pragma omp simd
          for (int j = 0; j < 8; ++j) {
            const double u = r * w[k + j] + rc * x[k + j];
            w[k + j] = u;
            nn[j] += u * u;
          }
      }
    } else if (xn) {
      for (; k + 8 <= d_; k += 8)
#pragma omp simd
        for (int j = 0; j < 8; ++j) {
          const double u = w[k + j] + rc * x[k + j];
          w[k + j] = u;
          acc[j] += u * xn[k + j];
        }
    } else {
      for (; k + 8 <= d_; k += 8)
#pragma omp simd
        for (int j = 0; j < 8; ++j) w[k + j] += rc * x[k + j];
    }
    double a8 = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    double n8 = ((nn[0] + nn[4]) + (nn[1] + nn[5])) + ((nn[2] + nn[6]) + (nn[3] + nn[7]));
    for (; k < d_; ++k) {
      const double u = fused_sphere_ ? r * w[k] + rc * x[k] : w[k] + rc * x[k];
      w[k] = u;
      n8 += u * u;
      if (xn) a8 += u * xn[k];
    }
    if (fused_sphere_) norms_[i] = n8;
    if (xn) lam_next_[i] = a8;
  }

  void do_step(long long step) {
    const int B = sp_.batch;
    step_ = step;
    if (online_ && B == 1) {
      step_online_single(step);
      return;
    }
    std::fill(da_.begin(), da_.end(), 0.0);
    if (gb_ != 0.0) std::fill(db_.begin(), db_.end(), 0.0);
    if (online_ && (chunk_first_ < 0 || step >= chunk_first_ + steps_per_chunk_)) fill_chunk(step);
    for (int nu = 0; nu < B; ++nu) {
      const double* x;
      double y;
      if (online_) {
        const std::size_t row = static_cast<std::size_t>(step - chunk_first_) * B + nu;
        xrow_[nu] = x = xbuf_.data() + row * d_;
        rows_.back() = x;
        dots(rows_.data(), n_dot_, x, d_, lam_.data());
        y = teacher_label(lam_.data() + K_, has_noise_ ? nbuf_[row] : 0.0);
      } else {
        const std::size_t k = train_index(step * static_cast<long long>(B) + nu);
        xrow_[nu] = x = X_.data() + k * d_;
        rows_.back() = x;
        dots(rows_.data(), n_dot_, x, d_, lam_.data());
        y = y_[k];
      }
      const double E = y - output();
      if (!sgd_error_ok(E, sp_.blowup)) throw Diverged{step, kSampleOverflow};
      for (int i = 0; i < K_; ++i) {
        cw_[static_cast<std::size_t>(i) * B + nu] =
            sgd_weight_coef(sp_.student, gw_, a_[i], lam_[i], inv_sqrt_s_, E, bp_, i);
        if (ga_ != 0.0) da_[i] += sgd_readout_step(ga_, sig_[i], E);
        if (gb_ != 0.0) db_[i] += sgd_weight_coef(sp_.student, gb_, a_[i], lam_[i], inv_sqrt_s_, E, bp_, i);
      }
      if (B == 1) update_single(x);
      else if (nu == B - 1) update_batch();
    }
    for (int i = 0; i < K_; ++i) a_[i] += da_[i];
    if (gb_ != 0.0)
      for (int i = 0; i < K_; ++i) b_[i] += db_[i];
  }

  void update_single(const double* x) {
    if (gw_ == 0.0) return;
    const double xx = fused_sphere_ ? lam_[n_dot_ - 1] : 0.0;
    for (int i = 0; i < K_; ++i) {
      double* w = W_.data() + static_cast<std::size_t>(i) * d_;
      const double c = cw_[i];
      if (fused_sphere_) {
        // |w + c x|^2 = |w|^2 + 2 c w.x + c^2 |x|^2, then w <- r (w + c x) with r = sqrt(s / that).
        const double n_new = sgd_sphere_norm(norms_[i], c, lam_[i], xx);
        if (!sgd_sphere_ok(n_new)) throw Diverged{step_, kNotFinite};
        const double r = std::sqrt(sp_.scale / n_new), rc = r * c;
        double n = 0.0;
#pragma omp simd reduction(+ : n)
        for (int k = 0; k < d_; ++k) {
          const double u = r * w[k] + rc * x[k];
          w[k] = u;
          n += u * u;
        }
        norms_[i] = n;
      } else {
#pragma omp simd
        for (int k = 0; k < d_; ++k) w[k] += c * x[k];
      }
    }
  }

  void update_batch() {
    if (gw_ == 0.0) return;
    const int B = sp_.batch;
    for (int i = 0; i < K_; ++i) {
      double* w = W_.data() + static_cast<std::size_t>(i) * d_;
      for (int nu = 0; nu < B; ++nu) {
        const double c = cw_[static_cast<std::size_t>(i) * B + nu];
        const double* x = xrow_[nu];
#pragma omp simd
        for (int k = 0; k < d_; ++k) w[k] += c * x[k];
      }
      if (sp_.spherical) {
        double n = 0.0;
        for (int k = 0; k < d_; ++k) n += w[k] * w[k];
        norms_[i] = n;
      }
    }
    if (sp_.spherical) project();
  }

  // The overlaps of the current weights into Q_, Mo_ and state_ = (Q, M, a).
  void overlaps() {
    gram(W_.data(), K_, W_.data(), K_, d_, sp_.scale, Q_.data(), 1);
    gram(W_.data(), K_, Wt_, M_, d_, sp_.scale, Mo_.data(), 1);
    std::copy(Q_.begin(), Q_.end(), state_.begin());
    std::copy(Mo_.begin(), Mo_.end(), state_.begin() + static_cast<std::ptrdiff_t>(Q_.size()));
    std::copy(a_.begin(), a_.end(), state_.end() - K_);
  }
  // The overlaps of the current weights; throws Diverged if they break the divergence rule (divergence.hpp).
  void check(long long step) {
    overlaps();
    if (const int code = divergence_code(state_.data(), K_, M_, P_, bound_, scratch_.data())) throw Diverged{step, code};
    if (bp_)
      if (const int code = bias_divergence_code(bp_, K_, bound_)) throw Diverged{step, code};
  }
  // The overlaps (into Q_, Mo_), checked, and the exact excess risk of the current weights.
  double risk_now(long long step) {
    check(step);
    const double r = excess_risk(sp_, Q_.data(), Mo_.data(), a_.data(), P_, v_, bp_, bt_);
    if (!std::isfinite(r)) throw Diverged{step, kRiskNotFinite};
    return r;
  }

  // Records the current state; true when its risk is below the early-stop threshold (status converged).
  bool record(long long step) {
    return record_row(sp_, threshold_, step, Q_.data(), Mo_.data(), a_.data(), risk_now(step), out_, bp_);
  }
};

}  // namespace

void sgd_check(const SgdSpec& sp, const SgdRun* runs, std::size_t n_runs) {
  auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
  for (std::size_t j = 0; j < n_runs; ++j) {
    const SgdRun& r = runs[j];
    const std::string at = "[" + std::to_string(j) + "]";
    if (sp.train_first && !(r.lr > 0.0 && std::isfinite(r.lr))) bad("lr" + at + ": must be a finite number > 0");
    if (!(r.lr_readout >= 0.0 && std::isfinite(r.lr_readout)))
      bad("lr_readout" + at + ": must be a finite number >= 0");
    if (!(r.lr_bias >= 0.0 && std::isfinite(r.lr_bias))) bad("lr_bias" + at + ": must be a finite number >= 0");
    if (!(r.noise >= 0.0 && std::isfinite(r.noise))) bad("noise" + at + ": must be a finite number >= 0");
    if (!std::isfinite(r.risk_tol)) bad("risk_tol" + at + ": must be finite (< 0: off)");
    if (!std::isfinite(r.risk_rtol)) bad("risk_rtol" + at + ": must be finite (< 0: off)");
  }
  if (sp.K < 1) bad("student: needs at least one unit");
  if (sp.M < 1) bad("teacher: needs at least one unit");
  if (sp.d < 1) bad("d: must be positive");
  if (!(sp.scale > 0.0) || !std::isfinite(sp.scale)) bad("scale: must be positive");
  if (sp.batch < 1) bad("batch_size: must be >= 1");
  if (sp.n_samples < 0) bad("n_samples: must be >= 0 (0: online)");
  if (sp.n_samples > 0 && sp.batch > sp.n_samples) bad("batch_size: must not exceed n_samples");
  if (sp.n_samples >= (1ll << 32)) bad("n_samples: must be below 2^32");
  if (sp.steps < 0) bad("steps: must be >= 0");
  if (sp.train_first && sp.student == Activation::Step)
    bad("activation: the step activation has a delta derivative, so SGD cannot train the first layer");
  long long prev = -1;
  for (long long s : sp.record_steps) {
    if (s <= prev || s > sp.steps) bad("record_steps: must be strictly increasing within [0, steps]");
    prev = s;
  }
}

namespace {
// The runs' parameters against the biases given (sgd.hpp): trained biases need the student's.
void sgd_check_biases(const SgdRun* runs, std::size_t n_runs, const double* b0) {
  for (std::size_t j = 0; j < n_runs; ++j) {
    const std::string at = "[" + std::to_string(j) + "]";
    if (runs[j].lr_bias > 0.0 && !b0)
      throw std::invalid_argument("lr_bias" + at + ": trained biases need the student's biases (b0)");
  }
}
}  // namespace

void sgd_simulate(const SgdSpec& sp, const double* W0, const double* a0, std::size_t init_stride, const double* Wt,
                  const double* v, const SgdRun* runs, std::size_t n_runs, SgdOut* out, int n_threads,
                  std::atomic<long long>* progress, const double* b0, const double* bt) {
  sgd_check(sp, runs, n_runs);
  sgd_check_biases(runs, n_runs, b0);
  std::vector<double> P(static_cast<std::size_t>(sp.M) * sp.M);
  gram(Wt, sp.M, Wt, sp.M, sp.d, sp.scale, P.data(), 1);
  const std::size_t Kd = static_cast<std::size_t>(sp.K) * sp.d;
  std::exception_ptr error;
  std::mutex error_mutex;
  const int threads = resolve_threads(n_threads);
  (void)threads;
#ifdef TWOLAYER_OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1 && n_runs > 1)
#endif
  for (std::ptrdiff_t j = 0; j < static_cast<std::ptrdiff_t>(n_runs); ++j) {
    try {
      const std::size_t jj = static_cast<std::size_t>(j);
      reset_out(out[jj]);
      if (cancel_requested()) {  // not started
        stop_out(out[jj], 2, 0, 0, sp.d);
        continue;
      }
      Run run(sp, runs[jj], W0 + jj * init_stride * Kd, a0 + jj * init_stride * sp.K, Wt, v, P.data(), out[jj],
              b0 ? b0 + jj * init_stride * sp.K : nullptr, bt);
      run.go(progress);
    } catch (const Diverged& e) {  // thrown by the constructor (degenerate spherical start)
      stop_out(out[j], 1, e.step < 0 ? 0 : e.step, e.code, sp.d);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

std::string sgd_cuda_unsupported(const SgdSpec& sp) {
  const std::string pre = "device='cuda': SGD on the GPU runs online committee teachers only; ";
  if (sp.n_samples > 0) return pre + "n_samples (a fixed training set) is not supported (use device='cpu')";
  if (sp.target) return pre + "a polynomial target (HermiteTarget teacher) is not supported (use device='cpu')";
  if (is_registered(sp.student) || is_registered(sp.teacher))
    return pre + "hermite and custom activations are not supported (the GPU cannot read their tables; use "
                 "device='cpu')";
  if (!sp.schedule.identity()) return pre + "schedule (a learning-rate schedule) is not supported (use device='cpu')";
  return "";
}

#ifdef TWOLAYER_CUDA
namespace {

// Runs [0, n) on one engine (all that fit the device at once): Run::go's loop over the checkpoints (record steps and
// every d steps), each stretch between them done on the device in launches of bounded length.
void simulate_on_device(const SgdSpec& sp, const double* W0, const double* a0, std::size_t init_stride,
                        const double* Wt, const double* v, const double* P, const SgdRun* runs, std::size_t n,
                        SgdOut* out, std::atomic<long long>* progress, const double* b0, const double* bt) {
  cuda::SgdEngine eng(sp, W0, a0, init_stride, Wt, v, runs, n, b0, bt);
  const std::size_t K = static_cast<std::size_t>(sp.K), M = static_cast<std::size_t>(sp.M);
  const bool biased = b0 || bt;
  std::vector<double> bound(n), threshold(n), scratch((K + M) * (K + M));
  std::vector<char> active(n, 1);
  std::size_t n_active = n;
  auto stop = [&](std::size_t j, int status, long long step, int reason) {
    stop_out(out[j], status, step, reason, sp.d);
    active[j] = 0;
    --n_active;
    eng.deactivate(j);
    if (progress) progress->fetch_add(sp.steps - step, std::memory_order_relaxed);
  };
  auto Mo = [&](const double* y) { return y + K * K; };
  auto a = [&](const double* y) { return y + K * K + K * M; };
  auto b = [&](const double* y) { return biased ? y + K * K + K * M + K : nullptr; };  // the state row's biases
  // The rule at a checkpoint (Run::check); false when run j diverged there.
  auto check = [&](std::size_t j, long long step) {
    const double* y = eng.state(j);
    int code = divergence_code(y, sp.K, sp.M, P, bound[j], scratch.data());
    if (!code && biased) code = bias_divergence_code(b(y), sp.K, bound[j]);
    if (code) {
      stop(j, 1, step, code);
      return false;
    }
    return true;
  };
  // The rule and the exact risk (Run::risk_now, on the host from the state row); false when run j diverged there.
  auto risk = [&](std::size_t j, long long step, double* r) {
    if (!check(j, step)) return false;
    const double* y = eng.state(j);
    *r = excess_risk(sp, y, Mo(y), a(y), P, v, b(y), bt);
    if (std::isfinite(*r)) return true;
    stop(j, 1, step, kRiskNotFinite);
    return false;
  };
  for (std::size_t j = 0; j < n; ++j) {  // the starts: a degenerate spherical start diverges at step 0
    long long at = 0;
    if (const int code = eng.failure(j, &at)) {
      stop(j, 1, 0, code);
      continue;
    }
    bound[j] = run_bound(eng.state(j), sp.K, sp.M, P, v, b(eng.state(j)), bt);
    threshold[j] = early_stop_threshold(runs[j], [&] {  // a start that breaks the rule stops here (diverged)
      double r = 0.0;
      risk(j, 0, &r);
      return r;
    });
  }
  const auto& rec = sp.record_steps;
  std::size_t next = 0;
  for (long long step = 0; n_active > 0;) {
    const bool is_record = next < rec.size() && rec[next] == step;
    if (is_record) ++next;
    for (std::size_t j = 0; j < n; ++j) {
      if (!active[j]) continue;
      if (is_record) {
        double r = 0.0;
        if (!risk(j, step, &r)) continue;
        const double* y = eng.state(j);
        if (record_row(sp, threshold[j], step, y, Mo(y), a(y), r, out[j], b(y))) {  // converged: status set
          active[j] = 0;
          --n_active;
          eng.deactivate(j);
          if (progress) progress->fetch_add(sp.steps - step, std::memory_order_relaxed);
          continue;
        }
      }
      if (step < sp.steps && step % sp.d == 0) check(j, step);  // once per unit of time between records too
    }
    if (step == sp.steps || n_active == 0) break;
    if (cancel_requested()) {
      for (std::size_t j = 0; j < n; ++j)
        if (active[j]) stop(j, 2, step, 0);
      break;
    }
    // The next checkpoint (a record step, a multiple of d, the end), or less where a launch must stop sooner.
    long long to = std::min<long long>(sp.steps, (step / sp.d + 1) * static_cast<long long>(sp.d));
    if (next < rec.size()) to = std::min(to, rec[next]);
    const long long cap = eng.steps_per_launch(n_active);
    const bool at_checkpoint = to - step <= cap;
    if (!at_checkpoint) to = step + cap;
    eng.advance(step, to, at_checkpoint);
    for (std::size_t j = 0; j < n; ++j) {
      long long at = 0;
      if (!active[j]) continue;
      if (const int code = eng.failure(j, &at)) {  // diverged within a step on the device
        if (progress) progress->fetch_add(at - step, std::memory_order_relaxed);
        stop(j, 1, at, code);
      }
    }
    if (progress) progress->fetch_add((to - step) * static_cast<long long>(n_active), std::memory_order_relaxed);
    step = to;
  }
  bool with_W = false;
  for (std::size_t j = 0; j < n; ++j) with_W = with_W || out[j].W;
  eng.fetch_weights(with_W);
  for (std::size_t j = 0; j < n; ++j)
    if (out[j].a_final) eng.weights(j, out[j].W, out[j].a_final, out[j].b_final);
}

}  // namespace

void sgd_simulate_cuda(const SgdSpec& sp, const double* W0, const double* a0, std::size_t init_stride,
                       const double* Wt, const double* v, const SgdRun* runs, std::size_t n_runs, SgdOut* out,
                       std::atomic<long long>* progress, const double* b0, const double* bt) {
  sgd_check(sp, runs, n_runs);
  sgd_check_biases(runs, n_runs, b0);
  if (const std::string why = sgd_cuda_unsupported(sp); !why.empty()) throw cuda::DeviceUnavailable(why);
  std::vector<double> P(static_cast<std::size_t>(sp.M) * sp.M);
  gram(Wt, sp.M, Wt, sp.M, sp.d, sp.scale, P.data(), 1);
  for (std::size_t j = 0; j < n_runs; ++j) reset_out(out[j]);
  const std::size_t Kd = static_cast<std::size_t>(sp.K) * sp.d, chunk = cuda::SgdEngine::max_runs(sp);
  for (std::size_t j0 = 0; j0 < n_runs; j0 += chunk) {  // as many runs at once as the device holds
    const std::size_t n = std::min(chunk, n_runs - j0);
    if (cancel_requested()) {  // not started
      for (std::size_t j = j0; j < n_runs; ++j) stop_out(out[j], 2, 0, 0, sp.d);
      break;
    }
    simulate_on_device(sp, W0 + j0 * init_stride * Kd, a0 + j0 * init_stride * sp.K, init_stride, Wt, v, P.data(),
                       runs + j0, n, out + j0, progress, b0 ? b0 + j0 * init_stride * sp.K : nullptr, bt);
  }
}
#endif

}  // namespace twolayer

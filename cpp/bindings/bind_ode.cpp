// Bindings for the order-parameter ODE: argument checks, GIL release, result arrays. No maths here.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <utility>
#include <string>
#include <tuple>
#include <vector>

#include "common.hpp"
#include "device_arg.hpp"
#include "interrupt.hpp"
#include "target_arg.hpp"
#include "schedule_arg.hpp"
#include "twolayer/activation.hpp"
#include "twolayer/batch_integrators.hpp"
#include "twolayer/divergence.hpp"
#include "twolayer/dynamics.hpp"
#include "twolayer/gaussian.hpp"  // not_implemented
#include "twolayer/integrators.hpp"
#include "twolayer/large_batch.hpp"

namespace twolayer::bind {

namespace {

Regime parse_regime(const std::string& r) {
  if (r == "online") return Regime::Online;
  if (r == "gradient_flow") return Regime::GradientFlow;
  throw std::invalid_argument("regime: expected 'online' or 'gradient_flow', got '" + r + "'");
}

Method parse_method(const std::string& m) {
  if (m == "euler") return Method::Euler;
  if (m == "rk4") return Method::Rk4;
  if (m == "adaptive") return Method::Adaptive;
  throw std::invalid_argument("method: expected 'euler', 'rk4' or 'adaptive', got '" + m + "'");
}

// Model of K student and M teacher units with the teacher's P (M x M) and v (M), validated.
OdeModel make_model(const std::string& student, const std::string& teacher, const std::string& regime, bool spherical,
                    int K, int M, double lr, double lr_readout, double noise, const double* P, const double* v) {
  OdeModel m;
  m.student = parse_activation(student);
  m.teacher = parse_activation(teacher);
  m.K = K;
  m.M = M;
  m.regime = parse_regime(regime);
  m.spherical = spherical;
  m.lr = lr;
  m.lr_readout = lr_readout;
  m.noise = noise;
  m.P.assign(P, P + static_cast<std::size_t>(M) * M);
  m.v.assign(v, v + M);
  validate_model(m);
  return m;
}

// make_model from (P, v) arrays; M from v.
OdeModel make_model(const std::string& student, const std::string& teacher, const std::string& regime, bool spherical,
                    int K, double lr, double lr_readout, double noise, const Array& P, const Array& v) {
  expect_shape(v, "v", {-1});
  const auto M = v.shape(0);
  expect_shape(P, "P", {M, M});
  return make_model(student, teacher, regime, spherical, K, static_cast<int>(M), lr, lr_readout, noise, P.data(),
                    v.data());
}

// Refuses systems beyond kMaxUnits (checked before any int size is formed).
void check_units(py::ssize_t K, py::ssize_t M) {
  if (K + M > kMaxUnits)
    throw std::invalid_argument("K + M: expected at most " + std::to_string(kMaxUnits) + " units in all, got " +
                                std::to_string(K + M));
}

// A stack of B states Q (B, K, K), M (B, K, M), a (B, K) of one shape, checked: its sizes, and the states [Q, M, a]
// one block of n = K^2 + K M + K per member.
struct StateStack {
  py::ssize_t B, K, M;
  std::size_t n;
  std::vector<double> y;
};
StateStack state_stack(const Array& Q, const Array& Mo, const Array& a) {
  expect_shape(a, "a", {-1, -1});
  const py::ssize_t B = a.shape(0), K = a.shape(1);
  expect_shape(Mo, "M", {B, K, -1});
  const py::ssize_t M = Mo.shape(2);
  check_units(K, M);
  expect_shape(Q, "Q", {B, K, K});
  const std::size_t nB = static_cast<std::size_t>(B), kk = static_cast<std::size_t>(K * K),
                    km = static_cast<std::size_t>(K * M), n = kk + km + static_cast<std::size_t>(K);
  std::vector<double> y(nB * n);
  for (std::size_t b = 0; b < nB; ++b) {
    std::copy(Q.data() + b * kk, Q.data() + (b + 1) * kk, y.data() + b * n);
    std::copy(Mo.data() + b * km, Mo.data() + (b + 1) * km, y.data() + b * n + kk);
    std::copy(a.data() + b * K, a.data() + (b + 1) * K, y.data() + b * n + kk + km);
  }
  return {B, K, M, n, std::move(y)};
}

// The schedule of an ODE run: any but a per-step table (an ODE has no steps).
Schedule ode_schedule(const py::object& o) {
  Schedule s = schedule_arg(o);
  if (s.kind == Schedule::Kind::Table && s.per_step)
    throw std::invalid_argument("schedule: a per-step table needs a time spacing dt for the ODE (t = steps / d: "
                                "dt = 1 / d)");
  return s;
}

// State y = [Q (K x K), M (K x M), a (K)] into row i of the Q, M and a arrays' data.
void put_state(const double* y, std::size_t K, std::size_t M, std::size_t i, double* Q, double* Mo, double* a) {
  std::copy(y, y + K * K, Q + i * K * K);
  std::copy(y + K * K, y + K * K + K * M, Mo + i * K * M);
  std::copy(y + K * K + K * M, y + K * K + K * M + K, a + i * K);
}

// One run's rows as Python's dict; biased: the state's biases (OdeModel::biased) as "bias" (T, K).
py::dict to_dict(const IntegrateResult& r, int K, int M, bool biased = false) {
  const auto T = static_cast<py::ssize_t>(r.t.size());
  const std::size_t n = static_cast<std::size_t>(K) * K + static_cast<std::size_t>(K) * M + K * (biased ? 2 : 1);
  Array t({T}), risk({T}), Q({T, static_cast<py::ssize_t>(K), static_cast<py::ssize_t>(K)}),
      Mo({T, static_cast<py::ssize_t>(K), static_cast<py::ssize_t>(M)}), a({T, static_cast<py::ssize_t>(K)});
  double *pt = t.mutable_data(), *pr = risk.mutable_data(), *pq = Q.mutable_data(), *pm = Mo.mutable_data(),
         *pa = a.mutable_data();
  for (py::ssize_t s = 0; s < T; ++s) {
    pt[s] = r.t[s];
    pr[s] = r.risk[s];
    put_state(r.y.data() + static_cast<std::size_t>(s) * n, K, M, s, pq, pm, pa);
  }
  py::dict d;
  d["t"] = t;
  d["Q"] = Q;
  d["M"] = Mo;
  d["a"] = a;
  d["risk"] = risk;
  d["status"] = r.status;
  d["message"] = r.message;
  d["stop_time"] = r.stop_time;
  d["n_rhs"] = r.n_rhs;
  d["n_steps"] = r.n_steps;
  d["n_rejected"] = r.n_rejected;
  if (biased) {
    Array b({T, static_cast<py::ssize_t>(K)});
    const std::size_t off = n - static_cast<std::size_t>(K);
    for (py::ssize_t s = 0; s < T; ++s)
      std::copy(r.y.data() + s * n + off, r.y.data() + s * n + n, b.mutable_data() + s * K);
    d["bias"] = b;
  }
  return d;
}

// Model m made biased (dynamics.hpp, "Biases") with the student's biases b (K), the teacher's bt (M) and lr_bias,
// validated, and its state y extended by b.
void make_biased(OdeModel& m, std::vector<double>& y, const double* b, const double* bt, double lr_bias) {
  for (int i = 0; i < m.K; ++i)
    if (!std::isfinite(b[i])) throw std::invalid_argument("bias: entries must be finite");
  m.biased = true;
  m.teacher_bias.assign(bt, bt + m.M);
  m.lr_bias = lr_bias;
  validate_model(m);
  y.insert(y.end(), b, b + m.K);
}

// The biases of a one-system binding (None: a model without biases, and then no teacher_bias nor lr_bias): the
// model made biased and the state y extended by b (make_biased).
void add_bias(OdeModel& m, std::vector<double>& y, const py::object& bias, const py::object& teacher_bias,
              double lr_bias) {
  if (bias.is_none()) {
    if (!teacher_bias.is_none() || lr_bias != 0.0)
      throw std::invalid_argument("bias: teacher_bias and lr_bias need the student's bias (zeros allowed)");
    return;
  }
  const Array b = bias.cast<Array>(), bt = teacher_bias.cast<Array>();
  expect_shape(b, "bias", {m.K});
  expect_shape(bt, "teacher_bias", {m.M});
  make_biased(m, y, b.data(), bt.data(), lr_bias);
}

std::vector<double> state(const Array& Q, const Array& Mo, const Array& a, int& K, int& M) {
  expect_shape(a, "a", {-1});
  expect_shape(Mo, "M", {a.shape(0), -1});
  check_units(a.shape(0), Mo.shape(1));
  K = static_cast<int>(a.shape(0));
  expect_shape(Q, "Q", {K, K});
  M = static_cast<int>(Mo.shape(1));
  std::vector<double> y(Q.data(), Q.data() + K * K);
  y.insert(y.end(), Mo.data(), Mo.data() + K * M);
  y.insert(y.end(), a.data(), a.data() + K);
  return y;
}

std::vector<double> to_vector(const Array& x, const char* name) {
  expect_shape(x, name, {-1});
  return std::vector<double>(x.data(), x.data() + x.shape(0));
}

// A batch's rows written straight into its output arrays as they are recorded (RowSink): the rows of member b on
// the output grid into Q[j, s], M[j, s], a[j, s], risk[j, s], s = 0, 1, ... (n_recorded[j] counts them), j = b or,
// for a group of a larger batch, j = members[b]; every row also into the (B, ...) "final" arrays, which so keep the
// member's last row (for an early stop, its state at the stop time). The arrays are either made here, or the
// caller's (`out`, shared by the groups of a mixed-shape batch: K and M padded to the largest, the rows written into
// the leading K x K, K x M, K entries, nothing copied afterwards). Either way they hold NaN (n_recorded 0) before
// the run, so that the rows no member reaches stay NaN with no pass over the arrays after it (for 10^5 members that
// took seconds after a Ctrl-C); the workers write disjoint members' entries.
class GridRows final : public RowSink {
 public:
  // fill_grid: NaN in every grid row before the run (false: an engine takes grid_arrays() and writes them all).
  // biased (may be empty: no biases): per member, whether its states carry the biases b after [Q, M, a]
  // (OdeModel::biased); non-empty adds the arrays "bias" (B, T, K) and "bias_final" (B, K), zeros for a member
  // whose states have none (a member without biases: its b is 0 throughout).
  GridRows(const std::vector<double>& times, py::ssize_t B, py::ssize_t K, py::ssize_t M, const py::object& out,
           const py::object& members, bool fill_grid = true, std::vector<char> biased = {})
      : times_(times), B_(static_cast<std::size_t>(B)), T_(times.size()), K_(static_cast<std::size_t>(K)),
        M_(static_cast<std::size_t>(M)), t_({static_cast<py::ssize_t>(T_)}), biased_(std::move(biased)) {
    std::copy(times.begin(), times.end(), t_.mutable_data());
    if (out.is_none()) {
      const py::ssize_t T = static_cast<py::ssize_t>(T_);
      Kp_ = K_;
      Mp_ = M_;
      arr_ = {{"Q", new_array({B, T, K, K})}, {"M", new_array({B, T, K, M})}, {"a", new_array({B, T, K})},
              {"risk", new_array({B, T})}, {"t_final", new_array({B})}, {"Q_final", new_array({B, K, K})},
              {"M_final", new_array({B, K, M})}, {"a_final", new_array({B, K})}, {"risk_final", new_array({B})}};
      if (!biased_.empty()) {
        arr_.emplace("bias", new_array({B, T, K}));
        arr_.emplace("bias_final", new_array({B, K}));
      }
      n_rec_ = py::array_t<std::int64_t>(B);
      plain_ = !fill_grid;
      for (auto& [name, a] : arr_)
        if (fill_grid || name.find("_final") != std::string::npos)
          std::fill(a.mutable_data(), a.mutable_data() + a.size(), kNaN);
      std::fill(n_rec_.mutable_data(), n_rec_.mutable_data() + B, std::int64_t{0});
      member_.resize(B_);
      for (std::size_t b = 0; b < B_; ++b) member_[b] = b;
    } else {
      take(out.cast<py::dict>(), members);
    }
    grid_ = {arr_["Q"].mutable_data(), arr_["M"].mutable_data(), arr_["a"].mutable_data(),
             arr_["risk"].mutable_data()};
    last_ = {arr_["Q_final"].mutable_data(), arr_["M_final"].mutable_data(), arr_["a_final"].mutable_data(),
             arr_["risk_final"].mutable_data()};
    if (!biased_.empty()) {
      grid_.b = arr_["bias"].mutable_data();
      last_.b = arr_["bias_final"].mutable_data();
    }
    t_last_ = arr_["t_final"].mutable_data();
    count_ = n_rec_.mutable_data();
    plain_arrays_ = {grid_.Q, grid_.M, grid_.a, grid_.risk};
  }
  const GridArrays* grid_arrays() override { return plain_ ? &plain_arrays_ : nullptr; }
  void grid_filled(std::size_t b, std::size_t n) override { count_[member_[b]] = static_cast<std::int64_t>(n); }
  void final_row(std::size_t b, double t, const double* y, double r) override {
    put(last_, member_[b], y, r, b);
    t_last_[member_[b]] = t;
  }
  void row(std::size_t b, double t, const double* y, double r) override {
    const std::size_t j = member_[b];
    const auto s = static_cast<std::size_t>(count_[j]);
    if (s < T_ && t == times_[s]) {
      put(grid_, j * T_ + s, y, r, b);
      ++count_[j];
    }
    put(last_, j, y, r, b);
    t_last_[j] = t;
  }
  py::dict arrays() const {
    py::dict d;
    d["t"] = t_;
    for (const auto& [name, a] : arr_) d[name.c_str()] = a;
    d["n_recorded"] = n_rec_;
    return d;
  }

 private:
  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  struct Rows {  // the data of (Q, M, a, risk, bias) arrays with rows of Kp x Kp, Kp x Mp, Kp, 1 and Kp entries
    double *Q, *M, *a, *risk, *b = nullptr;
  };
  // The caller's arrays (float64 / int64, C-contiguous, writeable, of the batch's padded shapes), used in place.
  void take(const py::dict& out, const py::object& members) {
    const auto idx = members.cast<py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>>();
    if (idx.ndim() != 1 || idx.shape(0) != static_cast<py::ssize_t>(B_))
      throw std::invalid_argument("members: expected one index per member of the group");
    const auto get = [&](const char* name) {
      const py::object o = out[name];
      if (!py::isinstance<py::array_t<double, py::array::c_style>>(o) || !o.cast<py::array>().writeable())
        throw std::invalid_argument(std::string("out: '") + name + "' must be a writeable C-contiguous float64 array");
      return py::reinterpret_borrow<Array>(o);
    };
    Array Q = get("Q");
    if (Q.ndim() != 4) throw std::invalid_argument("out: 'Q' must have 4 dimensions (B, T, K, K)");
    const py::ssize_t Bt = Q.shape(0), T = static_cast<py::ssize_t>(T_), Kp = Q.shape(2);
    Array Mo = get("M");
    if (Mo.ndim() != 4) throw std::invalid_argument("out: 'M' must have 4 dimensions (B, T, K, M)");
    const py::ssize_t Mp = Mo.shape(3);
    if (Kp < static_cast<py::ssize_t>(K_) || Mp < static_cast<py::ssize_t>(M_))
      throw std::invalid_argument("out: its K and M must be at least the group's");
    arr_ = {{"Q", Q}, {"M", Mo}, {"a", get("a")}, {"risk", get("risk")}, {"t_final", get("t_final")},
            {"Q_final", get("Q_final")}, {"M_final", get("M_final")}, {"a_final", get("a_final")},
            {"risk_final", get("risk_final")}};
    const std::map<std::string, std::vector<py::ssize_t>> shapes = {
        {"Q", {Bt, T, Kp, Kp}}, {"M", {Bt, T, Kp, Mp}}, {"a", {Bt, T, Kp}}, {"risk", {Bt, T}}, {"t_final", {Bt}},
        {"Q_final", {Bt, Kp, Kp}}, {"M_final", {Bt, Kp, Mp}}, {"a_final", {Bt, Kp}}, {"risk_final", {Bt}}};
    if (!biased_.empty()) {
      if (!out.contains("bias") || !out.contains("bias_final"))
        throw std::invalid_argument("out: a group with biases needs 'bias' (B, T, K) and 'bias_final' (B, K)");
      arr_.emplace("bias", get("bias"));
      arr_.emplace("bias_final", get("bias_final"));
    }
    const std::map<std::string, std::vector<py::ssize_t>> bias_shapes = {{"bias", {Bt, T, Kp}},
                                                                        {"bias_final", {Bt, Kp}}};
    for (const auto& [name, a] : arr_)
      expect_shape(a, ("out['" + name + "']").c_str(), shapes.count(name) ? shapes.at(name) : bias_shapes.at(name));
    const py::object n = out["n_recorded"];
    if (!py::isinstance<py::array_t<std::int64_t, py::array::c_style>>(n) || !n.cast<py::array>().writeable())
      throw std::invalid_argument("out: 'n_recorded' must be a writeable C-contiguous int64 array");
    n_rec_ = py::reinterpret_borrow<py::array_t<std::int64_t>>(n);
    if (n_rec_.ndim() != 1 || n_rec_.shape(0) != Bt) throw std::invalid_argument("out: 'n_recorded' must be (B,)");
    member_.resize(B_);
    for (std::size_t b = 0; b < B_; ++b) {
      const std::int64_t j = idx.data()[b];
      if (j < 0 || j >= Bt) throw std::invalid_argument("members: expected indices in [0, " + std::to_string(Bt) + ")");
      member_[b] = static_cast<std::size_t>(j);
    }
    Kp_ = static_cast<std::size_t>(Kp);
    Mp_ = static_cast<std::size_t>(Mp);
  }
  // State y = [Q (K x K), M (K x M), a (K)] (then b (K) for a biased member b) and its risk r into row i (padded
  // rows: the leading entries).
  void put(const Rows& o, std::size_t i, const double* y, double r, std::size_t b) const {
    const std::size_t K = K_, M = M_;
    if (o.b) {
      double* ob = o.b + i * Kp_;
      if (biased_[b])
        std::copy(y + K * K + K * M + K, y + K * K + K * M + 2 * K, ob);
      else
        std::fill(ob, ob + K, 0.0);
    }
    if (Kp_ == K && Mp_ == M) {
      put_state(y, K, M, i, o.Q, o.M, o.a);
    } else {
      const double* ym = y + K * K;
      for (std::size_t u = 0; u < K; ++u) {
        std::copy(y + u * K, y + (u + 1) * K, o.Q + (i * Kp_ + u) * Kp_);
        std::copy(ym + u * M, ym + (u + 1) * M, o.M + (i * Kp_ + u) * Mp_);
      }
      std::copy(ym + K * M, ym + K * M + K, o.a + i * Kp_);
    }
    o.risk[i] = r;
  }
  const std::vector<double>& times_;
  std::size_t B_, T_, K_, M_, Kp_ = 0, Mp_ = 0;
  Array t_;
  std::map<std::string, Array> arr_;
  py::array_t<std::int64_t> n_rec_;
  std::vector<std::size_t> member_;
  Rows grid_{}, last_{};
  double* t_last_ = nullptr;
  std::int64_t* count_ = nullptr;
  bool plain_ = false;  // grid arrays of the group alone, not yet filled: an engine may write them (grid_arrays)
  GridArrays plain_arrays_{};
  std::vector<char> biased_;
};

// --- the arguments of the bindings, each group parsed by one function and named once ---

// The solver's arguments (times, method, dt, rtol, atol, h0, h_max, the stop rule, max_steps, schedule) as options.
IntegrateOptions solver_options(const Array& times, const std::string& method, double dt, double rtol, double atol,
                                double h0, double h_max, double risk_tol, double risk_rtol, long long max_steps,
                                const py::object& schedule) {
  IntegrateOptions o;
  o.method = parse_method(method);
  o.times = to_vector(times, "times");
  o.dt = dt;
  o.rtol = rtol;
  o.atol = atol;
  o.h0 = h0;
  o.h_max = h_max;
  o.stop.risk_tol = risk_tol;
  o.stop.risk_rtol = risk_rtol;
  o.max_steps = max_steps;
  o.schedule = ode_schedule(schedule);
  return o;
}

// The large-batch map's arguments (lr as gamma0, batch_ratio as alpha, steps, spherical), checked.
LargeBatchOptions large_batch_options(double gamma0, double alpha, long long steps, bool spherical) {
  if (!(std::isfinite(gamma0) && gamma0 >= 0.0)) throw std::invalid_argument("lr: expected a finite step gamma0 >= 0");
  if (!(std::isfinite(alpha) && alpha > 0.0)) throw std::invalid_argument("batch_ratio: expected a finite number > 0");
  if (steps < 1) throw std::invalid_argument("steps: expected a positive number of iterations");
  LargeBatchOptions o;
  o.steps = steps;
  o.gamma0 = gamma0;
  o.alpha = alpha;
  o.spherical = spherical;
  return o;
}

// A polynomial target (target.hpp) instead of the committee teacher: M (K, k), P = I_k, the target's terms exact.
OdeModel target_model(const IntArray& alpha, const Array& coef, const std::string& student, const std::string& regime,
                      bool spherical, int K, int M, double lr, double lr_readout, double noise) {
  auto t = make_target(alpha, coef);
  if (M != t->k)
    throw std::invalid_argument("M: expected k = " + std::to_string(t->k) + " columns, got " + std::to_string(M));
  std::vector<double> P(static_cast<std::size_t>(M) * M, 0.0), v(static_cast<std::size_t>(M), 0.0);
  for (int r = 0; r < M; ++r) P[static_cast<std::size_t>(r) * M + r] = 1.0;
  // The committee part has v = 0: its teacher units only ever meet zero weights, so the cheapest activation
  // (linear: closed-form kernels) gives the same right-hand side at a fraction of relu's Price-interpolated I4.
  OdeModel model = make_model(student, "linear", regime, spherical, K, M, lr, lr_readout, noise, P.data(), v.data());
  model.target = t;
  return model;
}

// The one-system model of the committee bindings, its M checked against the state's.
OdeModel committee_model(const std::string& student, const std::string& teacher, const std::string& regime,
                         bool spherical, int K, int M, double lr, double lr_readout, double noise, const Array& P,
                         const Array& v) {
  OdeModel model = make_model(student, teacher, regime, spherical, K, lr, lr_readout, noise, P, v);
  if (model.M != M) throw std::invalid_argument("M: its columns must match the teacher's units");
  return model;
}

// The keyword names of the argument groups, in the bindings' order.
auto state_names() { return std::make_tuple(py::arg("Q"), py::arg("M"), py::arg("a")); }
auto committee_names() { return std::make_tuple(py::arg("P"), py::arg("v"), py::arg("act"), py::arg("act_teacher")); }
auto target_names() { return std::make_tuple(py::arg("alpha"), py::arg("coef"), py::arg("act")); }
auto model_names() {
  return std::make_tuple(py::arg("regime"), py::arg("spherical"), py::arg("lr"), py::arg("lr_readout"),
                         py::arg("noise"));
}
auto bias_names() {
  return std::make_tuple(py::arg("bias") = py::none(), py::arg("teacher_bias") = py::none(),
                         py::arg("lr_bias") = 0.0);
}
auto grid_names() {
  return std::make_tuple(py::arg("times"), py::arg("method"), py::arg("dt"), py::arg("rtol"), py::arg("atol"));
}
// m.def(name, f, extras...) with the extras given as tuples (the groups above and the binding's own).
template <class F, class... Tuples>
void def_with(py::module_& m, const char* name, F f, Tuples&&... extras) {
  std::apply([&](auto&&... x) { m.def(name, f, x...); }, std::tuple_cat(std::forward<Tuples>(extras)...));
}

// One integrated system as Python's dict (to_dict), Ctrl-C polled.
py::object integrate_one(const OdeModel& model, const std::vector<double>& y, const IntegrateOptions& opt,
                         int n_threads, int K, int M) {
  return run_cancellable([&] { return integrate(model, y.data(), opt, n_threads); },
                         [&](const IntegrateResult& r) { return to_dict(r, K, M, model.biased); });
}

// --- the bindings ---

std::string divergence(const Array& Q, const Array& Mo, const Array& a, const Array& P, const Array& v,
                       const Array& Q0, const Array& M0, const Array& a0) {
  expect_shape(a, "a", {-1});
  const py::ssize_t K = a.shape(0);
  expect_shape(Mo, "M", {K, -1});
  const py::ssize_t M = Mo.shape(1);
  check_units(K, M);
  expect_shape(Q, "Q", {K, K});
  expect_shape(P, "P", {M, M});
  expect_shape(v, "v", {M});
  expect_shape(Q0, "Q0", {K, K});
  expect_shape(M0, "M0", {K, M});
  expect_shape(a0, "a0", {K});
  int k, mm;
  const std::vector<double> y = state(Q, Mo, a, k, mm), y0 = state(Q0, M0, a0, k, mm);
  std::vector<double> scratch(static_cast<std::size_t>((K + M) * (K + M)));
  const double bound = divergence_bound(y0.data(), y0.size(), P.data(), static_cast<std::size_t>(M * M), v.data(),
                                        static_cast<std::size_t>(M));
  const char* why = divergence_message(
      divergence_code(y.data(), static_cast<int>(K), static_cast<int>(M), P.data(), bound, scratch.data()));
  return why ? why : "";
}

// (dQ, dM, da) of dy = f(y).
py::tuple split_state(const std::vector<double>& dy, int K, int M) {
  Array dQ({K, K}), dM({K, M}), da({K});
  put_state(dy.data(), static_cast<std::size_t>(K), static_cast<std::size_t>(M), 0, dQ.mutable_data(),
            dM.mutable_data(), da.mutable_data());
  return py::make_tuple(dQ, dM, da);
}

py::tuple ode_rhs(const Array& Q, const Array& Mo, const Array& a, const Array& P, const Array& v,
                  const std::string& student, const std::string& teacher, const std::string& regime, bool spherical,
                  double lr, double lr_readout, double noise, int n_threads, const py::object& bias,
                  const py::object& teacher_bias, double lr_bias) {
  int K, M;
  std::vector<double> y = state(Q, Mo, a, K, M);
  OdeModel model = committee_model(student, teacher, regime, spherical, K, M, lr, lr_readout, noise, P, v);
  add_bias(model, y, bias, teacher_bias, lr_bias);
  std::vector<double> dy(y.size());
  {
    py::gil_scoped_release release;
    OdeRhs f(model);
    f(y.data(), dy.data(), n_threads);
  }
  py::tuple out = split_state(dy, K, M);
  if (!model.biased) return out;
  Array db({K});
  std::copy(dy.end() - K, dy.end(), db.mutable_data());
  return py::make_tuple(out[0], out[1], out[2], db);
}

py::tuple ode_rhs_lanes(const Array& Q, const Array& Mo, const Array& a, const Array& P, const Array& v,
                        const std::string& act, const std::string& regime, bool spherical, const Array& lr,
                        const Array& lr_readout, const Array& noise, int lanes, const py::object& bias,
                        const py::object& teacher_bias, const py::object& lr_bias, const py::object& teacher_act) {
  const std::string tact = teacher_act.is_none() ? act : teacher_act.cast<std::string>();
  StateStack st = state_stack(Q, Mo, a);
  const py::ssize_t B = st.B, K = st.K, M = st.M;
  expect_shape(P, "P", {B, M, M});
  expect_shape(v, "v", {B, M});
  for (const auto& [arr, name] : {std::pair{&lr, "lr"}, {&lr_readout, "lr_readout"}, {&noise, "noise"}})
    expect_shape(*arr, name, {B});
  const bool biased = !bias.is_none();
  if (!biased && (!teacher_bias.is_none() || !lr_bias.is_none()))
    throw std::invalid_argument("bias: teacher_bias and lr_bias need the students' bias (zeros allowed)");
  Array b_arr, bt_arr, lrb_arr;
  if (biased) {
    b_arr = bias.cast<Array>();
    bt_arr = teacher_bias.cast<Array>();
    lrb_arr = lr_bias.cast<Array>();
    expect_shape(b_arr, "bias", {B, K});
    expect_shape(bt_arr, "teacher_bias", {B, M});
    expect_shape(lrb_arr, "lr_bias", {B});
  }
  const std::size_t nB = static_cast<std::size_t>(B), n = st.n + (biased ? static_cast<std::size_t>(K) : 0);
  std::vector<OdeModel> models;
  std::vector<double> y;
  std::vector<double> dy(nB * n);
  for (std::size_t b = 0; b < nB; ++b) {
    models.push_back(make_model(act, tact, regime, spherical, static_cast<int>(K), static_cast<int>(M), lr.data()[b],
                                lr_readout.data()[b], noise.data()[b], P.data() + b * static_cast<std::size_t>(M * M),
                                v.data() + b * M));
    std::vector<double> yb(st.y.begin() + static_cast<std::ptrdiff_t>(b * st.n),
                           st.y.begin() + static_cast<std::ptrdiff_t>((b + 1) * st.n));
    if (biased) make_biased(models.back(), yb, b_arr.data() + b * K, bt_arr.data() + b * M, lrb_arr.data()[b]);
    y.insert(y.end(), yb.begin(), yb.end());
  }
  Array dQ({B, K, K}), dM({B, K, M}), da({B, K}), db({B, biased ? K : py::ssize_t{0}}), risk({B});
  {
    py::gil_scoped_release release;
    rhs_lanes(models, y.data(), lanes, dy.data(), risk.mutable_data());
  }
  for (std::size_t b = 0; b < nB; ++b) {
    put_state(dy.data() + b * n, static_cast<std::size_t>(K), static_cast<std::size_t>(M), b, dQ.mutable_data(),
              dM.mutable_data(), da.mutable_data());
    if (biased) std::copy(dy.data() + b * n + st.n, dy.data() + (b + 1) * n, db.mutable_data() + b * K);
  }
  if (!biased) return py::make_tuple(dQ, dM, da, risk);
  return py::make_tuple(dQ, dM, da, db, risk);
}

py::object ode_rhs_timing(const Array& Q, const Array& Mo, const Array& a, const Array& P, const Array& v,
                          const std::string& student, const std::string& teacher, const std::string& regime,
                          double lr, double noise, long long evals, int n_threads) {
  int K, M;
  std::vector<double> y = state(Q, Mo, a, K, M);
  const OdeModel model = make_model(student, teacher, regime, false, K, lr, 0.0, noise, P, v);
  std::vector<double> dy(y.size());
  return run_cancellable(
      [&] {
        OdeRhs f(model);
        const auto start = std::chrono::steady_clock::now();
        for (long long e = 0; e < evals && !cancel_requested(); ++e) {
          y[0] += 1e-300;  // keep the compiler from hoisting the call
          f(y.data(), dy.data(), n_threads);
        }
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      },
      [](double seconds) { return py::float_(seconds); });
}

py::tuple ode_rhs_target(const Array& Q, const Array& Mo, const Array& a, const IntArray& alpha, const Array& coef,
                         const std::string& student, const std::string& regime, bool spherical, double lr,
                         double lr_readout, double noise, long long evals, int n_threads, const py::object& bias,
                         const py::object& teacher_bias, double lr_bias) {
  int K, M;
  std::vector<double> y = state(Q, Mo, a, K, M);
  OdeModel model = target_model(alpha, coef, student, regime, spherical, K, M, lr, lr_readout, noise);
  add_bias(model, y, bias, teacher_bias, lr_bias);
  std::vector<double> dy(y.size());
  double seconds = 0.0;
  {
    py::gil_scoped_release release;
    OdeRhs f(model);
    const auto start = std::chrono::steady_clock::now();
    for (long long e = 0; e < std::max(1LL, evals); ++e) f(y.data(), dy.data(), n_threads);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  py::tuple d = split_state(dy, K, M);
  if (!model.biased) return py::make_tuple(d[0], d[1], d[2], seconds);
  Array db({K});
  std::copy(dy.end() - K, dy.end(), db.mutable_data());
  return py::make_tuple(d[0], d[1], d[2], seconds, db);
}

py::object ode_integrate(const Array& Q, const Array& Mo, const Array& a, const Array& P, const Array& v,
                         const std::string& student, const std::string& teacher, const std::string& regime,
                         bool spherical, double lr, double lr_readout, double noise, const Array& times,
                         const std::string& method, double dt, double rtol, double atol, double h0, double h_max,
                         double risk_tol, double risk_rtol, long long max_steps, int n_threads,
                         const py::object& schedule, const py::object& bias, const py::object& teacher_bias,
                         double lr_bias) {
  int K, M;
  std::vector<double> y = state(Q, Mo, a, K, M);
  OdeModel model = committee_model(student, teacher, regime, spherical, K, M, lr, lr_readout, noise, P, v);
  add_bias(model, y, bias, teacher_bias, lr_bias);
  const IntegrateOptions opt =
      solver_options(times, method, dt, rtol, atol, h0, h_max, risk_tol, risk_rtol, max_steps, schedule);
  return integrate_one(model, y, opt, n_threads, K, M);
}

py::object ode_integrate_target(const Array& Q, const Array& Mo, const Array& a, const IntArray& alpha,
                                const Array& coef, const std::string& student, const std::string& regime,
                                bool spherical, double lr, double lr_readout, double noise, const Array& times,
                                const std::string& method, double dt, double rtol, double atol, double h_max,
                                double risk_tol, double risk_rtol, long long max_steps, const py::object& schedule,
                                const py::object& bias, const py::object& teacher_bias, double lr_bias) {
  int K, M;
  std::vector<double> y = state(Q, Mo, a, K, M);
  OdeModel model = target_model(alpha, coef, student, regime, spherical, K, M, lr, lr_readout, noise);
  add_bias(model, y, bias, teacher_bias, lr_bias);
  const IntegrateOptions opt =
      solver_options(times, method, dt, rtol, atol, 0.0, h_max, risk_tol, risk_rtol, max_steps, schedule);
  return integrate_one(model, y, opt, 1, K, M);
}

// One string field of every member's result as a NumPy unicode array (B,) written here, without a Python string
// per member (for 10^5 members the strings, their list and NumPy's conversion of it took longer than a GPU's run);
// non-ASCII text goes through Python's UTF-8 decoding.
py::object text_array(const std::vector<IntegrateResult>& rs, const std::string IntegrateResult::*field) {
  std::size_t width = 1;
  bool ascii = true;
  for (const IntegrateResult& r : rs) {
    const std::string& s = r.*field;
    width = std::max(width, s.size());
    for (const char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  }
  if (!ascii) {
    py::list l;
    for (const IntegrateResult& r : rs) l.append(py::str(r.*field));
    return py::module_::import("numpy").attr("array")(l, py::arg("dtype") = "str");
  }
  py::array out(py::dtype::from_args(py::str("<U" + std::to_string(width))),
                std::vector<py::ssize_t>{static_cast<py::ssize_t>(rs.size())});
  auto* p = static_cast<char32_t*>(out.mutable_data());
  std::fill(p, p + width * rs.size(), U'\0');
  for (std::size_t b = 0; b < rs.size(); ++b) {
    const std::string& s = rs[b].*field;
    for (std::size_t i = 0; i < s.size(); ++i) p[b * width + i] = static_cast<char32_t>(s[i]);
  }
  return out;
}

// One shape group of a batch, stacked: Q (B, K, K), M (B, K, M), a (B, K), P (B, M, M) or (M, M) (shared),
// v (B, M) or (M,); lr, lr_readout, noise, risk_tol, risk_rtol (B,). Returns stacked arrays (B, T, ...) whose rows
// after a member's n_recorded are NaN, and per-member status, message, stop_time and counts.
py::object ode_integrate_batch(const Array& Q, const Array& Mo, const Array& a, const Array& P, const Array& v,
                               const std::string& student, const std::string& teacher, const std::string& regime,
                               bool spherical, const Array& lr_arr, const Array& lr_readout_arr,
                               const Array& noise_arr, const Array& times_arr, const std::string& method, double dt,
                               double rtol, double atol, double h0, double h_max, const Array& risk_tol_arr,
                               const Array& risk_rtol_arr, long long max_steps, int n_threads,
                               const py::object& progress, const py::object& schedule, const py::object& targets,
                               const py::object& out, const py::object& members, const std::string& device,
                               const py::object& bias, const py::object& teacher_bias, const py::object& lr_bias) {
  // Initial states, one block of n per member: [Q, M, a].
  const StateStack st = state_stack(Q, Mo, a);
  const py::ssize_t B = st.B, K = st.K, M = st.M;
  const bool shared_P = P.ndim() == 2, shared_v = v.ndim() == 1;
  if (shared_P) expect_shape(P, "P", {M, M}); else expect_shape(P, "P", {B, M, M});
  if (shared_v) expect_shape(v, "v", {M}); else expect_shape(v, "v", {B, M});
  for (const auto& [arr, name] : {std::pair{&lr_arr, "lr"}, {&lr_readout_arr, "lr_readout"},
                                  {&noise_arr, "noise"}, {&risk_tol_arr, "risk_tol"},
                                  {&risk_rtol_arr, "risk_rtol"}})
    expect_shape(*arr, name, {B});
  const std::size_t nB = static_cast<std::size_t>(B);
  if (!targets.is_none() && py::len(targets) != nB)
    throw std::invalid_argument("targets: expected one (exponents, coefficients) pair per member");
  const std::size_t mm = static_cast<std::size_t>(M * M);
  std::vector<const double*> y0s(nB);
  std::vector<OdeModel> models(nB);
  std::vector<StopRule> stops(nB);
  const double *pp = P.data(), *pv = v.data();
  // the names parsed once: member b is the first member's model with its own numbers, validated as make_model's
  OdeModel proto;
  if (nB > 0)
    proto = make_model(student, teacher, regime, spherical, static_cast<int>(K), static_cast<int>(M), 0.0, 0.0, 0.0,
                       pp, pv);
  for (std::size_t b = 0; b < nB; ++b) {
    y0s[b] = st.y.data() + b * st.n;
    OdeModel& m = models[b];
    m = proto;
    m.lr = lr_arr.data()[b];
    m.lr_readout = lr_readout_arr.data()[b];
    m.noise = noise_arr.data()[b];
    if (!shared_P) m.P.assign(pp + b * mm, pp + (b + 1) * mm);
    if (!shared_v) m.v.assign(pv + b * static_cast<std::size_t>(M), pv + (b + 1) * static_cast<std::size_t>(M));
    validate_model(m);
    if (!targets.is_none()) {  // member b's polynomial target (alpha, coef), as ode_integrate_target
      const auto pair = targets.cast<py::sequence>()[b].cast<py::tuple>();
      auto t = make_target(pair[0].cast<IntArray>(), pair[1].cast<Array>());
      if (t->k != M) throw std::invalid_argument("M: expected k = " + std::to_string(t->k) + " columns, got " +
                                                 std::to_string(M));
      models[b].target = t;
      validate_model(models[b]);
    }
    stops[b].risk_tol = risk_tol_arr.data()[b];
    stops[b].risk_rtol = risk_rtol_arr.data()[b];
  }
  // The biases (None: a batch without biases): member b runs with biases, as ode_integrate would run it alone,
  // when its bias or teacher_bias has a nonzero entry or its lr_bias > 0 (ode/_bias.py); its state then gains b.
  std::vector<char> biased;
  std::vector<std::vector<double>> yb;  // the states [Q, M, a, b] of the members with biases
  if (!bias.is_none()) {
    if (teacher_bias.is_none() || lr_bias.is_none())
      throw std::invalid_argument("bias: teacher_bias and lr_bias are needed with the student's bias");
    const Array b_arr = bias.cast<Array>(), bt_arr = teacher_bias.cast<Array>(), lrb_arr = lr_bias.cast<Array>();
    expect_shape(b_arr, "bias", {B, K});
    expect_shape(bt_arr, "teacher_bias", {B, M});
    expect_shape(lrb_arr, "lr_bias", {B});
    biased.assign(nB, 0);
    yb.resize(nB);
    const std::size_t k = static_cast<std::size_t>(K), mt = static_cast<std::size_t>(M);
    for (std::size_t b = 0; b < nB; ++b) {
      const double *pb = b_arr.data() + b * k, *pt = bt_arr.data() + b * mt, lrb = lrb_arr.data()[b];
      const auto nonzero = [](double x) { return x != 0.0; };  // NaN too: refused by make_biased
      if (!(std::any_of(pb, pb + k, nonzero) || std::any_of(pt, pt + mt, nonzero) || lrb != 0.0)) continue;
      yb[b].assign(y0s[b], y0s[b] + st.n);
      make_biased(models[b], yb[b], pb, pt, lrb);
      biased[b] = 1;
      y0s[b] = yb[b].data();
    }
  } else if (!teacher_bias.is_none() || !lr_bias.is_none()) {
    throw std::invalid_argument("bias: teacher_bias and lr_bias need the student's bias (zeros allowed)");
  }
  const IntegrateOptions opt =
      solver_options(times_arr, method, dt, rtol, atol, h0, h_max, 0.0, 0.0, max_steps, schedule);
  const std::vector<double>& times = opt.times;
  std::atomic<std::int64_t> finished{0};
  Poll poll;
  if (!progress.is_none())
    poll.with_gil = [&] { progress(static_cast<long long>(finished.load(std::memory_order_relaxed))); };
  // Rows on the output grid go to (B, T, ...) arrays as they are recorded (GridRows; NaN after a member's
  // n_recorded); the last row a member recorded, which for an early stop is its state at the stop time between
  // two output times, also goes to the (B, ...) "final" arrays.
  const bool gpu = use_cuda(device);
  if (gpu && !biased.empty())
    throw not_implemented("bias: the GPU batch does not handle biases yet (device='cpu' runs them)");
  GridRows rows(times, B, K, M, out, members, /*fill_grid=*/!gpu, biased);
  double gpu_seconds = 0.0;
  auto work = [&] {
#ifdef TWOLAYER_CUDA
    if (gpu) return cuda::integrate_batch(models, y0s, opt, stops, &finished, &rows, &gpu_seconds);
#endif
    return integrate_batch(models, y0s, opt, n_threads, stops, &finished, &rows);
  };
  auto to_py = [&](const std::vector<IntegrateResult>& rs) {
    py::array_t<std::int64_t> n_rhs(B), n_steps(B), n_rej(B);
    Array stop_time({B});
    for (std::size_t b = 0; b < nB; ++b) {
      const IntegrateResult& r = rs[b];
      stop_time.mutable_data()[b] = r.stop_time;
      n_rhs.mutable_data()[b] = r.n_rhs;
      n_steps.mutable_data()[b] = r.n_steps;
      n_rej.mutable_data()[b] = r.n_rejected;
    }
    py::dict d = rows.arrays();
    d["status"] = text_array(rs, &IntegrateResult::status);
    d["message"] = text_array(rs, &IntegrateResult::message);
    d["stop_time"] = stop_time;
    d["n_rhs"] = n_rhs;
    d["n_steps"] = n_steps;
    d["n_rejected"] = n_rej;
    if (gpu) d["gpu_seconds"] = gpu_seconds;
    return d;
  };
  return run_cancellable(work, to_py, true, poll);
}

// The large-batch map (large_batch.hpp): rows at every iteration 0..steps.
py::object large_batch_iterate(const Array& Q, const Array& Mo, const Array& a, const Array& P, const Array& v,
                               const std::string& student, const std::string& teacher, double gamma0, double alpha,
                               long long steps, double noise, bool spherical, int n_threads, const py::object& bias,
                               const py::object& teacher_bias, double lr_bias) {
  int K, M;
  std::vector<double> y = state(Q, Mo, a, K, M);
  OdeModel model = committee_model(student, teacher, "online", false, K, M, 1.0, 0.0, noise, P, v);
  LargeBatchOptions opt = large_batch_options(gamma0, alpha, steps, spherical);
  std::vector<double> yb = y;
  add_bias(model, yb, bias, teacher_bias, lr_bias);  // checks the biases as the ODE's (yb = [y, b])
  if (model.biased) {  // the map's options carry them (large_batch.hpp); the rows end with b
    opt.bias.assign(yb.end() - K, yb.end());
    opt.teacher_bias = model.teacher_bias;
    opt.lr_bias = lr_bias;
    model.biased = false;
  }
  return run_cancellable([&] { return iterate_large_batch(model, y.data(), opt, n_threads); },
                         [&](const IntegrateResult& r) { return to_dict(r, K, M, !opt.bias.empty()); });
}

// The large-batch map with a polynomial target.
py::object large_batch_iterate_target(const Array& Q, const Array& Mo, const Array& a, const IntArray& alpha,
                                      const Array& coef, const std::string& student, double gamma0, double alpha_b,
                                      long long steps, double noise, bool spherical, const py::object& bias,
                                      double lr_bias, int n_threads) {
  int K, M;
  const std::vector<double> y = state(Q, Mo, a, K, M);
  const OdeModel model = target_model(alpha, coef, student, "online", false, K, M, 1.0, 0.0, noise);
  LargeBatchOptions opt = large_batch_options(gamma0, alpha_b, steps, spherical);
  if (!(std::isfinite(lr_bias) && lr_bias >= 0.0))
    throw std::invalid_argument("lr_bias: expected a finite step >= 0");
  if (!bias.is_none()) {  // the students' biases (K,), finite: fixed, or trained with lr_bias > 0
    const Array b = bias.cast<Array>();
    expect_shape(b, "bias", {K});
    opt.bias.assign(b.data(), b.data() + K);
    for (double x : opt.bias)
      if (!std::isfinite(x)) throw std::invalid_argument("bias: expected finite biases");
    opt.lr_bias = lr_bias;
  } else if (lr_bias != 0.0) {
    opt.bias.assign(static_cast<std::size_t>(K), 0.0);
    opt.lr_bias = lr_bias;
  }
  std::vector<double> rows;
  return run_cancellable([&] { return iterate_large_batch(model, y.data(), opt, n_threads, &rows); },
                         [&](const IntegrateResult& r) {
                           py::dict d = to_dict(r, K, M);
                           if (!opt.bias.empty()) {  // the biases of every recorded row (T, K)
                             const auto T = static_cast<py::ssize_t>(rows.size() / static_cast<std::size_t>(K));
                             Array b({T, static_cast<py::ssize_t>(K)});
                             std::copy(rows.begin(), rows.end(), b.mutable_data());
                             d["bias"] = b;
                           }
                           return d;
                         });
}

void bind_rhs(py::module_& m) {
  def_with(m, "divergence", &divergence, state_names(),
           std::make_tuple(py::arg("P"), py::arg("v"), py::arg("Q0"), py::arg("M0"), py::arg("a0"),
                           "Why the state (Q, M, a) of a run that started at (Q0, M0, a0), teacher P and v, has "
                           "diverged by the rule of every engine (divergence.hpp); '' if it has not."));
  def_with(m, "ode_rhs", &ode_rhs, state_names(), committee_names(), model_names(),
           std::make_tuple(py::arg("n_threads") = 1), bias_names());
  def_with(m, "ode_rhs_lanes", &ode_rhs_lanes, state_names(),
           std::make_tuple(py::arg("P"), py::arg("v"), py::arg("act")), model_names(),
           std::make_tuple(py::arg("lanes"), py::arg("bias") = py::none(), py::arg("teacher_bias") = py::none(),
                           py::arg("lr_bias") = py::none(), py::arg("teacher_act") = py::none(),
                           "The structure-of-arrays right-hand side and risk (batch_dynamics.hpp "
                           "committee_rhs_lanes; sin and cos: batch_dynamics_trig.hpp) of B members of one shape "
                           "whose student and teacher share the activation act, `lanes` (1 or 8) at a time: (dQ, dM, "
                           "da, risk). With bias (B, K), teacher_bias (B, M) and lr_bias (B,), erf, sin or cos "
                           "committees with biases (batch_dynamics_bias.hpp, batch_dynamics_trig.hpp): (dQ, dM, da, "
                           "db, risk). teacher_act (default act): the teachers' activation (sin with cos). For "
                           "tests."));
  def_with(m, "ode_rhs_timing", &ode_rhs_timing, state_names(), committee_names(),
           std::make_tuple(py::arg("regime"), py::arg("lr"), py::arg("noise"), py::arg("evals"),
                           py::arg("n_threads") = 1));
  def_with(m, "ode_rhs_target", &ode_rhs_target, state_names(), target_names(), model_names(),
           std::make_tuple(py::arg("evals") = 1, py::arg("n_threads") = 1), bias_names());
}

void bind_integrate(py::module_& m) {
  def_with(m, "ode_integrate", &ode_integrate, state_names(), committee_names(), model_names(), grid_names(),
           std::make_tuple(py::arg("h0") = 0.0, py::arg("h_max") = 0.0, py::arg("risk_tol") = 0.0,
                           py::arg("risk_rtol") = 0.0, py::arg("max_steps") = 100000000LL, py::arg("n_threads") = 1,
                           py::arg("schedule") = py::none()),
           bias_names());
  def_with(m, "ode_integrate_target", &ode_integrate_target, state_names(), target_names(), model_names(),
           grid_names(),
           std::make_tuple(py::arg("h_max"), py::arg("risk_tol"), py::arg("risk_rtol"), py::arg("max_steps"),
                           py::arg("schedule") = py::none()),
           bias_names());
  def_with(m, "ode_integrate_batch", &ode_integrate_batch, state_names(), committee_names(), model_names(),
           grid_names(),
           std::make_tuple(py::arg("h0"), py::arg("h_max"), py::arg("risk_tol"), py::arg("risk_rtol"),
                           py::arg("max_steps"), py::arg("n_threads") = 0, py::arg("progress") = py::none(),
                           py::arg("schedule") = py::none(), py::arg("targets") = py::none(),
                           py::arg("out") = py::none(), py::arg("members") = py::none(),
                           py::arg("device") = "cpu", py::arg("bias") = py::none(),
                           py::arg("teacher_bias") = py::none(), py::arg("lr_bias") = py::none()));
}

void bind_large_batch(py::module_& m) {
  def_with(m, "large_batch_iterate", &large_batch_iterate, state_names(), committee_names(),
           std::make_tuple(py::arg("gamma0"), py::arg("alpha"), py::arg("steps"), py::arg("noise"),
                           py::arg("spherical"), py::arg("n_threads") = 1),
           bias_names());
  def_with(m, "large_batch_iterate_target", &large_batch_iterate_target, state_names(), target_names(),
           std::make_tuple(py::arg("gamma0"), py::arg("batch_ratio"), py::arg("steps"), py::arg("noise"),
                           py::arg("spherical"), py::arg("bias") = py::none(), py::arg("lr_bias") = 0.0,
                           py::arg("n_threads") = 1));
}

}  // namespace

void bind_ode(py::module_& m) {
  bind_rhs(m);
  bind_integrate(m);
  bind_large_batch(m);
}

}  // namespace twolayer::bind

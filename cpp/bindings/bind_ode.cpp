// Bindings for the order-parameter ODE: argument checks, GIL release, result arrays. No maths here.
#include <chrono>
#include <string>
#include <vector>

#include "common.hpp"
#include "interrupt.hpp"
#include "twolayer/activation.hpp"
#include "twolayer/dynamics.hpp"
#include "twolayer/integrators.hpp"

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

// Model from (P, v) arrays; K from the state size.
OdeModel make_model(const std::string& student, const std::string& teacher, const std::string& regime, bool spherical,
                    int K, double lr, double lr_readout, double noise, const Array& P, const Array& v) {
  expect_shape(v, "v", {-1});
  const auto M = v.shape(0);
  expect_shape(P, "P", {M, M});
  OdeModel m;
  m.student = parse_activation(student);
  m.teacher = parse_activation(teacher);
  m.K = K;
  m.M = static_cast<int>(M);
  m.regime = parse_regime(regime);
  m.spherical = spherical;
  m.lr = lr;
  m.lr_readout = lr_readout;
  m.noise = noise;
  m.P.assign(P.data(), P.data() + M * M);
  m.v.assign(v.data(), v.data() + M);
  validate_model(m);
  return m;
}

IntegrateOptions make_options(const std::vector<double>& times, const std::string& method, double dt, double rtol,
                              double atol, double h0, double h_max, double risk_tol, long long max_steps) {
  IntegrateOptions o;
  o.method = parse_method(method);
  o.times = times;
  o.dt = dt;
  o.rtol = rtol;
  o.atol = atol;
  o.h0 = h0;
  o.h_max = h_max;
  o.risk_tol = risk_tol;
  o.max_steps = max_steps;
  return o;
}

py::dict to_dict(const IntegrateResult& r, int K, int M) {
  const auto T = static_cast<py::ssize_t>(r.t.size());
  const std::size_t n = static_cast<std::size_t>(K) * K + static_cast<std::size_t>(K) * M + K;
  Array t({T}), risk({T}), Q({T, static_cast<py::ssize_t>(K), static_cast<py::ssize_t>(K)}),
      Mo({T, static_cast<py::ssize_t>(K), static_cast<py::ssize_t>(M)}), a({T, static_cast<py::ssize_t>(K)});
  double *pt = t.mutable_data(), *pr = risk.mutable_data(), *pq = Q.mutable_data(), *pm = Mo.mutable_data(),
         *pa = a.mutable_data();
  for (py::ssize_t s = 0; s < T; ++s) {
    pt[s] = r.t[s];
    pr[s] = r.risk[s];
    const double* y = r.y.data() + static_cast<std::size_t>(s) * n;
    std::copy(y, y + K * K, pq + s * K * K);
    std::copy(y + K * K, y + K * K + K * M, pm + s * K * M);
    std::copy(y + K * K + K * M, y + n, pa + s * K);
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
  return d;
}

std::vector<double> state(const Array& Q, const Array& Mo, const Array& a, int& K, int& M) {
  expect_shape(a, "a", {-1});
  expect_shape(Mo, "M", {a.shape(0), -1});
  if (a.shape(0) + Mo.shape(1) > kMaxUnits)
    throw std::invalid_argument("K + M: expected at most " + std::to_string(kMaxUnits) + " units in all, got " +
                                std::to_string(a.shape(0) + Mo.shape(1)));
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

std::vector<Array> to_arrays(const py::list& l) {
  std::vector<Array> out;
  out.reserve(l.size());
  for (const auto& item : l) out.push_back(py::cast<Array>(item));
  return out;
}

}  // namespace

void bind_ode(py::module_& m) {
  m.def(
      "ode_rhs",
      [](const Array& Q, const Array& Mo, const Array& a, const Array& P, const Array& v, const std::string& student,
         const std::string& teacher, const std::string& regime, bool spherical, double lr, double lr_readout,
         double noise, int n_threads) {
        int K, M;
        std::vector<double> y = state(Q, Mo, a, K, M);
        OdeModel model = make_model(student, teacher, regime, spherical, K, lr, lr_readout, noise, P, v);
        if (model.M != M) throw std::invalid_argument("M: its columns must match the teacher's units");
        std::vector<double> dy(y.size());
        {
          py::gil_scoped_release release;
          OdeRhs f(model);
          f(y.data(), dy.data(), n_threads);
        }
        Array dQ({K, K}), dM({K, M}), da({K});
        std::copy(dy.begin(), dy.begin() + K * K, dQ.mutable_data());
        std::copy(dy.begin() + K * K, dy.begin() + K * K + K * M, dM.mutable_data());
        std::copy(dy.begin() + K * K + K * M, dy.end(), da.mutable_data());
        return py::make_tuple(dQ, dM, da);
      },
      py::arg("Q"), py::arg("M"), py::arg("a"), py::arg("P"), py::arg("v"), py::arg("act"), py::arg("act_teacher"),
      py::arg("regime"), py::arg("spherical"), py::arg("lr"), py::arg("lr_readout"), py::arg("noise"),
      py::arg("n_threads") = 1);
  m.def(
      "ode_rhs_timing",
      [](const Array& Q, const Array& Mo, const Array& a, const Array& P, const Array& v, const std::string& student,
         const std::string& teacher, const std::string& regime, double lr, double noise, long long evals,
         int n_threads) {
        int K, M;
        std::vector<double> y = state(Q, Mo, a, K, M);
        OdeModel model = make_model(student, teacher, regime, false, K, lr, 0.0, noise, P, v);
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
      },
      py::arg("Q"), py::arg("M"), py::arg("a"), py::arg("P"), py::arg("v"), py::arg("act"), py::arg("act_teacher"),
      py::arg("regime"), py::arg("lr"), py::arg("noise"), py::arg("evals"), py::arg("n_threads") = 1);
  m.def(
      "ode_integrate",
      [](const Array& Q, const Array& Mo, const Array& a, const Array& P, const Array& v, const std::string& student,
         const std::string& teacher, const std::string& regime, bool spherical, double lr, double lr_readout,
         double noise, const Array& times_arr, const std::string& method, double dt, double rtol,
         double atol, double h0, double h_max, double risk_tol, long long max_steps, int n_threads) {
        int K, M;
        std::vector<double> y = state(Q, Mo, a, K, M);
        OdeModel model = make_model(student, teacher, regime, spherical, K, lr, lr_readout, noise, P, v);
        if (model.M != M) throw std::invalid_argument("M: its columns must match the teacher's units");
        const std::vector<double> times = to_vector(times_arr, "times");
        IntegrateOptions opt = make_options(times, method, dt, rtol, atol, h0, h_max, risk_tol, max_steps);
        return run_cancellable([&] { return integrate(model, y.data(), opt, n_threads); },
                               [&](const IntegrateResult& r) { return to_dict(r, K, M); });
      },
      py::arg("Q"), py::arg("M"), py::arg("a"), py::arg("P"), py::arg("v"), py::arg("act"), py::arg("act_teacher"),
      py::arg("regime"), py::arg("spherical"), py::arg("lr"), py::arg("lr_readout"), py::arg("noise"),
      py::arg("times"), py::arg("method"), py::arg("dt"), py::arg("rtol"), py::arg("atol"), py::arg("h0") = 0.0,
      py::arg("h_max") = 0.0, py::arg("risk_tol") = 0.0, py::arg("max_steps") = 100000000LL,
      py::arg("n_threads") = 1);
  m.def(
      "ode_integrate_batch",
      [](const py::list& Ql, const py::list& Ml, const py::list& al, const py::list& Pl, const py::list& vl,
         const std::string& student, const std::string& teacher, const std::string& regime, bool spherical,
         const Array& lr_arr, const Array& lr_readout_arr, const Array& noise_arr, const Array& times_arr,
         const std::string& method, double dt, double rtol, double atol, double h0, double h_max, double risk_tol,
         long long max_steps, int n_threads) {
        const std::vector<Array> Qs = to_arrays(Ql), Ms = to_arrays(Ml), as = to_arrays(al), Ps = to_arrays(Pl),
                                 vs = to_arrays(vl);
        const std::vector<double> lrs = to_vector(lr_arr, "lr"), lr_readouts = to_vector(lr_readout_arr, "lr_readout"),
                                  noises = to_vector(noise_arr, "noise");
        const std::size_t B = Qs.size();
        for (const auto* lst : {&Ms, &as, &Ps, &vs})
          if (lst->size() != B) throw std::invalid_argument("overlaps: every batch list must have the same length");
        if (lrs.size() != B || lr_readouts.size() != B || noises.size() != B)
          throw std::invalid_argument("lr, lr_readout, noise: one value per batch member expected");
        std::vector<OdeModel> models(B);
        std::vector<std::vector<double>> ys(B);
        std::vector<const double*> y0s(B);
        std::vector<int> Ks(B), Mts(B);
        for (std::size_t b = 0; b < B; ++b) {
          ys[b] = state(Qs[b], Ms[b], as[b], Ks[b], Mts[b]);
          models[b] = make_model(student, teacher, regime, spherical, Ks[b], lrs[b], lr_readouts[b], noises[b], Ps[b],
                                 vs[b]);
          if (models[b].M != Mts[b]) throw std::invalid_argument("M: its columns must match the teacher's units");
          y0s[b] = ys[b].data();
        }
        const std::vector<double> times = to_vector(times_arr, "times");
        IntegrateOptions opt = make_options(times, method, dt, rtol, atol, h0, h_max, risk_tol, max_steps);
        return run_cancellable([&] { return integrate_batch(models, y0s, opt, n_threads); },
                               [&](const std::vector<IntegrateResult>& rs) {
                                 py::list out;
                                 for (std::size_t b = 0; b < B; ++b) out.append(to_dict(rs[b], Ks[b], Mts[b]));
                                 return out;
                               });
      },
      py::arg("Q"), py::arg("M"), py::arg("a"), py::arg("P"), py::arg("v"), py::arg("act"), py::arg("act_teacher"),
      py::arg("regime"), py::arg("spherical"), py::arg("lr"), py::arg("lr_readout"), py::arg("noise"),
      py::arg("times"), py::arg("method"), py::arg("dt"), py::arg("rtol"), py::arg("atol"), py::arg("h0") = 0.0,
      py::arg("h_max") = 0.0, py::arg("risk_tol") = 0.0, py::arg("max_steps") = 100000000LL,
      py::arg("n_threads") = 0);
}

}  // namespace twolayer::bind

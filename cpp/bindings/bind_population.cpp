// Bindings for population risk, gradient, Hessian and weight-space gradient descent.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/stl.h>

#include "common.hpp"
#include "interrupt.hpp"
#include "schedule_arg.hpp"
#include "twolayer/activation.hpp"
#include "twolayer/population.hpp"

namespace twolayer::bind {

namespace {

struct Args {
  Array W, a, Wt, v;
  Population p;
};

Args make(const Array& W, const Array& a, const std::string& act, const Array& Wt, const Array& v,
          const std::string& act_t, double scale) {
  expect_shape(W, "student.W", {-1, -1});
  const auto K = W.shape(0), d = W.shape(1);
  expect_shape(a, "student.a", {K});
  expect_shape(Wt, "teacher.W", {-1, d});
  const auto M = Wt.shape(0);
  expect_shape(v, "teacher.a", {M});
  if (!(scale > 0.0)) throw std::invalid_argument("scale: must be positive");
  Args r{W, a, Wt, v, {}};
  r.p.student = Layer{r.W.data(), r.a.data(), dimension(K, "student units"), parse_activation(act)};
  r.p.teacher = Layer{r.Wt.data(), r.v.data(), dimension(M, "teacher units"), parse_activation(act_t)};
  r.p.d = dimension(d, "d");
  r.p.scale = scale;
  return r;
}

// The biases (K and M entries) of a pair: checked shapes and finite entries.
Biases biases(const Args& g, const Array& b, const Array& bt) {
  expect_shape(b, "student.bias", {g.p.student.units});
  expect_shape(bt, "teacher.bias", {g.p.teacher.units});
  for (const auto& [x, name] : {std::pair<const Array*, const char*>{&b, "student.bias"}, {&bt, "teacher.bias"}})
    for (py::ssize_t k = 0; k < x->shape(0); ++k)
      if (!std::isfinite(x->data()[k])) throw std::invalid_argument(std::string(name) + ": must be finite");
  return Biases{b.data(), bt.data()};
}

// Kernel evaluations times d, above which a call runs on a worker thread that Ctrl-C can stop.
bool long_call(const Population& p) {
  const double K = p.student.units, M = p.teacher.units;
  return K * (K + M) * p.d > 1e6;
}

Array copy_of(const Array& x) {
  std::vector<py::ssize_t> shape(x.shape(), x.shape() + x.ndim());
  Array out = new_array(shape);
  std::copy(x.data(), x.data() + x.size(), out.mutable_data());
  return out;
}

// The records of a descent as a dict (Q, M, a, risk, the final W and a_final; with biases bias and b_final).
py::dict descent_dict(const DescentResult& res, const Array& W, const Array& a, const Array* b, py::ssize_t M) {
  const auto T = static_cast<py::ssize_t>(res.recorded), K = W.shape(0);
  auto to_array = [](const std::vector<double>& x, std::vector<py::ssize_t> shape) {
    Array out(shape);
    std::copy(x.begin(), x.end(), out.mutable_data());
    return out;
  };
  py::dict out;
  out["Q"] = to_array(res.Q, {T, K, K});
  out["M"] = to_array(res.M, {T, K, M});
  out["a"] = to_array(res.a, {T, K});
  out["risk"] = to_array(res.risk, {T});
  out["W"] = W;
  out["a_final"] = a;
  if (b) {
    out["bias"] = to_array(res.bias, {T, K});
    out["b_final"] = *b;
  }
  out["status"] = res.status;
  out["stop_step"] = res.stop_step;
  return out;
}

}  // namespace

void bind_population(py::module_& m) {
  m.def(
      "population_risk",
      [](const Array& W, const Array& a, const std::string& act, const Array& Wt, const Array& v,
         const std::string& act_t, double scale, int n_threads) {
        Args g = make(W, a, act, Wt, v, act_t, scale);
        return run_cancellable([&] { return population_risk(g.p, n_threads); }, [](double r) { return py::float_(r); },
                               long_call(g.p));
      },
      py::arg("W"), py::arg("a"), py::arg("act"), py::arg("W_teacher"), py::arg("v"), py::arg("act_teacher"),
      py::arg("scale"), py::arg("n_threads") = 0);
  m.def(
      "population_gradient",
      [](const Array& W, const Array& a, const std::string& act, const Array& Wt, const Array& v,
         const std::string& act_t, double scale, int n_threads) {
        Args g = make(W, a, act, Wt, v, act_t, scale);
        Array dW = new_array({W.shape(0), W.shape(1)});
        Array da = new_array({W.shape(0)});
        double *pw = dW.mutable_data(), *pa = da.mutable_data();
        return run_cancellable(
            [&] {
              population_gradient(g.p, pw, pa, n_threads);
              return 0;
            },
            [&](int) { return py::make_tuple(dW, da); }, long_call(g.p));
      },
      py::arg("W"), py::arg("a"), py::arg("act"), py::arg("W_teacher"), py::arg("v"), py::arg("act_teacher"),
      py::arg("scale"), py::arg("n_threads") = 0);
  m.def(
      "population_hessian",
      [](const Array& W, const Array& a, const std::string& act, const Array& Wt, const Array& v,
         const std::string& act_t, double scale, bool train_readout, int n_threads) {
        Args g = make(W, a, act, Wt, v, act_t, scale);
        const py::ssize_t n = W.shape(0) * W.shape(1) + (train_readout ? W.shape(0) : 0);
        Array H = new_array({n, n});
        double* ph = H.mutable_data();
        return run_cancellable(
            [&] {
              population_hessian(g.p, train_readout, ph, n_threads);
              return 0;
            },
            [&](int) { return py::object(H); }, long_call(g.p) || n > 1000);
      },
      py::arg("W"), py::arg("a"), py::arg("act"), py::arg("W_teacher"), py::arg("v"), py::arg("act_teacher"),
      py::arg("scale"), py::arg("train_readout"), py::arg("n_threads") = 0);
  m.def(
      "overlap_risk_mean",
      [](const Array& Q, const Array& M, const Array& P, const Array& a, const Array& v, const Array& b,
         const Array& bt, const std::string& act, const std::string& act_t) {
        // The excess risk with biases from the overlaps (population.hpp overlap_risk_mean, what SGD records).
        expect_shape(Q, "Q", {-1, -1});
        const auto K = Q.shape(0);
        expect_shape(Q, "Q", {K, K});
        expect_shape(M, "M", {K, -1});
        const auto Mt = M.shape(1);
        expect_shape(P, "P", {Mt, Mt});
        expect_shape(a, "a", {K});
        expect_shape(v, "v", {Mt});
        expect_shape(b, "bias", {K});
        expect_shape(bt, "teacher_bias", {Mt});
        const Activation s = parse_activation(act), t = parse_activation(act_t);
        const int k = dimension(K, "student units"), mt = dimension(Mt, "teacher units");
        py::gil_scoped_release release;
        return overlap_risk_mean(Q.data(), M.data(), P.data(), a.data(), v.data(), b.data(), bt.data(), k, mt, s, t);
      },
      py::arg("Q"), py::arg("M"), py::arg("P"), py::arg("a"), py::arg("v"), py::arg("bias"), py::arg("teacher_bias"),
      py::arg("act"), py::arg("act_teacher"));
  m.def(
      "population_descend",
      [](const Array& W0, const Array& a0, const std::string& act, const Array& Wt, const Array& v,
         const std::string& act_t, double scale, double lr, double lr_readout, long long steps,
         const std::vector<long long>& record_steps, int n_threads, const py::object& schedule_obj) {
        Args g = make(W0, a0, act, Wt, v, act_t, scale);
        const Schedule schedule = schedule_arg(schedule_obj);
        Array W = copy_of(W0), a = copy_of(a0);
        double *pw = W.mutable_data(), *pa = a.mutable_data();
        return run_cancellable(
            [&] { return population_descend(pw, pa, g.p, lr, lr_readout, steps, record_steps, n_threads, &schedule);
            },
            [&](const DescentResult& res) { return descent_dict(res, W, a, nullptr, Wt.shape(0)); });
      },
      py::arg("W"), py::arg("a"), py::arg("act"), py::arg("W_teacher"), py::arg("v"), py::arg("act_teacher"),
      py::arg("scale"), py::arg("lr"), py::arg("lr_readout"), py::arg("steps"), py::arg("record_steps"),
      py::arg("n_threads") = 0, py::arg("schedule") = py::none());
  // With biases (population.hpp, the *_mean functions): a is the effective second layer, bias and teacher_bias the
  // layers' biases.
  m.def(
      "population_risk_mean",
      [](const Array& W, const Array& a, const std::string& act, const Array& Wt, const Array& v,
         const std::string& act_t, double scale, const Array& b, const Array& bt, int n_threads) {
        Args g = make(W, a, act, Wt, v, act_t, scale);
        const Biases bb = biases(g, b, bt);
        py::gil_scoped_release release;
        return population_risk_mean(g.p, bb, n_threads);
      },
      py::arg("W"), py::arg("a"), py::arg("act"), py::arg("W_teacher"), py::arg("v"), py::arg("act_teacher"),
      py::arg("scale"), py::arg("bias"), py::arg("teacher_bias"), py::arg("n_threads") = 0);
  m.def(
      "population_gradient_mean",
      [](const Array& W, const Array& a, const std::string& act, const Array& Wt, const Array& v,
         const std::string& act_t, double scale, const Array& b, const Array& bt, int n_threads) {
        Args g = make(W, a, act, Wt, v, act_t, scale);
        const Biases bb = biases(g, b, bt);
        Array dW = new_array({W.shape(0), W.shape(1)}), da = new_array({W.shape(0)}), db = new_array({W.shape(0)});
        double *pw = dW.mutable_data(), *pa = da.mutable_data(), *pb = db.mutable_data();
        return run_cancellable(
            [&] {
              population_gradient_mean(g.p, bb, pw, pa, pb, n_threads);
              return 0;
            },
            [&](int) { return py::make_tuple(dW, da, db); }, long_call(g.p));
      },
      py::arg("W"), py::arg("a"), py::arg("act"), py::arg("W_teacher"), py::arg("v"), py::arg("act_teacher"),
      py::arg("scale"), py::arg("bias"), py::arg("teacher_bias"), py::arg("n_threads") = 0);
  m.def(
      "population_hessian_mean",
      [](const Array& W, const Array& a, const std::string& act, const Array& Wt, const Array& v,
         const std::string& act_t, double scale, const Array& b, const Array& bt, bool train_readout,
         bool train_bias, int n_threads) {
        Args g = make(W, a, act, Wt, v, act_t, scale);
        const Biases bb = biases(g, b, bt);
        const py::ssize_t n = W.shape(0) * (W.shape(1) + (train_readout ? 1 : 0) + (train_bias ? 1 : 0));
        Array H = new_array({n, n});
        double* ph = H.mutable_data();
        return run_cancellable(
            [&] {
              population_hessian_mean(g.p, bb, train_readout, train_bias, ph, n_threads);
              return 0;
            },
            [&](int) { return py::object(H); }, long_call(g.p) || n > 1000);
      },
      py::arg("W"), py::arg("a"), py::arg("act"), py::arg("W_teacher"), py::arg("v"), py::arg("act_teacher"),
      py::arg("scale"), py::arg("bias"), py::arg("teacher_bias"), py::arg("train_readout"), py::arg("train_bias"),
      py::arg("n_threads") = 0);
  m.def(
      "population_descend_mean",
      [](const Array& W0, const Array& a0, const std::string& act, const Array& Wt, const Array& v,
         const std::string& act_t, double scale, const Array& b0, const Array& bt, double lr, double lr_readout,
         double lr_bias, long long steps, const std::vector<long long>& record_steps, int n_threads,
         const py::object& schedule_obj) {
        Args g = make(W0, a0, act, Wt, v, act_t, scale);
        (void)biases(g, b0, bt);
        const Schedule schedule = schedule_arg(schedule_obj);
        Array W = copy_of(W0), a = copy_of(a0), b = copy_of(b0);
        double *pw = W.mutable_data(), *pa = a.mutable_data(), *pb = b.mutable_data();
        return run_cancellable(
            [&] {
              return population_descend_mean(pw, pa, pb, g.p, bt.data(), lr, lr_readout, lr_bias, steps,
                                             record_steps, n_threads, &schedule);
            },
            [&](const DescentResult& res) { return descent_dict(res, W, a, &b, Wt.shape(0)); });
      },
      py::arg("W"), py::arg("a"), py::arg("act"), py::arg("W_teacher"), py::arg("v"), py::arg("act_teacher"),
      py::arg("scale"), py::arg("bias"), py::arg("teacher_bias"), py::arg("lr"), py::arg("lr_readout"),
      py::arg("lr_bias"), py::arg("steps"), py::arg("record_steps"), py::arg("n_threads") = 0,
      py::arg("schedule") = py::none());
}

}  // namespace twolayer::bind

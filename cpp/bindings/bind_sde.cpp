// Bindings for the SDE of online SGD (sde.hpp): shape checks, GIL release, Ctrl-C through run_cancellable.
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common.hpp"
#include "interrupt.hpp"
#include "target_arg.hpp"
#include "twolayer/activation.hpp"
#include "twolayer/divergence.hpp"
#include "twolayer/sde.hpp"

namespace twolayer::bind {

namespace {
using U32Array = py::array_t<std::uint32_t, py::array::c_style | py::array::forcecast>;
using I64Array = py::array_t<long long, py::array::c_style | py::array::forcecast>;

std::vector<double> vec(const Array& a) { return std::vector<double>(a.data(), a.data() + a.size()); }

OdeModel sde_model(const std::string& act, const std::string& act_t, bool spherical, int K, double lr,
                   double lr_readout, double noise, const Array& P, const Array& v, const py::object& t_alpha,
                   const py::object& t_coef, const py::object& teacher_bias, double lr_bias) {
  expect_shape(v, "v", {-1});
  const auto M = v.shape(0);
  expect_shape(P, "P", {M, M});
  if (K + M > kMaxUnits) throw std::invalid_argument("K + M: too many units");
  OdeModel m;
  m.student = parse_activation(act);
  m.teacher = parse_activation(act_t);
  m.K = K;
  m.M = static_cast<int>(M);
  m.regime = Regime::Online;
  m.spherical = spherical;
  m.lr = lr;
  m.lr_readout = lr_readout;
  m.noise = noise;
  m.P.assign(P.data(), P.data() + M * M);
  m.v.assign(v.data(), v.data() + M);
  if (!t_alpha.is_none()) {  // a polynomial target (target.hpp): Python passes P = I_k, v = 0
    m.target = make_target(t_alpha.cast<IntArray>(), t_coef.cast<Array>());
    m.teacher = Activation::Linear;
  }
  if (!teacher_bias.is_none()) {  // a model with biases: the state ends with the student's b (dynamics.hpp)
    const Array bt = teacher_bias.cast<Array>();
    expect_shape(bt, "teacher_bias", {M});
    m.biased = true;
    m.teacher_bias = vec(bt);
    m.lr_bias = lr_bias;
  }
  validate_model(m);
  return m;
}

}  // namespace

void bind_sde(py::module_& m) {
  m.def(
      "sde_increment_moments",
      [](const Array& y, int K, const Array& P, const Array& v, const std::string& act, const std::string& act_t,
         bool spherical, double lr, double lr_readout, double noise, const Array& nodes, const Array& weights,
         const py::object& target_alpha, const py::object& target_coef, const py::object& teacher_bias,
         double lr_bias) {
        OdeModel model = sde_model(act, act_t, spherical, K, lr, lr_readout, noise, P, v, target_alpha, target_coef,
                                   teacher_bias, lr_bias);
        expect_shape(y, "y", {static_cast<py::ssize_t>(model.state_size())});
        IncrementMoments mom(model, vec(nodes), vec(weights));
        const auto nc = static_cast<py::ssize_t>(mom.n_components());
        Array mean = new_array({nc}), cov = new_array({nc, nc});
        double *pmean = mean.mutable_data(), *pcov = cov.mutable_data();
        const double* py = y.data();
        // Up to 2^26 quadrature points (seconds): on the worker, so that Ctrl-C stops it.
        return run_cancellable([&] { return mom(py, pmean, pcov); }, [&](bool ok) -> py::object {
          if (!ok) throw std::invalid_argument("overlaps: Omega = [[Q, M], [M^T, P]] is not positive semi-definite");
          return py::make_tuple(mean, cov);
        });
      },
      py::arg("y"), py::arg("K"), py::arg("P"), py::arg("v"), py::arg("act"), py::arg("act_teacher"),
      py::arg("spherical"), py::arg("lr"), py::arg("lr_readout"), py::arg("noise"), py::arg("nodes"),
      py::arg("weights"), py::arg("target_alpha") = py::none(), py::arg("target_coef") = py::none(),
      py::arg("teacher_bias") = py::none(), py::arg("lr_bias") = 0.0);

  m.def(
      "sde_simulate",
      [](const Array& y0, int K, const Array& P, const Array& v, const std::string& act, const std::string& act_t,
         bool spherical, double lr, double lr_readout, double noise, int d, double dt, long long steps,
         const I64Array& record_steps, const Array& nodes, const Array& weights, std::uint64_t seed,
         const U32Array& runs_arr, double risk_tol, double risk_rtol, int n_threads, const py::object& progress,
         const py::object& target_alpha, const py::object& target_coef, const py::object& teacher_bias,
         double lr_bias) {
        SdeSpec sp;
        sp.model = sde_model(act, act_t, spherical, K, lr, lr_readout, noise, P, v, target_alpha, target_coef,
                             teacher_bias, lr_bias);
        sp.d = d;
        sp.dt = dt;
        sp.steps = steps;
        sp.record_steps.assign(record_steps.data(), record_steps.data() + record_steps.size());
        sp.nodes = vec(nodes);
        sp.weights = vec(weights);
        sp.seed = seed;
        sp.risk_tol = risk_tol;
        sp.risk_rtol = risk_rtol;
        const std::vector<std::uint32_t> runs(runs_arr.data(), runs_arr.data() + runs_arr.size());
        const auto R = static_cast<py::ssize_t>(runs.size());
        if (R < 1) throw std::invalid_argument("seeds: need at least one path");
        const auto S = static_cast<py::ssize_t>(sp.model.state_size());
        const bool per_path = y0.ndim() == 2;
        if (per_path) expect_shape(y0, "y0", {R, S});
        else expect_shape(y0, "y0", {S});
        const auto T = static_cast<py::ssize_t>(sp.record_steps.size()) + 1;  // + the crossing row
        const py::ssize_t M = sp.model.M;
        RunRows rows(R, T, K, M);
        std::vector<SdeOut> outs(static_cast<std::size_t>(R));
        const bool biased = sp.model.biased;
        Array bias_rows = biased ? new_array({R, T, K}) : new_array({0});
        for (py::ssize_t j = 0; j < R; ++j) {
          rows.point(outs[static_cast<std::size_t>(j)], j);
          if (biased) outs[static_cast<std::size_t>(j)].b = bias_rows.mutable_data() + j * T * K;
        }
        std::atomic<long long> done{0};
        Poll poll;
        if (!progress.is_none()) poll.with_gil = [&] { progress(done.load(std::memory_order_relaxed)); };
        const double* py0 = y0.data();
        auto work = [&] {
          sde_simulate(sp, py0, per_path ? static_cast<std::size_t>(S) : 0, runs.data(), runs.size(), outs.data(),
                       n_threads, &done);
          return 0;
        };
        auto to_py = [&](int) {
          py::array_t<long long> recorded(R), status(R);
          Array stop_time = new_array({R});
          for (py::ssize_t j = 0; j < R; ++j) {
            const SdeOut& o = outs[static_cast<std::size_t>(j)];
            stop_time.mutable_at(j) = o.stop_time;
            recorded.mutable_at(j) = static_cast<long long>(o.recorded);
            status.mutable_at(j) = o.status;
          }
          py::dict out;
          rows.put(out);
          if (biased) out["bias"] = bias_rows;
          out["recorded"] = recorded;
          out["status"] = status;
          out["stop_time"] = stop_time;
          py::list reason;  // why a path diverged (divergence.hpp), "" for the others
          for (const SdeOut& o : outs) reason.append(o.reason ? divergence_message(o.reason) : "");
          out["reason"] = reason;
          return out;
        };
        return run_cancellable(work, to_py, true, poll);
      },
      py::arg("y0"), py::arg("K"), py::arg("P"), py::arg("v"), py::arg("act"), py::arg("act_teacher"),
      py::arg("spherical"), py::arg("lr"), py::arg("lr_readout"), py::arg("noise"), py::arg("d"), py::arg("dt"),
      py::arg("steps"), py::arg("record_steps"), py::arg("nodes"), py::arg("weights"), py::arg("seed"),
      py::arg("runs"), py::arg("risk_tol"), py::arg("risk_rtol"), py::arg("n_threads") = 0,
      py::arg("progress") = py::none(), py::arg("target_alpha") = py::none(), py::arg("target_coef") = py::none(),
      py::arg("teacher_bias") = py::none(), py::arg("lr_bias") = 0.0);
}

}  // namespace twolayer::bind

// Bindings for the loss-landscape search (batched L-BFGS). Shape checks and GIL release only.
#include <atomic>
#include <string>

#include "common.hpp"
#include "interrupt.hpp"
#include "twolayer/activation.hpp"
#include "twolayer/landscape.hpp"

namespace twolayer::bind {

void bind_landscape(py::module_& m) {
  m.def(
      "multistart_lbfgs",
      [](const Array& W0, const Array& a0, const std::string& act, const Array& Wt, const Array& v,
         const std::string& act_t, double scale, bool train_readout, int max_iter, double gtol, int memory,
         int n_threads, const py::object& progress, const py::object& b_obj,
         const py::object& bt_obj, bool train_bias) {
        expect_shape(W0, "W", {-1, -1, -1});
        const auto R = W0.shape(0), K = W0.shape(1), d = W0.shape(2);
        expect_shape(a0, "a", {R, K});
        expect_shape(Wt, "teacher.W", {-1, d});
        const auto M = Wt.shape(0);
        expect_shape(v, "teacher.a", {M});
        if (!(scale > 0.0)) throw std::invalid_argument("scale: must be positive");
        if (max_iter < 0) throw std::invalid_argument("max_iter: must be non-negative");
        if (!(gtol >= 0.0)) throw std::invalid_argument("gtol: must be non-negative");
        const bool biased = !b_obj.is_none();  // a model with biases: the students' b (runs x K) and the teacher's
        if (biased == bt_obj.is_none())
          throw std::invalid_argument("b, teacher_bias: expected both (with biases) or neither");
        if (train_bias && !biased) throw std::invalid_argument("b: train_bias needs the students' biases");
        const Array b0 = biased ? b_obj.cast<Array>() : Array({R, K});
        const Array bt = biased ? bt_obj.cast<Array>() : Array({M});
        expect_shape(b0, "b", {R, K});
        expect_shape(bt, "teacher_bias", {M});
        Array W({R, K, d}), a({R, K}), loss({R}), gnorm({R}), b({R, K});
        if (biased) std::copy(b0.data(), b0.data() + R * K, b.mutable_data());
        py::array_t<int> iters({R}), status({R});
        std::copy(W0.data(), W0.data() + R * K * d, W.mutable_data());
        std::copy(a0.data(), a0.data() + R * K, a.mutable_data());
        Population p;
        p.student = Layer{nullptr, nullptr, dimension(K, "student units"), parse_activation(act)};
        p.teacher = Layer{Wt.data(), v.data(), dimension(M, "teacher units"), parse_activation(act_t)};
        p.d = dimension(d, "d");
        p.scale = scale;
        LbfgsOptions opt;
        opt.max_iter = max_iter;
        opt.gtol = gtol;
        opt.memory = memory;
        opt.train_readout = train_readout;
        opt.train_bias = train_bias;
        double *pw = W.mutable_data(), *pa = a.mutable_data(), *pl = loss.mutable_data(), *pg = gnorm.mutable_data();
        int *pi = iters.mutable_data(), *ps = status.mutable_data();
        std::atomic<long long> finished{0};
        Poll poll;
        if (!progress.is_none()) poll.with_gil = [&] { progress(finished.load(std::memory_order_relaxed)); };
        auto work = [&] {
          multistart_lbfgs(p, dimension(R, "runs"), pw, pa, opt, pl, pg, pi, ps, n_threads, &finished,
                           biased ? b.mutable_data() : nullptr, biased ? bt.data() : nullptr);
          return 0;
        };
        return run_cancellable(work, [&](int) {
          py::dict out;
          out["W"] = W;
          out["a"] = a;
          if (biased) out["b"] = b;
          out["loss"] = loss;
          out["grad_norm"] = gnorm;
          out["iterations"] = iters;
          out["status"] = status;
          return out;
        }, true, poll);
      },
      py::arg("W"), py::arg("a"), py::arg("act"), py::arg("W_teacher"), py::arg("v"), py::arg("act_teacher"),
      py::arg("scale"), py::arg("train_readout"), py::arg("max_iter"), py::arg("gtol"), py::arg("memory"),
      py::arg("n_threads") = 0, py::arg("progress") = py::none(), py::arg("b") = py::none(),
      py::arg("teacher_bias") = py::none(), py::arg("train_bias") = false);
}

}  // namespace twolayer::bind

// Bindings for the DMFT solver of full-batch gradient descent (dmft.hpp): shape checks, GIL release, Ctrl-C.
#include <cmath>
#include <cstdint>
#include <string>

#include "common.hpp"
#include "interrupt.hpp"
#include "twolayer/activation.hpp"
#include "twolayer/dmft.hpp"

namespace twolayer::bind {

void bind_dmft(py::module_& m) {
  m.def(
      "dmft_solve",
      [](const Array& a, const std::string& act, const Array& z, const Array& y, const Array& z_test,
         const Array& y_test, const Array& M0, const Array& C0, double lr, double ridge, double alpha, int n_steps,
         std::uint64_t seed, int n_threads, const py::object& bias, double lr_bias) {
        const py::ssize_t p = a.size();
        if (p < 1 || p > 64) throw std::invalid_argument("a: expected 1 to 64 student units, got " + std::to_string(p));
        if (z.ndim() != 3) throw std::invalid_argument("z: expected shape (G, S, k)");
        const py::ssize_t G = z.shape(0), S = z.shape(1), k = z.shape(2);
        expect_shape(y, "y", {G, S});
        expect_shape(z_test, "z_test", {G, S, k});
        expect_shape(y_test, "y_test", {G, S});
        expect_shape(M0, "M0", {p, k});
        expect_shape(C0, "C0", {p, p});
        if (n_steps < 0) throw std::invalid_argument("n_steps: expected >= 0");
        if (!(lr > 0.0) || !(ridge >= 0.0) || !(alpha > 0.0))
          throw std::invalid_argument("lr, alpha: expected > 0; ridge: expected >= 0");
        DmftProblem P;
        P.p = dimension(p, "p");
        P.k = dimension(k, "k");
        P.n_groups = G;
        P.n_mc = S;
        P.n_steps = n_steps;
        P.act = parse_activation(act);
        P.a = a.data();
        P.z = z.data();
        P.y = y.data();
        P.z_test = z_test.data();
        P.y_test = y_test.data();
        P.M0 = M0.data();
        P.C0 = C0.data();
        P.lr = lr;
        P.ridge = ridge;
        P.alpha = alpha;
        P.seed = seed;
        Array b0;
        if (!bias.is_none()) {
          b0 = bias.cast<Array>();
          expect_shape(b0, "bias", {p});
          P.b0 = b0.data();
        }
        if (!(lr_bias >= 0.0) || !std::isfinite(lr_bias))
          throw std::invalid_argument("lr_bias: expected a finite number >= 0");
        P.lr_bias = lr_bias;
        const py::ssize_t T1 = n_steps + 1;
        Array M = new_array({G, T1, p, k}), Q = new_array({G, T1, p, p}), train = new_array({G, T1}),
              test = new_array({G, T1}), B = new_array({G, T1, p});
        Array Ct = new_array({G, T1, T1, p, p}), Rt = new_array({G, T1, T1, p, p}), Cg = new_array({G, T1, T1, p, p}),
              Rg = new_array({G, T1, T1, p, p});
        for (Array* arr : {&M, &Q, &train, &test, &B, &Ct, &Rt, &Cg, &Rg})
          std::fill(arr->mutable_data(), arr->mutable_data() + arr->size(), 0.0);
        DmftOut out;
        out.M = M.mutable_data();
        out.Q = Q.mutable_data();
        out.train = train.mutable_data();
        out.test = test.mutable_data();
        out.bias = B.mutable_data();
        out.Ctheta = Ct.mutable_data();
        out.Rtheta = Rt.mutable_data();
        out.Cg = Cg.mutable_data();
        out.Rg = Rg.mutable_data();
        auto work = [&] {
          dmft_solve(P, out, n_threads);
          return 0;
        };
        auto to_py = [&](int) {
          py::dict d;
          d["M"] = M;
          d["Q"] = Q;
          d["train_risk"] = train;
          d["test_risk"] = test;
          d["bias"] = B;
          d["C_theta"] = Ct;
          d["R_theta"] = Rt;
          d["C_g"] = Cg;
          d["R_g"] = Rg;
          d["steps_done"] = out.steps_done;
          d["diverged"] = out.diverged;
          return d;
        };
        return run_cancellable(work, to_py);
      },
      py::arg("a"), py::arg("act"), py::arg("z"), py::arg("y"), py::arg("z_test"), py::arg("y_test"), py::arg("M0"),
      py::arg("C0"), py::arg("lr"), py::arg("ridge"), py::arg("alpha"), py::arg("n_steps"), py::arg("seed"),
      py::arg("n_threads") = 0, py::arg("bias") = py::none(), py::arg("lr_bias") = 0.0,
      "DMFT of full-batch gradient descent (twolayer.dmft.solve): G groups of S Monte Carlo samples, T + 1 "
      "records; returns a dict of arrays (group first) with steps_done and diverged.");
}

}  // namespace twolayer::bind

// Bindings for polynomial multi-index targets: labels, exact expectations, risk and its overlap gradient.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "common.hpp"
#include "target_arg.hpp"
#include "twolayer/activation.hpp"
#include "twolayer/target.hpp"

namespace twolayer::bind {

namespace {

// K of a student state (Q (K, K), M (K, k), a (K,)) against target t; a clear error naming the argument otherwise.
py::ssize_t student_units(const PolyTarget& t, const Array& Q, const Array& M, const Array& a) {
  expect_shape(a, "a", {-1});
  const py::ssize_t K = a.shape(0);
  expect_shape(Q, "Q", {K, K});
  expect_shape(M, "M", {K, t.k});
  return K;
}

// The students' biases (K,) or none (empty: zero); finite.
std::vector<double> bias_arg(const py::object& bias, py::ssize_t K) {
  if (bias.is_none()) return {};
  const Array b = bias.cast<Array>();
  expect_shape(b, "bias", {K});
  std::vector<double> out(b.data(), b.data() + K);
  for (double x : out)
    if (!std::isfinite(x)) throw std::invalid_argument("bias: expected finite biases");
  return out;
}

}  // namespace

void bind_target(py::module_& m) {
  m.def(
      "target_eval",
      [](const IntArray& alpha, const Array& coef, const Array& Z) {
        auto t = make_target(alpha, coef);
        expect_shape(Z, "z", {-1, t->k});
        const py::ssize_t n = Z.shape(0);
        Array y({n});
        {
          py::gil_scoped_release release;
          for (py::ssize_t j = 0; j < n; ++j) y.mutable_data()[j] = t->eval(Z.data() + j * t->k);
        }
        return y;
      },
      py::arg("alpha"), py::arg("coef"), py::arg("z"));
  // E[prod_s F_s(l_s) p(z)]: fields' covariance Qs (n, n), cross covariance Ms (n, k), factors (n, 3) rows
  // (n_deriv, n_sigma, power); p given like the target. factors (P, n, 3): P patterns on the same fields, taken
  // together as the ODE's tuples take them (an array of P values).
  m.def(
      "target_expectation",
      [](const std::string& act, const Array& Qs, const Array& Ms, const IntArray& factors, const IntArray& alpha,
         const Array& coef, const py::object& mu) -> py::object {
        auto t = make_target(alpha, coef);
        expect_shape(Qs, "Qs", {-1, -1});
        const py::ssize_t n = Qs.shape(0);
        if (n < 1 || n > 3) throw std::invalid_argument("Qs: expected 1 to 3 student fields");
        expect_shape(Qs, "Qs", {n, n});
        expect_shape(Ms, "Ms", {n, t->k});
        const bool many = factors.ndim() == 3;
        const py::ssize_t count = many ? factors.shape(0) : 1;
        if (!((factors.ndim() == 2 && factors.shape(0) == n && factors.shape(1) == 3) ||
              (many && count >= 1 && count <= 16 && factors.shape(1) == n && factors.shape(2) == 3)))
          throw std::invalid_argument("factors: expected shape (n, 3) or (P, n, 3) with 1 <= P <= 16");
        std::vector<FieldFactor> ff(static_cast<std::size_t>(count * n));
        const long long* fd = factors.data();
        for (std::size_t e = 0; e < ff.size(); ++e)
          ff[e] = {static_cast<int>(fd[3 * e]), static_cast<int>(fd[3 * e + 1]), static_cast<int>(fd[3 * e + 2])};
        std::vector<double> means;
        if (!mu.is_none()) {  // the fields' means (the biases)
          const Array m = mu.cast<Array>();
          expect_shape(m, "mu", {n});
          means.assign(m.data(), m.data() + n);
        }
        const double* mp = means.empty() ? nullptr : means.data();
        if (!many)
          return py::float_(t->f.empty() ? 0.0
                                         : target_expectation(parse_activation(act), static_cast<int>(n), Qs.data(),
                                                              Ms.data(), t->k, ff.data(), t->f, mp));
        Array out({count});
        std::fill(out.mutable_data(), out.mutable_data() + count, 0.0);
        if (!t->f.empty())
          target_expectation_patterns(parse_activation(act), static_cast<int>(n), Qs.data(), Ms.data(), t->k,
                                      ff.data(), static_cast<int>(count), t->f, out.mutable_data(), mp);
        return std::move(out);
      },
      py::arg("act"), py::arg("Qs"), py::arg("Ms"), py::arg("factors"), py::arg("alpha"), py::arg("coef"),
      py::arg("mu") = py::none());
  m.def(
      "target_risk",
      [](const IntArray& alpha, const Array& coef, const Array& Q, const Array& M, const Array& a,
         const std::string& act, const py::object& bias) {
        auto t = make_target(alpha, coef);
        const py::ssize_t K = student_units(*t, Q, M, a);
        const std::vector<double> b = bias_arg(bias, K);
        py::gil_scoped_release release;
        return target_risk(*t, Q.data(), M.data(), a.data(), static_cast<int>(K), parse_activation(act),
                           b.empty() ? nullptr : b.data());
      },
      py::arg("alpha"), py::arg("coef"), py::arg("Q"), py::arg("M"), py::arg("a"), py::arg("act"),
      py::arg("bias") = py::none());
  m.def(
      "target_cross_grad",
      [](const IntArray& alpha, const Array& coef, const Array& Q, const Array& M, const Array& a,
         const std::string& act, const py::object& bias) {
        auto t = make_target(alpha, coef);
        const py::ssize_t K = student_units(*t, Q, M, a);
        const std::vector<double> b = bias_arg(bias, K);
        Array dQ({K, K}), dM({K, static_cast<py::ssize_t>(t->k)}), sf({K}), db({K});
        {
          py::gil_scoped_release release;
          target_cross_grad(*t, Q.data(), M.data(), a.data(), static_cast<int>(K), parse_activation(act),
                            dQ.mutable_data(), dM.mutable_data(), sf.mutable_data(), b.empty() ? nullptr : b.data(),
                            db.mutable_data());
        }
        return py::make_tuple(dQ, dM, sf, db);
      },
      py::arg("alpha"), py::arg("coef"), py::arg("Q"), py::arg("M"), py::arg("a"), py::arg("act"),
      py::arg("bias") = py::none());
  // Per unit i (q_i = Q_ii, m_i = M[i]): Phi = E[sigma(l_i) f] and its (q, m) derivatives (target_unit_jet):
  // (phi (K), phi_q (K), phi_m (K, k), phi_qq (K), phi_qm (K, k), phi_mm (K, k, k)); with biases (K) also the
  // b-derivatives (phi_b (K), phi_bb (K), phi_bq (K), phi_bm (K, k)).
  m.def(
      "target_unit_jet",
      [](const IntArray& alpha, const Array& coef, const Array& q, const Array& M, const std::string& act,
         const py::object& bias_obj) {
        auto t = make_target(alpha, coef);
        expect_shape(q, "q", {-1});
        const py::ssize_t K = q.shape(0), k = t->k;
        expect_shape(M, "M", {K, k});
        const Activation a = parse_activation(act);
        const bool with_bias = !bias_obj.is_none();
        Array bias = with_bias ? bias_obj.cast<Array>() : Array(std::vector<py::ssize_t>{K});
        if (with_bias) {
          expect_shape(bias, "bias", {K});
          for (py::ssize_t i = 0; i < K; ++i)
            if (!std::isfinite(bias.data()[i])) throw std::invalid_argument("bias: must be finite");
        }
        Array phi({K}), phi_q({K}), phi_m({K, k}), phi_qq({K}), phi_qm({K, k}), phi_mm({K, k, k});
        Array phi_b({K}), phi_bb({K}), phi_bq({K}), phi_bm({K, k});
        {
          py::gil_scoped_release release;
          const std::size_t o = static_cast<std::size_t>(3 + 2 * k + k * k);
          std::vector<double> out(o + 3 + static_cast<std::size_t>(k));
          for (py::ssize_t i = 0; i < K; ++i) {
            target_unit_jet(*t, q.data()[i], M.data() + i * k, a, out.data(), with_bias ? bias.data() + i : nullptr);
            phi.mutable_data()[i] = out[0];
            phi_q.mutable_data()[i] = out[1];
            phi_qq.mutable_data()[i] = out[2 + k];
            for (py::ssize_t r = 0; r < k; ++r) {
              phi_m.mutable_data()[i * k + r] = out[2 + r];
              phi_qm.mutable_data()[i * k + r] = out[3 + k + r];
              for (py::ssize_t s = 0; s < k; ++s) phi_mm.mutable_data()[(i * k + r) * k + s] = out[3 + 2 * k + r * k + s];
            }
            if (!with_bias) continue;
            phi_b.mutable_data()[i] = out[o];
            phi_bb.mutable_data()[i] = out[o + 1];
            phi_bq.mutable_data()[i] = out[o + 2];
            for (py::ssize_t r = 0; r < k; ++r) phi_bm.mutable_data()[i * k + r] = out[o + 3 + r];
          }
        }
        if (!with_bias) return py::tuple(py::make_tuple(phi, phi_q, phi_m, phi_qq, phi_qm, phi_mm));
        return py::tuple(py::make_tuple(phi, phi_q, phi_m, phi_qq, phi_qm, phi_mm, phi_b, phi_bb, phi_bq, phi_bm));
      },
      py::arg("alpha"), py::arg("coef"), py::arg("q"), py::arg("M"), py::arg("act"), py::arg("bias") = py::none());
}

}  // namespace twolayer::bind

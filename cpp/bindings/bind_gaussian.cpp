// Bindings for activations and the Gaussian kernels: shape checks, GIL release, the device (device="cuda": the
// CUDA backend, cuda.hpp, with the CPU's *_batch_at finishing the matrices the device leaves to the host).
#include <string>
#include <utility>
#include <vector>

#include <pybind11/stl.h>

#include "common.hpp"
#include "device_arg.hpp"
#include "interrupt.hpp"
#include "twolayer/activation.hpp"
#include "twolayer/cuda.hpp"
#include "twolayer/gaussian.hpp"
#include "twolayer/gaussian_error_square.hpp"
#include "twolayer/gaussian_mean.hpp"
#include "twolayer/parallel.hpp"
#include "twolayer/simd_math.hpp"

namespace twolayer::bind {

namespace {

// A kernel with means: C of shape (k, n, n) and mu of shape (k, n) (gaussian_mean.hpp), on the CPU.
template <class F>
Array run_mean_batch(const Array& C, const Array& mu, int n, F&& f) {
  expect_shape(C, "C", {-1, n, n});
  expect_shape(mu, "mean", {C.shape(0), n});
  const auto count = static_cast<std::size_t>(C.shape(0));
  Array out = new_array({static_cast<py::ssize_t>(count)});
  const double *c = C.data(), *m = mu.data();
  double* o = out.mutable_data();
  run_cancellable(
      [&] {
        f(c, m, count, o);
        return 0;
      },
      [](int) { return py::none(); }, count > 64);
  return out;
}

template <class F>
Array run_batch(const Array& C, int n, F&& f) {
  expect_shape(C, "C", {-1, n, n});
  const auto count = static_cast<std::size_t>(C.shape(0));
  Array out = new_array({static_cast<py::ssize_t>(count)});
  const double* c = C.data();
  double* o = out.mutable_data();
  // Above 65536 matrices (a millisecond or more even for the fastest kernel) the call runs on the worker, where
  // Ctrl-C can stop it; below, even the slowest kernel (relu I4, ~5 us) finishes within a third of a second.
  run_cancellable(
      [&] {
        f(c, count, o);
        return 0;
      },
      [](int) { return py::none(); }, count > 65536);
  return out;
}

Array pointwise(const std::string& act, const Array& x, bool derivative) {
  const Activation a = parse_activation(act);
  Array out(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
  const double* in = x.data();
  double* o = out.mutable_data();
  const auto n = static_cast<std::size_t>(x.size());
  py::gil_scoped_release release;
  for (std::size_t i = 0; i < n; ++i) o[i] = derivative ? dsigma(a, in[i]) : sigma(a, in[i]);
  return out;
}

}  // namespace

void bind_gaussian(py::module_& m) {
  m.def("sigma", [](const std::string& act, const Array& x) { return pointwise(act, x, false); }, py::arg("act"),
        py::arg("x"));
  m.def("dsigma", [](const std::string& act, const Array& x) { return pointwise(act, x, true); }, py::arg("act"),
        py::arg("x"));
  m.def(
      "canonical_activation",
      [](const std::string& name, const std::string& argument) {
        return std::string(activation_name(parse_activation(name, argument.c_str())));
      },
      py::arg("name"), py::arg("argument") = "activation");
  m.def(
      "register_custom",
      [](const std::string& name, const Array& edges, const Array& coefficients, double strip) {
        if (edges.ndim() != 1 || edges.shape(0) < 2)
          throw std::invalid_argument("edges: expected a 1-d array of at least 2 panel edges");
        const py::ssize_t panels = edges.shape(0) - 1;
        if (coefficients.ndim() != 3 || coefficients.shape(0) != panels || coefficients.shape(1) != kCustomOrders ||
            coefficients.shape(2) < 1)
          throw std::invalid_argument("coefficients: expected shape (" + std::to_string(panels) + ", " +
                                      std::to_string(kCustomOrders) + ", degree + 1)");
        return std::string(activation_name(register_custom(name, edges.data(), static_cast<int>(panels),
                                                           coefficients.data(),
                                                           static_cast<int>(coefficients.shape(2) - 1), strip)));
      },
      py::arg("name"), py::arg("edges"), py::arg("coefficients"), py::arg("strip"),
      "Registers a custom activation from its Chebyshev table (activation.hpp, CustomTable); returns 'custom(name)'.");
  m.def(
      "asin_simd",
      [](const Array& x) {
        Array out(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
        const double* in = x.data();
        double* o = out.mutable_data();
        for (py::ssize_t i = 0; i < x.size(); ++i) o[i] = asin_simd(in[i]);
        return out;
      },
      py::arg("x"), "The kernels' branch-free arcsine (simd_math.hpp), exposed for its accuracy test.");
  auto elementwise = [&m](const char* name, double (*f)(double), const char* doc) {
    m.def(
        name,
        [f](const Array& x) {
          Array out(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
          const double* in = x.data();
          double* o = out.mutable_data();
          for (py::ssize_t i = 0; i < x.size(); ++i) o[i] = f(in[i]);
          return out;
        },
        py::arg("x"), doc);
  };
  elementwise("exp_simd", [](double x) { return exp_simd(x); },
              "The lanes' branch-free exponential (simd_math.hpp), exposed for its accuracy test.");
  elementwise("sin_simd", [](double x) { return sin_simd(x); },
              "The lanes' branch-free sine on |x| <= 3 pi / 4 (simd_math.hpp), exposed for its accuracy test.");
  m.def(
      "tanh_sech2_simd",
      [](const Array& x) {
        const std::vector<py::ssize_t> shape(x.shape(), x.shape() + x.ndim());
        Array t(shape), u(shape), e(shape);
        const double* in = x.data();
        for (py::ssize_t i = 0; i < x.size(); ++i) {
          tanh_sech2_simd(in[i], t.mutable_data()[i], u.mutable_data()[i]);
          e.mutable_data()[i] = exp_simd(-std::fabs(in[i]));
        }
        return py::make_tuple(t, u, e);
      },
      py::arg("x"),
      "(tanh x, sech^2 x, e^-|x|) from the lattice tables' vectorised tanh and exponential (simd_math.hpp), exposed "
      "for their accuracy test.");
  m.def(
      "i2",
      [](const std::string& a, const std::string& b, const Array& C, int n_threads, const std::string& device) {
        const Activation aa = parse_activation(a), bb = parse_activation(b);
        [[maybe_unused]] const bool gpu = use_cuda(device, {aa, bb});
        return run_batch(C, 2, [&](const double* c, std::size_t k, double* o) {
#ifdef TWOLAYER_CUDA
          if (gpu)
            return cuda::i2_batch(aa, bb, c, k, o,
                                  [&](const std::size_t* at, std::size_t n) { i2_batch_at(aa, bb, c, at, n, o); });
#endif
          if (zero_mean_pair(aa, bb)) return i2_batch(aa, bb, c, k, o, n_threads);
          const std::vector<double> mu(2 * k, 0.0);  // no zero-mean kernel (relu or step with a smooth unit)
          i2_mean_batch(aa, bb, c, mu.data(), k, o, n_threads);
        });
      },
      py::arg("act_a"), py::arg("act_b"), py::arg("C"), py::arg("n_threads") = 0, py::arg("device") = "cpu");
  m.def(
      "i2_jet",
      [](const std::string& a, const std::string& b, const Array& C) {
        // I2 with its exact gradient and Hessian in (C11, C12, C22) (the Jet of gaussian.hpp); shapes (n,), (n, 3),
        // (n, 3, 3). A small-batch helper (the real-k landscape): no threads, no cancellation.
        const Activation aa = parse_activation(a), bb = parse_activation(b);
        expect_shape(C, "C", {-1, 2, 2});
        const auto n = static_cast<py::ssize_t>(C.shape(0));
        Array v = new_array({n}), g = new_array({n, 3}), h = new_array({n, 3, 3});
        const double* c = C.data();
        double *pv = v.mutable_data(), *pg = g.mutable_data(), *ph = h.mutable_data();
        {
          py::gil_scoped_release release;
          for (py::ssize_t i = 0; i < n; ++i) {
            const Jet j = i2_jet(aa, bb, c[4 * i], c[4 * i + 1], c[4 * i + 3]);
            pv[i] = j.v;
            for (int p = 0; p < 3; ++p) {
              pg[3 * i + p] = j.g[p];
              for (int q = 0; q < 3; ++q) ph[9 * i + 3 * p + q] = j.hess(p, q);
            }
          }
        }
        return py::make_tuple(v, g, h);
      },
      py::arg("act_a"), py::arg("act_b"), py::arg("C"));
  m.def(
      "i2_self_jet",
      [](const std::string& a, const std::string& b, const Array& q) {
        // E[a(l) b(l)], l ~ N(0, q), with its first and second q-derivatives (i2_self on a Jet); shapes (n,) each.
        const Activation aa = parse_activation(a), bb = parse_activation(b);
        expect_shape(q, "q", {-1});
        const auto n = static_cast<py::ssize_t>(q.shape(0));
        Array v = new_array({n}), d1 = new_array({n}), d2 = new_array({n});
        const double* pq = q.data();
        double *pv = v.mutable_data(), *p1 = d1.mutable_data(), *p2 = d2.mutable_data();
        {
          py::gil_scoped_release release;
          for (py::ssize_t i = 0; i < n; ++i) {
            const Jet j = i2_self(aa, bb, Jet::variable(pq[i], 0));
            pv[i] = j.v;
            p1[i] = j.g[0];
            p2[i] = j.hess(0, 0);
          }
        }
        return py::make_tuple(v, d1, d2);
      },
      py::arg("act_a"), py::arg("act_b"), py::arg("q"));
  m.def(
      "i3",
      [](const std::string& s, const std::string& b, const Array& C, int n_threads, const std::string& device) {
        const Activation ss = parse_activation(s), bb = parse_activation(b);
        [[maybe_unused]] const bool gpu = use_cuda(device, {ss, bb});
        return run_batch(C, 3, [&](const double* c, std::size_t k, double* o) {
#ifdef TWOLAYER_CUDA
          if (gpu)
            return cuda::i3_batch(ss, bb, c, k, o,
                                  [&](const std::size_t* at, std::size_t n) { i3_batch_at(ss, bb, c, at, n, o); });
#endif
          if (zero_mean_pair(ss, bb)) return i3_batch(ss, bb, c, k, o, n_threads);
          const std::vector<double> mu(3 * k, 0.0);
          i3_mean_batch(ss, bb, c, mu.data(), k, o, n_threads);
        });
      },
      py::arg("act"), py::arg("act_b"), py::arg("C"), py::arg("n_threads") = 0, py::arg("device") = "cpu");
  m.def(
      "j2",
      [](const std::string& s, const Array& C, int n_threads, const std::string& device) {
        const Activation ss = parse_activation(s);
        [[maybe_unused]] const bool gpu = use_cuda(device, {ss});
        return run_batch(C, 2, [&](const double* c, std::size_t k, double* o) {
#ifdef TWOLAYER_CUDA
          if (gpu)
            return cuda::j2_batch(ss, c, k, o, [&](const std::size_t* at, std::size_t n) { j2_batch_at(ss, c, at, n, o); });
#endif
          j2_batch(ss, c, k, o, n_threads);
        });
      },
      py::arg("act"), py::arg("C"), py::arg("n_threads") = 0, py::arg("device") = "cpu");
  m.def(
      "i4",
      [](const std::string& s, const std::string& a, const std::string& b, const Array& C, int n_threads,
         const std::string& device) {
        const Activation ss = parse_activation(s), aa = parse_activation(a), bb = parse_activation(b);
        [[maybe_unused]] const bool gpu = use_cuda(device, {ss, aa, bb});
        return run_batch(C, 4, [&](const double* c, std::size_t k, double* o) {
#ifdef TWOLAYER_CUDA
          if (gpu)
            return cuda::i4_batch(ss, aa, bb, c, k, o, [&](const std::size_t* at, std::size_t n) {
              i4_batch_at(ss, aa, bb, c, at, n, o);
            });
#endif
          if (zero_mean_i4(ss, aa, bb)) return i4_batch(ss, aa, bb, c, k, o, n_threads);
          const std::vector<double> mu(4 * k, 0.0);
          i4_mean_batch(ss, aa, bb, c, mu.data(), k, o, n_threads);
        });
      },
      py::arg("act"), py::arg("act_a"), py::arg("act_b"), py::arg("C"), py::arg("n_threads") = 0,
      py::arg("device") = "cpu");
  m.def(
      "i2_mean",
      [](const std::string& a, const std::string& b, const Array& C, const Array& mu, int n_threads) {
        const Activation aa = parse_activation(a), bb = parse_activation(b);
        return run_mean_batch(C, mu, 2, [&](const double* c, const double* u, std::size_t k, double* o) {
          i2_mean_batch(aa, bb, c, u, k, o, n_threads);
        });
      },
      py::arg("act_a"), py::arg("act_b"), py::arg("C"), py::arg("mean"), py::arg("n_threads") = 0);
  m.def(
      "j2_mean",
      [](const std::string& s, const Array& C, const Array& mu, int n_threads) {
        const Activation ss = parse_activation(s);
        return run_mean_batch(C, mu, 2, [&](const double* c, const double* u, std::size_t k, double* o) {
          j2_mean_batch(ss, c, u, k, o, n_threads);
        });
      },
      py::arg("act"), py::arg("C"), py::arg("mean"), py::arg("n_threads") = 0);
  m.def(
      "i3_mean",
      [](const std::string& s, const std::string& b, const Array& C, const Array& mu, int n_threads) {
        const Activation ss = parse_activation(s), bb = parse_activation(b);
        return run_mean_batch(C, mu, 3, [&](const double* c, const double* u, std::size_t k, double* o) {
          i3_mean_batch(ss, bb, c, u, k, o, n_threads);
        });
      },
      py::arg("act"), py::arg("act_b"), py::arg("C"), py::arg("mean"), py::arg("n_threads") = 0);
  m.def(
      "i4_mean",
      [](const std::string& s, const std::string& a, const std::string& b, const Array& C, const Array& mu,
         int n_threads) {
        const Activation ss = parse_activation(s), aa = parse_activation(a), bb = parse_activation(b);
        return run_mean_batch(C, mu, 4, [&](const double* c, const double* u, std::size_t k, double* o) {
          i4_mean_batch(ss, aa, bb, c, u, k, o, n_threads);
        });
      },
      py::arg("act"), py::arg("act_a"), py::arg("act_b"), py::arg("C"), py::arg("mean"), py::arg("n_threads") = 0);
  m.def(
      "pair_moment",
      [](const std::string& a, int i, const std::string& b, int j, const Array& mu, const Array& C, bool quadrature) {
        // E[a^(i)(lambda1) b^(j)(lambda2)] (gaussian_mean.hpp), one row per (mean, covariance); for tests and the
        // population layer's bias derivatives. quadrature: the conditioning engine even for the closed-form pairs.
        const Activation aa = parse_activation(a), bb = parse_activation(b);
        if (i < 0 || j < 0 || i + j > 4)
          throw std::invalid_argument("pair_moment: derivative orders i, j >= 0 with i + j <= 4, got " +
                                      std::to_string(i) + ", " + std::to_string(j));
        expect_shape(C, "C", {-1, 2, 2});
        expect_shape(mu, "mean", {C.shape(0), 2});
        const auto n = static_cast<py::ssize_t>(C.shape(0));
        Array out = new_array({n});
        const double *c = C.data(), *u = mu.data();
        double* o = out.mutable_data();
        py::gil_scoped_release release;
        const auto moment = quadrature ? pair_moment_quadrature : pair_moment;
        for (py::ssize_t k = 0; k < n; ++k)
          o[k] = moment(aa, i, bb, j, u[2 * k], u[2 * k + 1], c[4 * k], c[4 * k + 1], c[4 * k + 3]);
        return out;
      },
      py::arg("act_a"), py::arg("i"), py::arg("act_b"), py::arg("j"), py::arg("mean"), py::arg("C"),
      py::arg("quadrature") = false);
  m.def(
      "error_square_moments",
      [](const std::string& s, const std::vector<std::string>& acts, const Array& C, const Array& mu, const Array& w,
         const std::vector<std::pair<int, int>>& pairs, int n_threads) -> py::object {
        // E[s'(l_i) s'(l_k) (sum_c w_c act_c(l_c))^2] per pair (i, k), l ~ N(mean, C) (gaussian_error_square.hpp);
        // for tests. None where the lattices cannot certify (the engines then sum I4 kernels).
        const Activation ss = parse_activation(s);
        const auto n = static_cast<py::ssize_t>(acts.size());
        std::vector<Activation> aa;
        for (const auto& a : acts) aa.push_back(parse_activation(a));
        expect_shape(C, "C", {n, n});
        expect_shape(mu, "mean", {n});
        expect_shape(w, "w", {n});
        std::vector<int> pp;
        for (const auto& [i, k] : pairs) {
          if (i < 0 || k < 0 || i >= n || k >= n || aa[i] != ss || aa[k] != ss)
            throw std::invalid_argument("pairs: expected fields of the activation act (indices below " +
                                        std::to_string(n) + "), got (" + std::to_string(i) + ", " +
                                        std::to_string(k) + ")");
          pp.insert(pp.end(), {i, k});
        }
        const int np = static_cast<int>(pairs.size());
        if (np < 1) throw std::invalid_argument("pairs: expected at least one pair, got none");
        Array out = new_array({np});
        bool ok;
        {
          py::gil_scoped_release release;
          ok = smooth::error_square_applies(ss, ss) &&
               smooth::error_square_moments(ss, static_cast<int>(n), aa.data(), C.data(), mu.data(), w.data(),
                                            pp.data(), np, out.mutable_data(), resolve_threads(n_threads));
        }
        return ok ? py::object(out) : py::object(py::none());
      },
      py::arg("act"), py::arg("acts"), py::arg("C"), py::arg("mean"), py::arg("w"), py::arg("pairs"),
      py::arg("n_threads") = 1);
}

}  // namespace twolayer::bind

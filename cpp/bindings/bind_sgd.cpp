// Bindings for the SGD simulator and the counter-based random streams: shape checks, GIL release.
#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common.hpp"
#include "device_arg.hpp"
#include "interrupt.hpp"
#include "target_arg.hpp"
#include "schedule_arg.hpp"
#include "twolayer/activation.hpp"
#include "twolayer/divergence.hpp"
#include "twolayer/rng.hpp"
#include "twolayer/sgd.hpp"

namespace twolayer::bind {

void bind_sgd(py::module_& m) {
  m.def(
      "sgd_simulate",
      [](const Array& W0, const Array& a0, const std::string& act, const Array& Wt, const Array& v,
         const std::string& act_t, double scale, const Array& lr, bool train_first, const Array& lr_readout,
         const Array& noise, const Array& risk_tol, const Array& risk_rtol, int batch, bool spherical, long long n_samples, bool shuffle, long long steps,
         const py::array_t<long long, py::array::c_style | py::array::forcecast>& record_steps_arr,
         std::uint64_t seed, const py::array_t<std::uint32_t, py::array::c_style | py::array::forcecast>& runs_arr,
         bool keep_weights, int n_threads, const py::object& progress, const py::object& target_alpha,
         const py::object& target_coef, const py::object& schedule, const std::string& device,
         const py::object& bias_arg, const py::object& teacher_bias_arg, const py::object& lr_bias_arg) {
        // Plain arrays rather than STL casters (no pybind11/stl.h in this module).
        const std::vector<long long> record_steps(record_steps_arr.data(),
                                                  record_steps_arr.data() + record_steps_arr.size());
        const std::vector<std::uint32_t> runs(runs_arr.data(), runs_arr.data() + runs_arr.size());
        // W0: (K, d) shared by all runs, or (R, K, d) one start per run (then a0 is (R, K)).
        const bool per_run = W0.ndim() == 3;
        const py::ssize_t R = static_cast<py::ssize_t>(runs.size());
        if (R < 1) throw std::invalid_argument("seeds: need at least one run");
        // Per-run parameters: one entry per run.
        expect_shape(lr, "lr", {R});
        expect_shape(lr_readout, "lr_readout", {R});
        expect_shape(noise, "noise", {R});
        expect_shape(risk_tol, "risk_tol", {R});
        expect_shape(risk_rtol, "risk_rtol", {R});
        std::vector<SgdRun> params(static_cast<std::size_t>(R));
        for (py::ssize_t j = 0; j < R; ++j) {
          SgdRun& p = params[static_cast<std::size_t>(j)];
          p.id = runs[static_cast<std::size_t>(j)];
          p.lr = lr.at(j);
          p.lr_readout = lr_readout.at(j);
          p.noise = noise.at(j);
          p.risk_tol = risk_tol.at(j);
          p.risk_rtol = risk_rtol.at(j);
        }
        // Biases (optional): student (K,) or (R, K) as a, teacher (M,), lr_bias (R,); none: a run without biases.
        const bool biased = !bias_arg.is_none() || !teacher_bias_arg.is_none();
        Array b0, bt;
        if (!lr_bias_arg.is_none()) {
          const Array lr_bias = lr_bias_arg.cast<Array>();
          expect_shape(lr_bias, "lr_bias", {R});
          for (py::ssize_t j = 0; j < R; ++j) params[static_cast<std::size_t>(j)].lr_bias = lr_bias.at(j);
        }
        if (per_run) {
          expect_shape(W0, "student.W", {R, -1, -1});
          expect_shape(a0, "student.a", {R, W0.shape(1)});
        } else {
          expect_shape(W0, "student.W", {-1, -1});
          expect_shape(a0, "student.a", {W0.shape(0)});
        }
        const py::ssize_t K = W0.shape(per_run ? 1 : 0), d = W0.shape(per_run ? 2 : 1);
        expect_shape(Wt, "teacher.W", {-1, d});
        const py::ssize_t M = Wt.shape(0);
        expect_shape(v, "teacher.a", {M});
        if (!bias_arg.is_none()) {
          b0 = bias_arg.cast<Array>();
          if (per_run) expect_shape(b0, "student.bias", {R, K});
          else expect_shape(b0, "student.bias", {K});
        }
        if (!teacher_bias_arg.is_none()) {
          bt = teacher_bias_arg.cast<Array>();
          expect_shape(bt, "teacher.bias", {M});
        }
        SgdSpec sp;
        sp.K = dimension(K, "student units");
        sp.M = dimension(M, "teacher units");
        sp.d = dimension(d, "d");
        sp.scale = scale;
        sp.student = parse_activation(act);
        sp.teacher = parse_activation(act_t);
        sp.train_first = train_first;
        sp.batch = batch;
        sp.spherical = spherical;
        sp.n_samples = n_samples;
        sp.shuffle = shuffle;
        sp.steps = steps;
        sp.record_steps = record_steps;
        sp.seed = seed;
        if (!target_alpha.is_none()) {
          sp.target = make_target(target_alpha.cast<IntArray>(), target_coef.cast<Array>());
          if (sp.target->k != sp.M) throw std::invalid_argument("target: expected k = M direction rows");
        }
        sp.schedule = schedule_arg(schedule);
        sgd_check(sp, params.data(), params.size());
        if (device == "cuda")  // the options the GPU path lacks are named even where the backend is missing
          if (const std::string why = sgd_cuda_unsupported(sp); !why.empty()) throw cuda::DeviceUnavailable(why);
        const bool gpu = use_cuda(device);
        const auto T = static_cast<py::ssize_t>(record_steps.size());
        RunRows rows(R, T, K, M);
        Array a_final = new_array({R, K});
        Array W = keep_weights ? new_array({R, K, d}) : new_array({0});
        Array bias_rows = biased ? new_array({R, T, K}) : new_array({0});
        Array b_final = biased ? new_array({R, K}) : new_array({0});
        std::vector<SgdOut> outs(static_cast<std::size_t>(R));
        for (py::ssize_t j = 0; j < R; ++j) {
          SgdOut& o = outs[static_cast<std::size_t>(j)];
          rows.point(o, j);
          o.W = keep_weights ? W.mutable_data() + j * K * d : nullptr;
          o.a_final = a_final.mutable_data() + j * K;
          if (biased) {
            o.bias = bias_rows.mutable_data() + j * T * K;
            o.b_final = b_final.mutable_data() + j * K;
          }
        }
        const double* pb = bias_arg.is_none() ? nullptr : b0.data();
        const double* pbt = teacher_bias_arg.is_none() ? nullptr : bt.data();
        const double *pw = W0.data(), *pa = a0.data(), *pt = Wt.data(), *pv = v.data();
        std::atomic<long long> done{0};
        Poll poll;
        if (!progress.is_none()) poll.with_gil = [&] { progress(done.load(std::memory_order_relaxed)); };
        auto work = [&] {
          if (gpu) {
#ifdef TWOLAYER_CUDA
            sgd_simulate_cuda(sp, pw, pa, per_run ? 1 : 0, pt, pv, params.data(), params.size(), outs.data(), &done,
                              pb, pbt);
#endif
          } else {
            sgd_simulate(sp, pw, pa, per_run ? 1 : 0, pt, pv, params.data(), params.size(), outs.data(), n_threads,
                         &done, pb, pbt);
          }
          return 0;
        };
        auto to_py = [&](int) {
          py::array_t<long long> recorded(R), status(R), stop(R);
          Array stop_time = new_array({R});
          for (py::ssize_t j = 0; j < R; ++j) {
            stop_time.mutable_at(j) = outs[static_cast<std::size_t>(j)].stop_time;
            recorded.mutable_at(j) = static_cast<long long>(outs[static_cast<std::size_t>(j)].recorded);
            status.mutable_at(j) = outs[static_cast<std::size_t>(j)].status;
            stop.mutable_at(j) = outs[static_cast<std::size_t>(j)].stop_step;
          }
          py::dict out;
          rows.put(out);
          out["recorded"] = recorded;
          out["status"] = status;
          out["stop_step"] = stop;
          out["stop_time"] = stop_time;
          py::list reason;  // why a run diverged (divergence.hpp), "" for the others
          for (const SgdOut& o : outs) reason.append(o.reason ? divergence_message(o.reason) : "");
          out["reason"] = reason;
          out["W"] = keep_weights ? py::object(W) : py::object(py::none());
          out["a_final"] = a_final;
          out["bias"] = biased ? py::object(bias_rows) : py::object(py::none());
          out["b_final"] = biased ? py::object(b_final) : py::object(py::none());
          return out;
        };
        return run_cancellable(work, to_py, true, poll);
      },
      py::arg("W"), py::arg("a"), py::arg("act"), py::arg("W_teacher"), py::arg("v"), py::arg("act_teacher"),
      py::arg("scale"), py::arg("lr"), py::arg("train_first"), py::arg("lr_readout"), py::arg("noise"),
      py::arg("risk_tol"), py::arg("risk_rtol"), py::arg("batch"), py::arg("spherical"), py::arg("n_samples"), py::arg("shuffle"), py::arg("steps"),
      py::arg("record_steps"), py::arg("seed"), py::arg("runs"), py::arg("keep_weights") = true,
      py::arg("n_threads") = 0, py::arg("progress") = py::none(), py::arg("target_alpha") = py::none(),
      py::arg("target_coef") = py::none(),
      py::arg("schedule") = py::none(), py::arg("device") = "cpu", py::arg("bias") = py::none(),
      py::arg("teacher_bias") = py::none(), py::arg("lr_bias") = py::none());

  m.def(
      "philox4x32",
      [](const py::array_t<std::uint32_t, py::array::c_style | py::array::forcecast>& counter,
         const py::array_t<std::uint32_t, py::array::c_style | py::array::forcecast>& key) {
        if (counter.size() != 4) throw std::invalid_argument("counter: expected 4 words");
        if (key.size() != 2) throw std::invalid_argument("key: expected 2 words");
        const auto r = rng::philox4x32_10({counter.at(0), counter.at(1), counter.at(2), counter.at(3)},
                                          {key.at(0), key.at(1)});
        py::array_t<std::uint32_t> out(4);
        for (int j = 0; j < 4; ++j) out.mutable_at(j) = r[static_cast<std::size_t>(j)];
        return out;
      },
      py::arg("counter"), py::arg("key"), "Philox4x32-10 of one counter under one key (for known-answer tests).");
  m.def(
      "rng_gaussians",
      [](std::uint64_t seed, std::uint32_t run, std::uint32_t stream, std::uint64_t first, std::size_t n,
         bool scalar, const std::string& device) {
        const bool gpu = use_cuda(device);
        Array out = new_array({static_cast<py::ssize_t>(n)});
        double* o = out.mutable_data();
        {
          py::gil_scoped_release release;
          const rng::StreamId s{seed, run, stream};
          if (gpu) {
#ifdef TWOLAYER_CUDA
            cuda::gaussians(seed, run, stream, first, n, scalar, o);
#endif
          } else if (scalar) {
            rng::gaussians_scalar(s, first, n, o);
          } else {
            rng::gaussians(s, first, n, o);
          }
        }
        return out;
      },
      py::arg("seed"), py::arg("run"), py::arg("stream"), py::arg("first"), py::arg("n"), py::arg("scalar") = false,
      py::arg("device") = "cpu",
      "Gaussians [first, first + n) of the stream (seed, run, stream); scalar=True uses the portable reference "
      "code (same numbers, slower); device='cuda' draws them on the GPU by the SGD kernels' code (scalar=True: one "
      "Gaussian at a time, as the label noise; else whole Philox blocks, as the inputs).");
  m.def("rng_vectorised", &rng::gaussians_vectorised, "Whether the AVX2 + FMA Gaussian generator is compiled in.");
}

}  // namespace twolayer::bind

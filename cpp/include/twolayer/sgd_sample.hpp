// The per-sample arithmetic of the SGD simulator (sgd.hpp), shared by the CPU path (sgd.cpp) and the CUDA kernels
// (cpp/cuda/sgd.cu): from the raw dot products l_i = w_i . x, l*_r = w*_r . x of one sample to the error and the
// update coefficients. Only the dot products themselves (sums over d) are summed in a different order on the GPU.
// Biases (optional, null: none): unit i's pre-activation is l_i / sqrt(s) + b_i; without them the arithmetic is the
// same as before biases existed (no + 0.0), so bias-free runs are bitwise unchanged.
#pragma once
#include <cmath>

#include "twolayer/activation.hpp"
#include "twolayer/hd.hpp"

namespace twolayer {

// The pre-activation of unit i from its raw dot product: l_i / sqrt(s) (+ b_i when bias is not null).
TWOLAYER_HD inline double sgd_preact(double lam_i, double inv_sqrt_s, const double* bias, int i) {
  return bias ? lam_i * inv_sqrt_s + bias[i] : lam_i * inv_sqrt_s;
}

// f = sum_i a_i sigma(l_i / sqrt(s) + b_i) (inv_sqrt_s = 1 / sqrt(s)); sig[i] = sigma(l_i / sqrt(s) + b_i).
TWOLAYER_HD inline double sgd_output(Activation act, const double* lam, const double* a, int K, double inv_sqrt_s,
                                     double* sig, const double* bias = nullptr) {
  double f = 0.0;
  for (int i = 0; i < K; ++i) {
    sig[i] = sigma(act, sgd_preact(lam[i], inv_sqrt_s, bias, i));
    f += a[i] * sig[i];
  }
  return f;
}

// The committee teacher's label y = sum_r v_r sigma*(l*_r / sqrt(s) + b*_r) + sqrt(Delta) xi.
TWOLAYER_HD inline double sgd_committee_label(Activation act, const double* lam_t, const double* v, int M,
                                              double inv_sqrt_s, double sqrt_noise, double xi,
                                              const double* bias = nullptr) {
  double y = 0.0;
  for (int r = 0; r < M; ++r) y += v[r] * sigma(act, sgd_preact(lam_t[r], inv_sqrt_s, bias, r));
  return y + sqrt_noise * xi;
}

// Whether a sample's error E = y - f is acceptable (finite, |E| <= blowup); else the run diverged (kSampleOverflow).
TWOLAYER_HD inline bool sgd_error_ok(double E, double blowup) { return std::fabs(E) <= blowup; }

// The first-layer coefficient of one sample: w_i += c_i x with c_i = gw a_i sigma'(l_i / sqrt(s) + b_i) E
// (gw = lr sqrt(s) / (d B)); with gw = gb = lr_bias / (d B) it is the bias's change b_i += c_i.
TWOLAYER_HD inline double sgd_weight_coef(Activation act, double gw, double a_i, double lam_i, double inv_sqrt_s,
                                          double E, const double* bias = nullptr, int i = 0) {
  return gw * a_i * dsigma(act, sgd_preact(lam_i, inv_sqrt_s, bias, i)) * E;
}

// The readout's change from one sample: a_i += ga sigma(l_i / sqrt(s)) E (ga = lr_readout / (d B)).
TWOLAYER_HD inline double sgd_readout_step(double ga, double sig_i, double E) { return ga * sig_i * E; }

// Spherical SGD, one sample: |w + c x|^2 = |w|^2 + 2 c w.x + c^2 |x|^2 from |w|^2 (norm), w.x (lam_i), |x|^2 (xx).
// The step is then w <- r (w + c x), r = sqrt(s / that); a value that is not finite and > 0 means divergence.
TWOLAYER_HD inline double sgd_sphere_norm(double norm, double c, double lam_i, double xx) {
  return norm + 2.0 * c * lam_i + c * c * xx;
}
TWOLAYER_HD inline bool sgd_sphere_ok(double n) { return n > 0.0 && std::isfinite(n); }

}  // namespace twolayer

// An activation and its derivatives at many points at once (activation_points.hpp).
#include "twolayer/activation_points.hpp"

#include "twolayer/simd_math.hpp"

namespace twolayer {

namespace {

constexpr int kBlock = 8;  // points whose Clenshaw recurrences run side by side

// The Clenshaw recurrences of the orders 0..N - 1 of one panel's series (coefficients c, n1 per order, the first top)
// at kBlock points x side by side, in registers; out[o][q] for q < cnt (a null out[o]: not stored).
template <int N>
void clenshaw_block(const double* c, int n1, int top, const double* x, int cnt, double* const* out) {
  double x2[kBlock], b1[N][kBlock] = {}, b2[N][kBlock] = {};
  for (int q = 0; q < kBlock; ++q) x2[q] = 2.0 * x[q];
  for (int j = top - 1; j >= 1; --j)
    for (int o = 0; o < N; ++o) {
      const double cj = c[o * n1 + j];
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
      for (int q = 0; q < kBlock; ++q) {
        const double t = cj + x2[q] * b1[o][q] - b2[o][q];
        b2[o][q] = b1[o][q];
        b1[o][q] = t;
      }
    }
  for (int o = 0; o < N; ++o)
    if (out[o])
      for (int q = 0; q < cnt; ++q) out[o][q] = c[o * n1] + x[q] * b1[o][q] - b2[o][q];
}

void custom_at(const CustomTable& T, const double* s, int n, int order, double* const* out) {
  const double lo = T.edges[0], hi = T.edges[T.panels];
  const int n1 = T.degree + 1;
  double xs[kBlock] = {};
  int k = 0;
  while (k < n) {
    if (!(s[k] >= lo && s[k] <= hi)) {
      double e[kCustomOrders];
      custom_derivatives(T, s[k], order, e);
      for (int o = 0; o <= order; ++o)
        if (out[o]) out[o][k] = e[o];
      ++k;
      continue;
    }
    const int a = custom_panel(T, s[k]);
    const double ea = T.edges[a], eb = T.edges[a + 1];
    const bool last = a == T.panels - 1;
    int m = 1;  // the block: the points after s[k] in the same panel (in any order along s)
    while (k + m < n && m < kBlock && s[k + m] >= ea && (s[k + m] < eb || (last && s[k + m] <= eb))) ++m;
    for (int q = 0; q < m; ++q) xs[q] = (2.0 * s[k + q] - ea - eb) / (eb - ea);
    const double* c = T.coef + static_cast<std::size_t>(a) * kCustomOrders * n1;
    const int* len = T.len + a * kCustomOrders;
    int top = 1;  // the longest of the orders' series (a shorter one's zeros keep its recurrence at 0)
    for (int o = 0; o <= order; ++o) top = len[o] > top ? len[o] : top;
    double* o[kCustomOrders] = {};
    for (int q = 0; q <= order; ++q) o[q] = out[q] ? out[q] + k : nullptr;
    switch (order) {  // (the order fixed at compile time: the recurrences stay in registers)
      case 0: clenshaw_block<1>(c, n1, top, xs, m, o); break;
      case 1: clenshaw_block<2>(c, n1, top, xs, m, o); break;
      case 2: clenshaw_block<3>(c, n1, top, xs, m, o); break;
      case 3: clenshaw_block<4>(c, n1, top, xs, m, o); break;
      default: clenshaw_block<5>(c, n1, top, xs, m, o); break;
    }
    k += m;
  }
}

void tanh_at(const double* s, int n, int order, double* const* out) {
  double* const o0 = out[0];
  double* const o1 = order >= 1 ? out[1] : nullptr;
  double* const o2 = order >= 2 ? out[2] : nullptr;
  double* const o3 = order >= 3 ? out[3] : nullptr;
  double* const o4 = order >= 4 ? out[4] : nullptr;
  constexpr int kChunk = 64;
  double t[kChunk], u[kChunk];
  for (int q0 = 0; q0 < n; q0 += kChunk) {
    const int cnt = n - q0 < kChunk ? n - q0 : kChunk;
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
    for (int q = 0; q < cnt; ++q) tanh_sech2_simd(s[q0 + q], t[q], u[q]);
    for (int q = 0; q < cnt; ++q) {
      const double tq = t[q], uq = u[q];
      if (o0) o0[q0 + q] = tq;
      if (o1) o1[q0 + q] = uq;
      if (o2) o2[q0 + q] = -2.0 * tq * uq;
      if (o3) o3[q0 + q] = uq * (6.0 * tq * tq - 2.0);
      if (o4) o4[q0 + q] = uq * tq * (16.0 - 24.0 * tq * tq);
    }
  }
}

}  // namespace

void sigma_derivatives_at(Activation a, const double* s, int n, int order, double* const* out) {
  if (a == Activation::Tanh) return tanh_at(s, n, order, out);
  if (is_custom(a)) return custom_at(custom_table(a), s, n, order, out);
  for (int q = 0; q < n; ++q) {
    if (order == 0) {  // (sigma: the value alone, cheaper than sigma_derivatives)
      if (out[0]) out[0][q] = sigma(a, s[q]);
      continue;
    }
    double d[5];
    sigma_derivatives(a, s[q], order, d);
    for (int k = 0; k <= order; ++k)
      if (out[k]) out[k][q] = d[k];
  }
}

}  // namespace twolayer

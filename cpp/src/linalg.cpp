// Register-blocked products: 4-row panels of axpys over 16-column register tiles (X Y); A B^T through a
// transposed copy of B.
#include "twolayer/linalg.hpp"

#include <algorithm>
#include <vector>

namespace twolayer {

namespace {

// C rows [0, rows) x columns [c0, c0 + W) += X Y over a panel of W output columns kept in registers.
template <int W>
inline void panel_nn(const double* X, int ldx, const double* Y, int rows, int k, int n, int c0, double* C) {
  double acc[4][W] = {};
  for (int p = 0; p < k; ++p) {
    const double* y = Y + static_cast<std::size_t>(p) * n + c0;
    for (int r = 0; r < rows; ++r) {
      const double x = X[static_cast<std::size_t>(r) * ldx + p];
#pragma omp simd
      for (int c = 0; c < W; ++c) acc[r][c] += x * y[c];
    }
  }
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < W; ++c) C[static_cast<std::size_t>(r) * n + c0 + c] += acc[r][c];
}

}  // namespace

void gemm_nn_add(const double* X, int ldx, const double* Y, int m, int k, int n, double* C) {
  for (int i0 = 0; i0 < m; i0 += 4) {
    const int rows = m - i0 < 4 ? m - i0 : 4;
    const double* Xi = X + static_cast<std::size_t>(i0) * ldx;
    double* Ci = C + static_cast<std::size_t>(i0) * n;
    int c0 = 0;
    for (; c0 + 16 <= n; c0 += 16) panel_nn<16>(Xi, ldx, Y, rows, k, n, c0, Ci);
    for (; c0 + 4 <= n; c0 += 4) panel_nn<4>(Xi, ldx, Y, rows, k, n, c0, Ci);
    for (; c0 < n; ++c0) panel_nn<1>(Xi, ldx, Y, rows, k, n, c0, Ci);
  }
}

void gemm_nt(const double* A, int na, const double* B, int nb, int d, double alpha, double* out) {
  // Transpose B once (nb d copies) so that the product runs on the vectorised row-panel kernel.
  std::vector<double> Bt(static_cast<std::size_t>(d) * nb);
  for (int j = 0; j < nb; ++j)
    for (int k = 0; k < d; ++k) Bt[static_cast<std::size_t>(k) * nb + j] = B[static_cast<std::size_t>(j) * d + k];
  std::fill(out, out + static_cast<std::size_t>(na) * nb, 0.0);
  gemm_nn_add(A, d, Bt.data(), na, d, nb, out);
  if (alpha != 1.0)
    for (std::size_t i = 0; i < static_cast<std::size_t>(na) * nb; ++i) out[i] *= alpha;
}

}  // namespace twolayer

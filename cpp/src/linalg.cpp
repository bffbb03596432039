// Register-blocked products: 6-row x 8-column register tiles of X Y, column panels outer so that each panel of Y
// is reused from L1 by all rows; A B^T through a transposed copy of B.
#include "twolayer/linalg.hpp"

#include <cmath>

#include <algorithm>
#include <memory>

namespace twolayer {

namespace {

// C rows [0, R) x columns [c0, c0 + W) = (accumulate ? C : 0) + alpha X Y over a panel of W output columns kept in
// registers. R and W are
// compile-time constants so that the R x W accumulators stay in registers (R = 6, W = 8: 12 of the 16 AVX2
// registers, 2 more hold the row of Y for all R rows and 1 the broadcast of X; a 4 x 12 tile leaves no room for
// the row of Y, which is then re-read from memory by every FMA, about 30% slower).
template <int R, int W>
inline void panel_nn(const double* X, int ldx, const double* Y, int k, int n, int c0, double alpha, bool accumulate,
                     double* C) {
  double acc[R][W] = {};
  for (int p = 0; p < k; ++p) {
    const double* y = Y + static_cast<std::size_t>(p) * n + c0;
    for (int r = 0; r < R; ++r) {
      const double x = X[static_cast<std::size_t>(r) * ldx + p];
#pragma omp simd
      for (int c = 0; c < W; ++c) acc[r][c] += x * y[c];
    }
  }
  for (int r = 0; r < R; ++r) {
    double* Cr = C + static_cast<std::size_t>(r) * n + c0;
    for (int c = 0; c < W; ++c) Cr[c] = (accumulate ? Cr[c] : 0.0) + alpha * acc[r][c];
  }
}

// Columns [c0, c0 + W) of C (m x n) = (accumulate ? C : 0) + alpha X Y, row panel by row panel: the k x W column panel of Y stays in L1 while
// the rows of X pass over it. Rows below the panel's diagonal band (row r > c0 + W - 1 - diag) are skipped when
// only the upper part is wanted (diag >= 0).
template <int W>
void column_panel(const double* X, int ldx, const double* Y, int m, int k, int n, int c0, double alpha, bool accumulate,
                  double* C, int diag) {
  const int rows = diag < 0 ? m : std::max(0, std::min(m, c0 + W - diag));
  for (int i0 = 0; i0 < rows; i0 += 6) {
    const double* Xi = X + static_cast<std::size_t>(i0) * ldx;
    double* Ci = C + static_cast<std::size_t>(i0) * n;
    switch (rows - i0) {
      case 1: panel_nn<1, W>(Xi, ldx, Y, k, n, c0, alpha, accumulate, Ci); break;
      case 2: panel_nn<2, W>(Xi, ldx, Y, k, n, c0, alpha, accumulate, Ci); break;
      case 3: panel_nn<3, W>(Xi, ldx, Y, k, n, c0, alpha, accumulate, Ci); break;
      case 4: panel_nn<4, W>(Xi, ldx, Y, k, n, c0, alpha, accumulate, Ci); break;
      case 5: panel_nn<5, W>(Xi, ldx, Y, k, n, c0, alpha, accumulate, Ci); break;
      default: panel_nn<6, W>(Xi, ldx, Y, k, n, c0, alpha, accumulate, Ci); break;
    }
  }
}

}  // namespace

void gemm_nn(const double* X, int ldx, const double* Y, int m, int k, int n, double* C, double alpha, bool accumulate,
             int diag) {
  int c0 = 0;
  for (; c0 + 8 <= n; c0 += 8) column_panel<8>(X, ldx, Y, m, k, n, c0, alpha, accumulate, C, diag);
  for (; c0 + 4 <= n; c0 += 4) column_panel<4>(X, ldx, Y, m, k, n, c0, alpha, accumulate, C, diag);
  for (; c0 < n; ++c0) column_panel<1>(X, ldx, Y, m, k, n, c0, alpha, accumulate, C, diag);
}

void gemm_nt(const double* A, int na, const double* B, int nb, int d, double alpha, double* out, int diag) {
  // Transpose B once (nb d copies, in 8 x 8 blocks that stay in cache) so that the product runs on the vectorised
  // row-panel kernel.
  std::unique_ptr<double[]> Bt(new double[static_cast<std::size_t>(d) * nb]);
  for (int j0 = 0; j0 < nb; j0 += 8)
    for (int k0 = 0; k0 < d; k0 += 8)
      for (int j = j0; j < std::min(j0 + 8, nb); ++j)
        for (int k = k0; k < std::min(k0 + 8, d); ++k)
          Bt[static_cast<std::size_t>(k) * nb + j] = B[static_cast<std::size_t>(j) * d + k];
  gemm_nn(A, d, Bt.get(), na, d, nb, out, alpha, false, diag);
}

// Eigen-decomposition of the symmetric n x n matrix A (overwritten: its diagonal ends as the eigenvalues) by cyclic
// Jacobi rotations; U (n x n) receives the eigenvectors as columns. Converges quadratically; n is small (K + k).
void jacobi_eigen(double* A, double* U, int n) {
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) U[i * n + j] = i == j ? 1.0 : 0.0;
  for (int sweep = 0; sweep < 60; ++sweep) {
    double off = 0.0, diag = 0.0;
    for (int i = 0; i < n; ++i) {
      diag += A[i * n + i] * A[i * n + i];
      for (int j = i + 1; j < n; ++j) off += A[i * n + j] * A[i * n + j];
    }
    if (!(off > 1e-32 * diag)) return;  // converged (or NaN: the caller sees it in the result)
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) {
        const double apq = A[p * n + q];
        if (apq == 0.0) continue;
        const double theta = (A[q * n + q] - A[p * n + p]) / (2.0 * apq);
        const double t = (theta >= 0.0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1.0));
        const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
        for (int k = 0; k < n; ++k) {  // columns p, q
          const double akp = A[k * n + p], akq = A[k * n + q];
          A[k * n + p] = c * akp - s * akq;
          A[k * n + q] = s * akp + c * akq;
        }
        for (int k = 0; k < n; ++k) {  // rows p, q
          const double apk = A[p * n + k], aqk = A[q * n + k];
          A[p * n + k] = c * apk - s * aqk;
          A[q * n + k] = s * apk + c * aqk;
        }
        A[p * n + q] = A[q * n + p] = 0.0;
        for (int k = 0; k < n; ++k) {
          const double ukp = U[k * n + p], ukq = U[k * n + q];
          U[k * n + p] = c * ukp - s * ukq;
          U[k * n + q] = s * ukp + c * ukq;
        }
      }
  }
}

}  // namespace twolayer

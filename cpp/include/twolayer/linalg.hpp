// Small dense matrix products for the weight-space layer (row-major, double), register-blocked so that the
// compiler vectorises them: Gram blocks A B^T / s and accumulations C += alpha X Y.
#pragma once
#include <cstddef>

namespace twolayer {

// diag >= 0 asks only for the entries (r, j) with j >= r + diag (the upper triangle of a symmetric product whose
// rows start at row diag); the others may then be left incomplete.

// out (na x nb) = A (na x d) B^T (B: nb x d) * alpha.
void gemm_nt(const double* A, int na, const double* B, int nb, int d, double alpha, double* out, int diag = -1);

// C (m x n) = (accumulate ? C : 0) + alpha X (m x k) Y (k x n); X has row stride ldx (C is not read unless
// accumulate).
void gemm_nn(const double* X, int ldx, const double* Y, int m, int k, int n, double* C, double alpha, bool accumulate,
             int diag = -1);

// Eigen-decomposition of the symmetric n x n matrix A (overwritten: its diagonal ends as the eigenvalues) by cyclic
// Jacobi rotations; U (n x n) receives the eigenvectors as columns. For small n (the overlap blocks).
void jacobi_eigen(double* A, double* U, int n);

}  // namespace twolayer

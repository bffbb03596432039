// Functions shared by the host and the CUDA backend (cpp/cuda/): TWOLAYER_HD marks a function that nvcc compiles
// for both (__host__ __device__) and is empty for a host compiler, so that the maths is written once. Such functions
// use only what device code has: <cmath> on doubles, plain arrays, no exceptions, strings or allocation.
#pragma once

#if defined(__CUDACC__)
#define TWOLAYER_HD __host__ __device__
#define TWOLAYER_UNROLL _Pragma("unroll")
#else
#define TWOLAYER_HD
#define TWOLAYER_UNROLL _Pragma("GCC unroll 16")
#endif

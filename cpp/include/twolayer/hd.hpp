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

// Device code cannot throw: where the host throws, a TWOLAYER_HD function returns a value its caller recognises
// instead (NaN for the kernels: the CUDA backend hands every matrix whose value is not finite back to the host, whose
// code raises the error). TWOLAYER_HOST_THROW(exception, value) is `throw exception` on the host and `return value`
// in device code.
#if defined(__CUDA_ARCH__)
#define TWOLAYER_HOST_THROW(exception, device_value) return device_value
#else
#define TWOLAYER_HOST_THROW(exception, device_value) throw exception
#endif

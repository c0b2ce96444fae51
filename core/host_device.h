// MTPSPEC_HOST_DEVICE marks a function that both the host compiler and nvcc compile, for code
// written once for the CPU and the GPU (the MoE routing rule, the FP8 widening of device weights).
#pragma once

#if defined(__CUDACC__)
#define MTPSPEC_HOST_DEVICE __host__ __device__
#else
#define MTPSPEC_HOST_DEVICE
#endif

// What the compute of a decode step's parts can reach on this machine when nothing but that compute
// bounds it: the ceilings a step's measured parts are held against (bench/report/real_scale_bandwidth.py).
// Each is the best of a few timed passes on the default pool's threads, every thread on data of its
// own that stays in its core's caches, so memory never bounds them.
#pragma once

#include <cstdint>

#include "nlohmann/json.hpp"

namespace mtpspec::bench {

// {"threads", and, for all threads together:
//  "fp8_gemv_weights_per_second": Linear on one row of x against an FP8 matrix [out, hidden] with
//      block scales and no NaN codes (the weight streaming parts of a decode step), resident;
//  "fp8_gemv_bf16_activations_weights_per_second", "fp8_gemv_fp8_activations_weights_per_second":
//      the same with the row taken in bf16 or fp8 (ActivationPrecision, the pair tiles);
//  "f32_row_kernel_macs_per_second": DotRows of 32 latent queries [32, 512] against 256 f32 cache
//      rows [256, 512] (the attention's and the indexer's score kernel), resident;
//  "fma_macs_per_second": 512-bit f32 multiply-adds on registers alone (the cores' multiply-add
//      rate; 0 without AVX-512);
//  "bf16_dot_macs_per_second": 512-bit bf16 pair products (VDPBF16PS, 32 multiply-adds each) on
//      registers alone (the rate the prefill GEMM on pairs is held against; 0 without AVX-512 BF16)}.
nlohmann::json MeasureComputeCeilings(int64_t hidden);

// The bf16 dot-product rate of `threads` threads of the default pool (multiply-adds per second), as
// "bf16_dot_macs_per_second" measures it.
double Bf16DotMacsPerSecond(int threads);

}  // namespace mtpspec::bench

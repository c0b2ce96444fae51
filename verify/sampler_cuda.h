// The target sampler on the GPU, twin of SampleToken (verify/sampler.h).
//
// Each row of device logits gets the CPU's distribution — softmax(logits / T) in double, then
// top-k, top-p (on the renormalised top-k set) and min-p over the probabilities sorted descending
// with ties by index — and an inverse-CDF draw in index order with the Philox uniform keyed by
// (seed, position, RngStream::kTarget), computed on the device with the same arithmetic as
// core/philox.cc. Only the token ids cross to the host.
//
// The sums (softmax total, top-p prefix, the draw's CDF) are taken over fixed parallel trees rather
// than left to right, so they can differ from the CPU's in the last bits; a draw can differ only
// when the uniform or the top-p threshold falls within that rounding of a boundary.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cuda_context.h"
#include "verify/sampler.h"

namespace mtpspec::cuda {

// Row r of logits [rows, V] is drawn at absolute position positions[r] (host array).
absl::StatusOr<std::vector<int32_t>> SampleTokensCuda(Context& ctx, const float* logits, int64_t rows, int64_t vocab,
                                                      const SamplingParams& params, const int64_t* positions);

// Greedy argmax of each row (lowest index on ties), ids to host.
absl::StatusOr<std::vector<int32_t>> ArgmaxCuda(Context& ctx, const float* logits, int64_t rows, int64_t vocab);

// Device Philox4x32-10 and UniformAt, for known-answer tests of the device RNG.
absl::StatusOr<std::vector<std::array<uint32_t, 4>>> Philox4x32Cuda(Context& ctx,
                                                                    const std::vector<std::array<uint32_t, 4>>& counters,
                                                                    const std::vector<std::array<uint32_t, 2>>& keys);
absl::StatusOr<std::vector<double>> UniformAtCuda(Context& ctx, uint64_t seed, const std::vector<uint64_t>& positions,
                                                  uint32_t stream);

}  // namespace mtpspec::cuda

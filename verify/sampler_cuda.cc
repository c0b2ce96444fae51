#include "verify/sampler_cuda.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "verify/sampler_cuda_launch.h"

namespace mtpspec::cuda {
namespace {

absl::Status CheckShape(int64_t rows, int64_t vocab, absl::string_view op) {
  if (rows < 0 || vocab < 1 || rows * vocab > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": unsupported shape [", rows, ", ", vocab,
                                                   "] (rows >= 0, vocab >= 1, rows * vocab < 2^31)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> ArgmaxCuda(Context& ctx, const float* logits, int64_t rows, int64_t vocab) {
  RETURN_IF_ERROR(CheckShape(rows, vocab, "ArgmaxCuda"));
  if (rows == 0) return std::vector<int32_t>();
  ASSIGN_OR_RETURN(auto tokens, StreamBuffer<int32_t>::Create(rows, ctx.stream(), "argmax tokens"));  // [rows]
  RETURN_IF_ERROR(FromCuda(launch::SamplerArgmax(logits, rows, vocab, tokens.data(), ctx.stream()), "SamplerArgmax"));
  return CopyToHost(ctx, tokens.data(), rows, "argmax tokens");
}

absl::StatusOr<std::vector<int32_t>> SampleTokensCuda(Context& ctx, const float* logits, int64_t rows, int64_t vocab,
                                                      const SamplingParams& params, const int64_t* positions) {
  RETURN_IF_ERROR(ValidateSamplingParams(params));
  RETURN_IF_ERROR(CheckShape(rows, vocab, "SampleTokensCuda"));
  if (params.greedy()) return ArgmaxCuda(ctx, logits, rows, vocab);
  if (rows == 0) return std::vector<int32_t>();
  if (positions == nullptr) return absl::InvalidArgumentError("SampleTokensCuda: positions is null");
  const cudaStream_t stream = ctx.stream();
  const int64_t n = rows * vocab;
  ASSIGN_OR_RETURN(auto probs, StreamBuffer<double>::Create(n, stream, "sampler probabilities"));  // [rows, V]
  RETURN_IF_ERROR(FromCuda(launch::SamplerSoftmax(logits, rows, vocab, params.temperature, probs.data(), stream),
                           "SamplerSoftmax"));

  const bool filter = params.top_k > 0 || params.top_p < 1.0 || params.min_p > 0.0;
  StreamBuffer<double> cut_prob;   // [rows]
  StreamBuffer<int32_t> cut_index;  // [rows]
  StreamBuffer<double> kept_mass;  // [rows]
  if (filter) {
    size_t temp_bytes = 0;
    RETURN_IF_ERROR(FromCuda(launch::SamplerSortTempBytes(rows, vocab, &temp_bytes), "SamplerSortTempBytes"));
    // At least one byte: cub reads a null scratch pointer as a size query and would not sort.
    temp_bytes = std::max<size_t>(temp_bytes, 1);
    ASSIGN_OR_RETURN(auto temp, StreamBuffer<uint8_t>::Create(static_cast<int64_t>(temp_bytes), stream, "sort scratch"));
    ASSIGN_OR_RETURN(auto index_scratch, StreamBuffer<int32_t>::Create(n, stream, "sort indices"));    // [rows, V]
    ASSIGN_OR_RETURN(auto offsets, StreamBuffer<int32_t>::Create(rows + 1, stream, "sort offsets"));   // [rows + 1]
    ASSIGN_OR_RETURN(auto sorted_probs, StreamBuffer<double>::Create(n, stream, "sorted probabilities"));  // [rows, V]
    ASSIGN_OR_RETURN(auto sorted_index, StreamBuffer<int32_t>::Create(n, stream, "sorted indices"));   // [rows, V]
    RETURN_IF_ERROR(FromCuda(launch::SamplerSortRows(probs.data(), rows, vocab, temp.data(), temp_bytes,
                                                     index_scratch.data(), offsets.data(), sorted_probs.data(),
                                                     sorted_index.data(), stream),
                             "SamplerSortRows"));
    ASSIGN_OR_RETURN(cut_prob, StreamBuffer<double>::Create(rows, stream, "cut probabilities"));
    ASSIGN_OR_RETURN(cut_index, StreamBuffer<int32_t>::Create(rows, stream, "cut indices"));
    ASSIGN_OR_RETURN(kept_mass, StreamBuffer<double>::Create(rows, stream, "kept mass"));
    launch::SamplerFilter cut;
    cut.top_k = params.top_k;
    cut.top_p = params.top_p;
    cut.min_p = params.min_p;
    RETURN_IF_ERROR(FromCuda(launch::SamplerFilterSorted(sorted_probs.data(), sorted_index.data(), rows, vocab, cut,
                                                         cut_prob.data(), cut_index.data(), kept_mass.data(), stream),
                             "SamplerFilterSorted"));
  }
  ASSIGN_OR_RETURN(auto device_positions, UploadToStream(ctx, positions, rows, "sampler positions"));  // [rows]
  ASSIGN_OR_RETURN(auto tokens, StreamBuffer<int32_t>::Create(rows, stream, "sampled tokens"));  // [rows]
  RETURN_IF_ERROR(FromCuda(launch::SamplerDraw(probs.data(), rows, vocab, filter ? cut_prob.data() : nullptr,
                                               filter ? cut_index.data() : nullptr,
                                               filter ? kept_mass.data() : nullptr, params.seed,
                                               device_positions.data(), static_cast<uint32_t>(RngStream::kTarget),
                                               tokens.data(), stream),
                           "SamplerDraw"));
  return CopyToHost(ctx, tokens.data(), rows, "sampled tokens");
}

absl::StatusOr<std::vector<std::array<uint32_t, 4>>> Philox4x32Cuda(
    Context& ctx, const std::vector<std::array<uint32_t, 4>>& counters,
    const std::vector<std::array<uint32_t, 2>>& keys) {
  if (counters.size() != keys.size()) return absl::InvalidArgumentError("Philox4x32Cuda: counters and keys differ in count");
  const int64_t n = static_cast<int64_t>(counters.size());
  std::vector<uint32_t> flat_counters, flat_keys;  // [n, 4], [n, 2]
  for (int64_t i = 0; i < n; ++i) {
    flat_counters.insert(flat_counters.end(), counters[i].begin(), counters[i].end());
    flat_keys.insert(flat_keys.end(), keys[i].begin(), keys[i].end());
  }
  ASSIGN_OR_RETURN(auto device_counters, UploadToStream(ctx, flat_counters.data(), 4 * n, "Philox counters"));
  ASSIGN_OR_RETURN(auto device_keys, UploadToStream(ctx, flat_keys.data(), 2 * n, "Philox keys"));
  ASSIGN_OR_RETURN(auto device_out, StreamBuffer<uint32_t>::Create(4 * n, ctx.stream(), "Philox output"));  // [n, 4]
  RETURN_IF_ERROR(FromCuda(launch::PhiloxBatch(device_counters.data(), device_keys.data(), n, device_out.data(),
                                               ctx.stream()),
                           "PhiloxBatch"));
  ASSIGN_OR_RETURN(std::vector<uint32_t> flat_out, CopyToHost(ctx, device_out.data(), 4 * n, "Philox output"));
  std::vector<std::array<uint32_t, 4>> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 4; ++j) out[i][j] = flat_out[4 * i + j];
  }
  return out;
}

absl::StatusOr<std::vector<double>> UniformAtCuda(Context& ctx, uint64_t seed, const std::vector<uint64_t>& positions,
                                                  uint32_t stream) {
  const int64_t n = static_cast<int64_t>(positions.size());
  ASSIGN_OR_RETURN(auto device_positions, UploadToStream(ctx, positions.data(), n, "uniform positions"));  // [n]
  ASSIGN_OR_RETURN(auto device_out, StreamBuffer<double>::Create(n, ctx.stream(), "uniforms"));        // [n]
  RETURN_IF_ERROR(FromCuda(launch::UniformBatch(seed, device_positions.data(), n, stream, device_out.data(),
                                                ctx.stream()),
                           "UniformBatch"));
  return CopyToHost(ctx, device_out.data(), n, "uniforms");
}

}  // namespace mtpspec::cuda

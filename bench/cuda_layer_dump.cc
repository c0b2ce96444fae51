// Runs ONE decoder layer of a checkpoint on fixed inputs and dumps what bench/cuda_layer_vs_torch.py
// compares with its plain-PyTorch twin (bench/README_cuda.md):
//   x [T + 1, H]: deterministic pseudo-random layer inputs (the residual stream entering the layer);
//   rows 0 … T − 1 are run through the layer first (prefill chunks: they fill the layer's cache);
//   row T is then the decode step (one row at position T: the absorbed gather path once T > K),
//   timed over --reps repetitions (median; the cache is truncated back to T before each).
// Writes DIR/x.npy [T + 1, H], DIR/out.npy [1, H] (the layer output of row T) and DIR/layer.json
// (timing, shapes, the path taken). --device cpu runs the CPU layer (DecoderLayerForward) instead,
// which is how the PyTorch reference itself is checked on a machine without a GPU.
//
// The layer must be a full (indexer) layer: a shared layer needs its donor's selection.
//
// Usage: cuda_layer_dump --model-dir DIR --layer L [--prefix 4096] [--reps 20] --out-dir OUT
//                        [--device cuda|cpu]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/device.h"
#include "io/npy.h"
#include "model/decoder_layer.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "core/cli_args.h"
#ifdef MTPSPEC_HAVE_CUDA
#include "model/model_cuda.h"
#endif

namespace mtpspec {
namespace {

using Clock = std::chrono::steady_clock;

// x[i] uniform in [−1, 1) from a SplitMix64 of i (the script reads x.npy, it need not regenerate).
std::vector<float> LayerInputs(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = static_cast<uint64_t>(i + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    x[i] = static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }
  return x;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

constexpr int64_t kChunk = 512;  // prefill rows per layer call

struct Result {
  std::vector<float> out;  // [H] the layer output of row T
  std::vector<double> seconds;
  AttentionPath path = AttentionPath::kAuto;
};

absl::StatusOr<Result> RunCpu(const Model& model, int64_t layer, const std::vector<float>& x, int64_t T,
                              int64_t reps) {
  const int64_t H = model.config().hidden_size;
  ASSIGN_OR_RETURN(auto cache, model.NewCache(T + 1));
  const DecoderLayerWeights& w = model.weights().layers[layer];
  for (int64_t begin = 0; begin < T; begin += kChunk) {
    const int64_t rows = std::min(kChunk, T - begin);
    std::vector<float> h(x.begin() + begin * H, x.begin() + (begin + rows) * H);  // [rows, H]
    std::vector<int64_t> positions;
    for (int64_t r = 0; r < rows; ++r) positions.push_back(begin + r);
    TopK topk;
    RETURN_IF_ERROR(DecoderLayerForward(w, model.layer_context(), h.data(), rows, positions.data(),
                                        cache->layer(layer), cache->capacity(), {}, &topk, nullptr));
  }
  Result result;
  for (int64_t rep = 0; rep < reps; ++rep) {
    std::vector<float> h(x.begin() + T * H, x.begin() + (T + 1) * H);  // [1, H]
    const int64_t position = T;
    TopK topk;
    const Clock::time_point start = Clock::now();
    RETURN_IF_ERROR(DecoderLayerForward(w, model.layer_context(), h.data(), 1, &position, cache->layer(layer),
                                        cache->capacity(), {}, &topk, &result.path));
    result.seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    result.out = h;
  }
  return result;
}

#ifdef MTPSPEC_HAVE_CUDA
absl::StatusOr<Result> RunCuda(const Model& model, int64_t layer, const std::vector<float>& x, int64_t T,
                               int64_t reps) {
  const ModelConfig& c = model.config();
  const int64_t H = c.hidden_size;
  // Only this layer's weights go to the device (not the whole model).
  ASSIGN_OR_RETURN(std::unique_ptr<cuda::Context> context, cuda::Context::Create());
  cuda::Context& ctx = *context;
  cuda::WeightArena arena;
  ASSIGN_OR_RETURN(const cuda::DeviceLayerWeights weights,
                   cuda::UploadDecoderLayer(arena, model.weights().layers[layer], c,
                                            absl::StrCat("model.layers.", layer)));
  ASSIGN_OR_RETURN(const cuda::DeviceRope rope, cuda::DeviceRope::Create(model.layer_context().rope, T + 1));
  ASSIGN_OR_RETURN(std::unique_ptr<cuda::DeviceKvCache> cache, cuda::DeviceKvCache::Create(model.CacheShape(), T + 1));
  ASSIGN_OR_RETURN(cuda::DeviceArray<float> inputs, cuda::DeviceArray<float>::Create((T + 1) * H, "layer inputs"));
  RETURN_IF_ERROR(inputs.CopyFromHost(x.data(), (T + 1) * H, ctx.stream()));
  ASSIGN_OR_RETURN(cuda::DeviceArray<float> h, cuda::DeviceArray<float>::Create(kChunk * H, "layer rows"));
  cuda::LayerScratch scratch;
  cuda::DeviceTopK topk;
  for (int64_t begin = 0; begin < T; begin += kChunk) {
    const int64_t rows = std::min(kChunk, T - begin);
    RETURN_IF_ERROR(cuda::FromCuda(cudaMemcpyAsync(h.data(), inputs.data() + begin * H,
                                                   static_cast<size_t>(rows * H) * sizeof(float),
                                                   cudaMemcpyDeviceToDevice, ctx.stream()),
                                   "cudaMemcpyAsync (layer rows)"));
    std::vector<int64_t> positions;
    for (int64_t r = 0; r < rows; ++r) positions.push_back(begin + r);
    RETURN_IF_ERROR(cuda::DecoderLayerForwardCuda(ctx, weights, model.layer_context(), rope, h.data(), rows,
                                                  positions.data(), *cache, layer, {}, &topk, scratch)
                        .status());
  }
  cache->SetLength(T);
  Result result;
  result.out.resize(static_cast<size_t>(H));
  for (int64_t rep = 0; rep < reps; ++rep) {
    RETURN_IF_ERROR(cache->Truncate(T));
    RETURN_IF_ERROR(cuda::FromCuda(cudaMemcpyAsync(h.data(), inputs.data() + T * H, static_cast<size_t>(H) * sizeof(float),
                                                   cudaMemcpyDeviceToDevice, ctx.stream()),
                                   "cudaMemcpyAsync (decode row)"));
    RETURN_IF_ERROR(ctx.Synchronize());
    const int64_t position = T;
    const Clock::time_point start = Clock::now();
    ASSIGN_OR_RETURN(result.path, cuda::DecoderLayerForwardCuda(ctx, weights, model.layer_context(), rope, h.data(), 1,
                                                                &position, *cache, layer, {}, &topk, scratch));
    RETURN_IF_ERROR(ctx.Synchronize());
    result.seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    cache->SetLength(T + 1);
  }
  RETURN_IF_ERROR(h.CopyToHost(result.out.data(), H, ctx.stream()));
  return result;
}
#endif

absl::Status Run(int argc, char** argv) {
  ASSIGN_OR_RETURN(CliArgs args,
                   CliArgs::Parse(argc, argv, 1, {"model-dir", "layer", "prefix", "reps", "out-dir", "device"}));
  const std::string dir = args.Get("model-dir"), out_dir = args.Get("out-dir");
  if (dir.empty() || out_dir.empty()) return absl::InvalidArgumentError("--model-dir and --out-dir are required");
  ASSIGN_OR_RETURN(const int64_t layer, args.GetInt("layer", 1));
  ASSIGN_OR_RETURN(const int64_t T, args.GetInt("prefix", 4096));
  ASSIGN_OR_RETURN(const int64_t reps, args.GetInt("reps", 20));
  ASSIGN_OR_RETURN(const Device device, ParseDevice(args.Get("device", "cuda"), "--device"));
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(dir));
  const ModelConfig& c = model->config();
  if (layer < 0 || layer >= c.num_hidden_layers || !c.layer_has_indexer[layer]) {
    return absl::InvalidArgumentError(absl::StrCat("--layer ", layer, " must be a full (indexer) trunk layer"));
  }
  if (T < 1 || reps < 1 || T + 1 > c.max_position_embeddings) {
    return absl::InvalidArgumentError("--prefix must be in [1, max_position_embeddings) and --reps >= 1");
  }
  const int64_t H = c.hidden_size;
  const std::vector<float> x = LayerInputs((T + 1) * H);
  Result result;
  if (device == Device::kCpu) {
    ASSIGN_OR_RETURN(result, RunCpu(*model, layer, x, T, reps));
  } else {
#ifdef MTPSPEC_HAVE_CUDA
    ASSIGN_OR_RETURN(result, RunCuda(*model, layer, x, T, reps));
#else
    return absl::FailedPreconditionError("--device cuda: built without the CUDA backend");
#endif
  }
  RETURN_IF_ERROR(WriteNpy(out_dir + "/x.npy",
                           TensorView::Contiguous(DType::kF32, const_cast<float*>(x.data()), {T + 1, H})));
  RETURN_IF_ERROR(WriteNpy(out_dir + "/out.npy", TensorView::Contiguous(DType::kF32, result.out.data(), {1, H})));
  nlohmann::json j = {{"layer", layer},
                      {"prefix", T},
                      {"device", DeviceName(device)},
                      {"path", AttentionPathName(result.path)},
                      {"dense_mlp", c.layer_is_dense[layer]},
                      {"reps", reps},
                      {"median_seconds", Median(result.seconds)},
                      {"seconds", result.seconds}};
  std::ofstream file(out_dir + "/layer.json");
  file << j.dump(2) << "\n";
  if (!file) return absl::InternalError(out_dir + "/layer.json: write failed");
  return absl::OkStatus();
}

}  // namespace
}  // namespace mtpspec

int main(int argc, char** argv) {
  const absl::Status st = mtpspec::Run(argc, argv);
  if (!st.ok()) {
    std::cerr << "cuda_layer_dump: " << st << "\n";
    return 1;
  }
  return 0;
}

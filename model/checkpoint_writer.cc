#include "model/checkpoint_writer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/fp8_quantise.h"
#include "core/parallel.h"
#include "io/safetensors_writer.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/tensor_table.h"

namespace mtpspec {
namespace {

Tensor RandomTensor(const TensorSpec& spec, DType dtype, double scale, std::mt19937_64& rng) {
  const bool vector = spec.kind == TensorKind::kVector;
  Tensor f32 = Tensor::Empty(DType::kF32, spec.shape);
  float* data = f32.data<float>();
  const int64_t n = f32.numel();
  if (vector) {
    // Norm weights near 1, biases near 0, the router bias small.
    const bool bias = spec.name.find("bias") != std::string::npos;
    std::uniform_real_distribution<float> u(bias ? -0.1f : 0.7f, bias ? 0.1f : 1.3f);
    for (int64_t i = 0; i < n; ++i) data[i] = u(rng);
    return f32;
  }
  const double in = static_cast<double>(spec.shape.back());
  const float bound = static_cast<float>(spec.kind == TensorKind::kEmbedding ? scale : scale * std::sqrt(3.0 / in));
  std::uniform_real_distribution<float> u(-bound, bound);
  for (int64_t i = 0; i < n; ++i) data[i] = u(rng);
  if (dtype == DType::kF32) return f32;
  Tensor out = Tensor::Empty(DType::kBF16, spec.shape);
  for (int64_t i = 0; i < n; ++i) out.data<uint16_t>()[i] = F32ToBf16(data[i]);
  return out;
}

// A uniform in [0, 1) for element i of the stream `key` (SplitMix64 of the counter, 24 bits).
float HashUniform(uint64_t key, uint64_t i) {
  uint64_t z = key + (i + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

// RandomTensor's distributions, drawn in parallel from HashUniform(key, ·).
Tensor ParallelRandomTensor(const TensorSpec& spec, DType dtype, double scale, uint64_t key) {
  float lo, hi;
  if (spec.kind == TensorKind::kVector) {
    const bool bias = spec.name.find("bias") != std::string::npos;
    lo = bias ? -0.1f : 0.7f;
    hi = bias ? 0.1f : 1.3f;
    dtype = DType::kF32;  // norms and biases stay f32, as RandomTensor keeps them
  } else {
    const double in = static_cast<double>(spec.shape.back());
    hi = static_cast<float>(spec.kind == TensorKind::kEmbedding ? scale : scale * std::sqrt(3.0 / in));
    lo = -hi;
  }
  Tensor out = Tensor::Empty(dtype, spec.shape);
  const int64_t n = out.numel();
  DefaultThreadPool().ParallelFor(n, 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float v = lo + (hi - lo) * HashUniform(key, static_cast<uint64_t>(i));
      if (dtype == DType::kF32) {
        out.data<float>()[i] = v;
      } else {
        out.data<uint16_t>()[i] = F32ToBf16(v);
      }
    }
  });
  return out;
}

}  // namespace

absl::Status WriteRandomCheckpoint(const std::string& dir, const nlohmann::json& config_json,
                                   const RandomCheckpointOptions& options) {
  ASSIGN_OR_RETURN(ModelConfig config, ParseModelConfig(config_json, "random checkpoint config"));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot create directory: ", ec.message()));
  {
    std::ofstream out(dir + "/config.json");
    out << config_json.dump(2) << "\n";
    if (!out) return absl::InternalError(absl::StrCat(dir, "/config.json: write failed"));
  }
  std::vector<TensorSpec> specs = GlobalTensorSpecs(config);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    auto layer = DecoderLayerTensorSpecs(config, l);
    specs.insert(specs.end(), layer.begin(), layer.end());
  }
  if (options.include_mtp) {
    for (int64_t k = 0; k < config.num_nextn_predict_layers; ++k) {
      for (TensorSpec& s : MtpLayerTensorSpecs(config, config.num_hidden_layers + k)) {
        if (!s.optional || options.mtp_copies) specs.push_back(std::move(s));
      }
    }
  }
  std::mt19937_64 rng(options.seed);
  // Shards are written one at a time so a >1 GB benchmark model never sits in memory twice.
  std::vector<std::pair<std::string, TensorView>> shard;
  std::vector<Tensor> shard_storage;
  nlohmann::json weight_map = nlohmann::json::object();
  int64_t shard_bytes = 0, shard_index = 0, total_bytes = 0;
  std::vector<std::string> shard_files;
  auto flush = [&](bool last) -> absl::Status {
    if (shard.empty()) return absl::OkStatus();
    const bool sharded = options.max_shard_bytes > 0;
    const std::string file =
        sharded ? absl::StrCat("model-", shard_index + 1, ".safetensors") : std::string("model.safetensors");
    RETURN_IF_ERROR(WriteSafetensors(dir + "/" + file, shard, {{"format", "pt"}}));
    for (const auto& [name, view] : shard) {
      weight_map[name] = file;
      total_bytes += static_cast<int64_t>(view.nbytes());
    }
    shard_files.push_back(file);
    shard.clear();
    shard_storage.clear();
    shard_bytes = 0;
    ++shard_index;
    return absl::OkStatus();
  };
  shard_storage.reserve(2 * specs.size());
  const bool ue8m0_scales = config.quantization.scale_fmt == "ue8m0";
  for (size_t index = 0; index < specs.size(); ++index) {
    const TensorSpec& spec = specs[index];
    // FP8: the release's layout (ReleaseStoresFp8 tensors quantised with block scales, the rest bf16).
    const bool fp8 = options.dtype == DType::kF8E4M3 && ReleaseStoresFp8(spec);
    const DType dtype = options.dtype != DType::kF8E4M3 ? options.dtype : (fp8 ? DType::kF32 : DType::kBF16);
    if (options.zeros && spec.kind != TensorKind::kVector) {  // structure only: zero weights, written as holes
      shard.push_back({spec.name, TensorView::Contiguous(fp8 ? DType::kF8E4M3 : dtype, nullptr, spec.shape)});
      shard_bytes += static_cast<int64_t>(shard.back().second.nbytes());
      if (fp8) {
        shard_storage.push_back(Tensor::Empty(DType::kF32, ScaleShapeOf(spec.shape)));
        std::fill_n(shard_storage.back().data<float>(), shard_storage.back().numel(), 1.0f);
        shard.push_back({ScaleNameOf(spec.name), shard_storage.back().view()});
      }
      if (options.max_shard_bytes > 0 && shard_bytes >= options.max_shard_bytes) RETURN_IF_ERROR(flush(false));
      continue;
    }
    Tensor t = options.parallel ? ParallelRandomTensor(spec, dtype, options.scale,
                                                       options.seed * 0x100000001b3ull + index * 0x9e3779b97f4a7c15ull)
                                : RandomTensor(spec, dtype, options.scale, rng);
    if (fp8) {
      auto [codes, scales] = QuantiseFp8(t.view(), ue8m0_scales);
      shard_bytes += static_cast<int64_t>(codes.view().nbytes() + scales.view().nbytes());
      shard_storage.push_back(std::move(codes));
      shard.push_back({spec.name, shard_storage.back().view()});
      shard_storage.push_back(std::move(scales));
      shard.push_back({ScaleNameOf(spec.name), shard_storage.back().view()});
    } else {
      shard_bytes += static_cast<int64_t>(t.view().nbytes());
      shard_storage.push_back(std::move(t));
      shard.push_back({spec.name, shard_storage.back().view()});
    }
    if (options.max_shard_bytes > 0 && shard_bytes >= options.max_shard_bytes) RETURN_IF_ERROR(flush(false));
  }
  RETURN_IF_ERROR(flush(true));
  if (options.max_shard_bytes > 0) {
    // The releases' names: model-00001-of-00163.safetensors, … (the count is known only now).
    std::map<std::string, std::string> renamed;
    for (size_t i = 0; i < shard_files.size(); ++i) {
      const std::string name = absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shard_files.size());
      std::filesystem::rename(dir + "/" + shard_files[i], dir + "/" + name, ec);
      if (ec) return absl::InternalError(absl::StrCat(dir, "/", shard_files[i], ": rename failed: ", ec.message()));
      renamed[shard_files[i]] = name;
    }
    for (auto& [tensor, file] : weight_map.items()) file = renamed[file.get<std::string>()];
    nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    std::ofstream out(dir + "/model.safetensors.index.json");
    out << index.dump(1) << "\n";
    if (!out) return absl::InternalError(absl::StrCat(dir, "/model.safetensors.index.json: write failed"));
  }
  return absl::OkStatus();
}

}  // namespace mtpspec

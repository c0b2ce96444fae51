// Strict checkpoint loading driven by the tensor table.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "attention/kv_cache.h"
#include "model/config.h"
#include "model/weights.h"

namespace mtpspec {

enum class WeightDType {
  kAsStored,  // f32, bf16 and fp8 (with its block scales) used in place; f16 becomes f32
  kF32,       // every matrix converted to f32
  kBF16,      // every matrix converted to bf16 (fp8 dequantised to bf16)
  kFP8,       // every matrix in FP8: FP8 used in place, the others quantised at load to FP8 with
              // 128 x 128 block scales (max|w| / 448), except the MoE router and the row kernels'
              // kv_b_proj (kept as stored); for a release, that quantises its bf16 head and eh_proj
};

struct LoadOptions {
  WeightDType weight_dtype = WeightDType::kAsStored;
  bool load_mtp = true;  // false: ignore (but still validate the names of) MTP layers
  // How checkpoint files are held (io/safetensors.h): read into transparent huge pages by
  // default, since decode streams every weight once per token and 4 KiB pages cost it TLB walks;
  // kMapped keeps the zero-copy mmap (e.g. to share one page cache copy between processes). A load
  // that converts (weight_dtype other than kAsStored) maps the files either way, and with kHugePages
  // copies the matrices it keeps as stored into huge pages, so that the files' bytes are not held
  // twice.
  FileMemory file_memory = FileMemory::kHugePages;
  // How the caches this model makes (Model::NewCache, MtpModule::NewCache) keep the indexer keys, and
  // so how the indexer computes its scores: f32 by default; bf16 for half the bytes and twice the
  // multiply-adds per instruction (an even index_head_dim); fp8 as DeepSeek-V3.2's reference inference
  // code (rotated e4m3 keys and queries with power-of-two scales; index_head_dim a power of two).
  IndexKeyStorage index_keys = IndexKeyStorage::kF32;
  // The precision the Linear kernels take their input rows in (ActivationPrecision, core/tensor.h):
  // f32 by default; bf16 for the FP8 and bf16 matrices, or fp8 for the FP8 matrices as DeepSeek-V3.2's
  // reference code quantises activations (groups of 128, power-of-two scales). f32 matrices, the MoE
  // router and kv_b_proj take f32 whatever this says.
  ActivationPrecision activations = ActivationPrecision::kF32;
};

struct LoadReport {
  int64_t tensors_loaded = 0;
  int64_t fp8_tensors_in_place = 0;     // FP8 matrices the kernels read as stored
  int64_t fp8_tensors_dequantised = 0;  // FP8 matrices widened at load (--weights f32/bf16)
  int64_t fp8_tensors_quantised = 0;    // f32/bf16/f16 matrices quantised to FP8 at load (--weights fp8)
  int64_t matrices_reduced_activations = 0;  // FP8 and bf16 matrices whose Linear takes bf16 or fp8 rows
  bool mtp_present = false;  // MTP weights were found in the checkpoint
  std::string mtp_note;      // why MTP is unavailable, when it is
  std::string activations_note;  // why LoadOptions::activations changes nothing, when it does not
};

// Loads the weights of `config` from the checkpoint directory `dir`. Every missing, unexpected or
// misshapen tensor is reported in one error that names the tensor and its file.
absl::StatusOr<std::unique_ptr<ModelWeights>> LoadWeights(const ModelConfig& config, const std::string& dir,
                                                          const LoadOptions& options, LoadReport* report);

}  // namespace mtpspec

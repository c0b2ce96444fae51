// Helpers of the whole-model GPU tests: the models they run (golden fixtures, the trained tiny
// model, random larger shapes), loaded on the host with bf16 weights so that the CPU reference and
// the GPU compute on the same weight values, and comparisons.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/model.h"
#include "model/model_cuda.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/model/model_test_util.h"
#include "testing/tiny_configs.h"

namespace mtpspec::cuda {

// "golden/glm_a" → tests/golden/glm_a; "models/glm-tiny-mtp" → models/glm-tiny-mtp.
inline std::string TestModelDir(const std::string& name) { return std::string(MTPSPEC_SOURCE_DIR) + "/" +
                                                                  (name.rfind("golden/", 0) == 0 ? "tests/" : "") +
                                                                  name; }

// The host model with every matrix in bf16: the CPU side of a GPU-vs-CPU comparison.
inline std::unique_ptr<Model> LoadBf16(const std::string& dir) {
  LoadOptions options;
  options.weight_dtype = WeightDType::kBF16;
  auto model = Model::Load(dir, options);
  EXPECT_TRUE(model.ok()) << dir << ": " << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

// A random glm_moe_dsa checkpoint larger than the fixtures in every dimension (bf16 weights):
// H 512, 8 heads, r_q 256, r_kv 128, d_n 64, d_r 32, d_v 64, 16 experts (top 4) of width 128,
// indexer 8 × 64 with K = 64, vocab 1000, 5 layers F/S/S/F/S (IndexShare) plus the MTP layer.
inline nlohmann::json LargerGlmConfig() {
  nlohmann::json c = TinyGlmConfig();
  c["vocab_size"] = 1000;
  c["hidden_size"] = 512;
  c["num_hidden_layers"] = 5;
  c["num_attention_heads"] = 8;
  c["num_key_value_heads"] = 8;
  c["q_lora_rank"] = 256;
  c["kv_lora_rank"] = 128;
  c["qk_nope_head_dim"] = 64;
  c["qk_rope_head_dim"] = 32;
  c["v_head_dim"] = 64;
  c["intermediate_size"] = 768;
  c["moe_intermediate_size"] = 128;
  c["n_routed_experts"] = 16;
  c["num_experts_per_tok"] = 4;
  c["max_position_embeddings"] = 512;
  c["index_n_heads"] = 8;
  c["index_head_dim"] = 64;
  c["index_topk"] = 64;
  c["indexer_types"] = {"full", "shared", "shared", "full", "shared"};
  return c;
}

// Writes the larger random checkpoint once per test binary and returns its directory.
inline const std::string& LargerModelDir() {
  static testing_util::ScopedTempDir* temp = new testing_util::ScopedTempDir();
  static const std::string dir = [] {
    const std::string d = temp->File("larger");
    RandomCheckpointOptions options;
    options.seed = 11;
    options.dtype = DType::kBF16;
    const absl::Status st = WriteRandomCheckpoint(d, LargerGlmConfig(), options);
    EXPECT_TRUE(st.ok()) << st;
    return d;
  }();
  return dir;
}

// Largest |a − b| over the largest |b| (relative to the logit scale).
inline double RelDiff(const float* a, const float* b, int64_t n) {
  return testing_util::RelativeMaxDiff(a, b, n);
}

inline int32_t ArgmaxRow(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

// Gap between the best and second-best logit of a row, over the row's largest |logit|.
inline double TopTwoMargin(const float* row, int64_t n) {
  float best = -INFINITY, second = -INFINITY, scale = 1e-30f;
  for (int64_t i = 0; i < n; ++i) {
    scale = std::max(scale, std::fabs(row[i]));
    if (row[i] > best) {
      second = best;
      best = row[i];
    } else if (row[i] > second) {
      second = row[i];
    }
  }
  return (best - second) / scale;
}

// One-element argument vectors (a braced list does not convert to std::span).
inline std::vector<int32_t> Tok(int32_t t) { return {t}; }
inline std::vector<int64_t> Pos(int64_t p) { return {p}; }

// True when the two float arrays are equal bit for bit.
inline bool BitEqual(const float* a, const float* b, int64_t n) {
  return std::equal(a, a + n, b, [](float x, float y) { return std::memcmp(&x, &y, sizeof(float)) == 0; });
}

}  // namespace mtpspec::cuda

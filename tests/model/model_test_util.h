// Helpers for model tests: a tiny random checkpoint on disk and logit comparisons.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/model.h"
#include "tests/util/test_util.h"
#include "testing/tiny_configs.h"

namespace mtpspec::testing_util {

// Largest |a - b| over all elements, divided by the largest |b| (so 1e-5 means "agrees to 1e-5 of
// the logit scale").
inline double RelativeMaxDiff(const float* a, const float* b, int64_t n) {
  double diff = 0, scale = 1e-30;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

inline double RelativeMaxDiff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  return RelativeMaxDiff(a.data<float>(), b.data<float>(), std::min(a.numel(), b.numel()));
}

// A random tiny glm_moe_dsa checkpoint (TinyGlmConfig) written once per test binary.
class TinyModelEnv {
 public:
  static TinyModelEnv& Get() {
    static TinyModelEnv* env = new TinyModelEnv();
    return *env;
  }
  const std::string& dir() const { return dir_; }
  const Model& model() const { return *model_; }

 private:
  TinyModelEnv() {
    dir_ = temp_.File("tiny");
    RandomCheckpointOptions options;
    options.seed = 7;
    options.scale = 2.0;  // sharp attention and indexer scores
    absl::Status st = WriteRandomCheckpoint(dir_, TinyGlmConfig(), options);
    EXPECT_TRUE(st.ok()) << st;
    auto m = Model::Load(dir_);
    EXPECT_TRUE(m.ok()) << m.status();
    if (m.ok()) model_ = std::move(*m);
  }
  ScopedTempDir temp_;
  std::string dir_;
  std::unique_ptr<Model> model_;
};

inline std::vector<int32_t> TestTokens(int64_t n, int64_t vocab, uint64_t seed = 3) {
  std::vector<int32_t> t(n);
  uint64_t s = seed;
  for (auto& v : t) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<int32_t>((s >> 33) % vocab);
  }
  return t;
}

inline std::vector<int64_t> Range(int64_t begin, int64_t end) {
  std::vector<int64_t> r;
  for (int64_t i = begin; i < end; ++i) r.push_back(i);
  return r;
}

// The tiny model of TinyModelEnv.
inline const Model& Tiny() { return TinyModelEnv::Get().model(); }

// The tiny model's forward of `tokens` at positions start, start + 1, … on `cache`; a failure fails
// the test.
inline ForwardOutput RunTiny(KvCache& cache, const std::vector<int32_t>& tokens, int64_t start,
                             ForwardOptions options = {}) {
  auto positions = Range(start, start + static_cast<int64_t>(tokens.size()));
  auto out = Tiny().Forward(cache, tokens, positions, options);
  EXPECT_TRUE(out.ok()) << out.status();
  return std::move(*out);
}

// The context length at which a DSA model turns from the dense path to the sparse ones (its
// index_topk), which the tests place prompts around. A model without an indexer is dense at every
// length; its tests use the golden DSA models' index_topk (8) for the same prompt lengths.
inline int64_t SparseThreshold(const ModelConfig& config) { return config.has_indexer ? config.index_topk : 8; }

}  // namespace mtpspec::testing_util

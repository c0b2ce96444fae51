// The models the tests of mtp/ run on, loaded once per test binary: a golden checkpoint by its
// directory name under tests/golden ("glm_a", "dsv32_b", ...), or "trained" for the bundled
// models/glm-tiny-mtp. Suffixes change how it loads, in any order: "+bf16-keys" or "+fp8-keys" keep the
// indexer keys in bf16 or fp8 (LoadOptions::index_keys), "+fp8-weights" or "+bf16-weights" stores
// every matrix in FP8 or bf16 at load (WeightDType), "+bf16-act" or "+fp8-act" has the FP8 (and with
// bf16, the bf16) matrices take their input rows in bf16 or fp8 (LoadOptions::activations).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/model.h"

namespace mtpspec::testing_util {

// Splits a test model's name into its base name and the load options its suffixes ask for.
inline std::string ParseTestModelName(const std::string& name, LoadOptions* options) {
  std::string base = name;
  for (bool found = true; found;) {
    found = false;
    auto strip = [&](std::string_view suffix) {
      if (!base.ends_with(suffix)) return false;
      base.resize(base.size() - suffix.size());
      return found = true;
    };
    if (strip("+bf16-keys")) options->index_keys = IndexKeyStorage::kBf16;
    if (strip("+fp8-keys")) options->index_keys = IndexKeyStorage::kFp8;
    if (strip("+fp8-weights")) options->weight_dtype = WeightDType::kFP8;
    if (strip("+bf16-weights")) options->weight_dtype = WeightDType::kBF16;
    if (strip("+bf16-act")) options->activations = ActivationPrecision::kBf16;
    if (strip("+fp8-act")) options->activations = ActivationPrecision::kFp8;
  }
  return base;
}

inline const Model& LoadMtpTestModel(const std::string& name) {
  static auto* models = new std::map<std::string, std::unique_ptr<Model>>();
  auto& slot = (*models)[name];
  if (!slot) {
    LoadOptions options;
    const std::string base = ParseTestModelName(name, &options);
    const std::string dir = base == "trained" ? absl::StrCat(MTPSPEC_MODELS_DIR, "/glm-tiny-mtp")
                                              : absl::StrCat(MTPSPEC_GOLDEN_DIR, "/", base);
    auto m = Model::Load(dir, options);
    EXPECT_TRUE(m.ok()) << m.status();
    slot = std::move(*m);
  }
  return *slot;
}

}  // namespace mtpspec::testing_util

// The models the tests of mtp/ run on, loaded once per test binary: a golden checkpoint by its
// directory name under tests/golden ("glm_a", "dsv32_b", ...), or "trained" for the bundled
// models/glm-tiny-mtp. A name ending in "+bf16-keys" or "+fp8-keys" loads that model with its indexer
// keys in bf16 or fp8 (LoadOptions::index_keys).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/model.h"

namespace mtpspec::testing_util {

inline const Model& LoadMtpTestModel(const std::string& name) {
  static auto* models = new std::map<std::string, std::unique_ptr<Model>>();
  auto& slot = (*models)[name];
  if (!slot) {
    std::string base = name;
    LoadOptions options;
    for (const auto& [suffix, storage] : {std::pair{std::string_view("+bf16-keys"), IndexKeyStorage::kBf16},
                                          std::pair{std::string_view("+fp8-keys"), IndexKeyStorage::kFp8}}) {
      if (base.ends_with(suffix)) {
        base.resize(base.size() - suffix.size());
        options.index_keys = storage;
      }
    }
    const std::string dir = base == "trained" ? absl::StrCat(MTPSPEC_MODELS_DIR, "/glm-tiny-mtp")
                                              : absl::StrCat(MTPSPEC_GOLDEN_DIR, "/", base);
    auto m = Model::Load(dir, options);
    EXPECT_TRUE(m.ok()) << m.status();
    slot = std::move(*m);
  }
  return *slot;
}

}  // namespace mtpspec::testing_util

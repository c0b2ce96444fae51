// The models the tests of mtp/ run on, loaded once per test binary: a golden checkpoint by its
// directory name under tests/golden ("glm_a", "dsv32_b", ...), or "trained" for the bundled
// models/glm-tiny-mtp.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/model.h"

namespace mtpspec::testing_util {

inline const Model& LoadMtpTestModel(const std::string& name) {
  static auto* models = new std::map<std::string, std::unique_ptr<Model>>();
  auto& slot = (*models)[name];
  if (!slot) {
    const std::string dir = name == "trained" ? absl::StrCat(MTPSPEC_MODELS_DIR, "/glm-tiny-mtp")
                                              : absl::StrCat(MTPSPEC_GOLDEN_DIR, "/", name);
    auto m = Model::Load(dir);
    EXPECT_TRUE(m.ok()) << m.status();
    slot = std::move(*m);
  }
  return *slot;
}

}  // namespace mtpspec::testing_util

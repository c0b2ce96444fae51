// Shared by the Generate tests on fakes (generator_test.cc, generator_adaptive_test.cc).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "spec/generator.h"

namespace mtpspec::spec_testing {

inline GenerateOptions Options(int64_t k, int64_t max_new_tokens) {
  GenerateOptions o;
  o.k = k;
  o.max_new_tokens = max_new_tokens;
  return o;
}

// Generate, expecting success (an empty result after a test failure otherwise).
inline GenerateResult MustGenerate(Target& target, Drafter* drafter, const std::vector<int32_t>& prompt,
                                   const GenerateOptions& options) {
  auto result = Generate(target, drafter, prompt, options);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? std::move(*result) : GenerateResult{};
}

}  // namespace mtpspec::spec_testing

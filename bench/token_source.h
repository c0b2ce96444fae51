// Token ids for the benchmarks: held-out corpora read from .npy files (research/train/make_heldout.py
// writes build/heldout/{prose,code}.npy), or seeded random ids for smoke tests.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mtpspec::bench {

struct TokenCorpus {
  std::string name;          // file stem ("prose", "code") or "random"
  std::string path;          // where it came from ("" for random)
  std::vector<int32_t> ids;  // [n]
};

// A 1-D int32 or int64 .npy file of ids in [0, vocab). Errors name the path and the bad index.
absl::StatusOr<TokenCorpus> LoadTokenCorpus(const std::string& path, int64_t vocab);

// DIR/prose.npy and DIR/code.npy (research/train/make_heldout.py writes them). A missing file is
// NotFound naming it and the script; `alternative` names the flags that replace the files.
absl::StatusOr<std::vector<TokenCorpus>> LoadHeldoutCorpora(const std::string& dir, int64_t vocab,
                                                            const std::string& alternative);

// `n` ids uniform in [first, vocab) from `seed`.
TokenCorpus RandomTokenCorpus(int64_t n, int64_t vocab, uint64_t seed, int32_t first = 2);

// A window of `length` consecutive ids starting uniformly at random (needs ids.size() > length).
absl::StatusOr<std::vector<int32_t>> SampleWindow(const TokenCorpus& corpus, int64_t length, std::mt19937_64& rng);

}  // namespace mtpspec::bench

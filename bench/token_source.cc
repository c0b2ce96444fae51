#include "bench/token_source.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "io/npy.h"

namespace mtpspec::bench {

absl::StatusOr<TokenCorpus> LoadTokenCorpus(const std::string& path, int64_t vocab) {
  ASSIGN_OR_RETURN(Tensor t, ReadNpy(path));
  if (t.view().ndim != 1) return absl::InvalidArgumentError(absl::StrCat(path, ": expected a 1-D array of token ids"));
  if (t.dtype() != DType::kI32 && t.dtype() != DType::kI64) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": token ids must be int32 or int64"));
  }
  TokenCorpus corpus;
  corpus.name = std::filesystem::path(path).stem().string();
  corpus.path = path;
  const int64_t n = t.numel();
  corpus.ids.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = t.dtype() == DType::kI32 ? t.data<int32_t>()[i] : t.data<int64_t>()[i];
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": token [", i, "] = ", id, " is outside the model's vocabulary [0, ", vocab, ")"));
    }
    corpus.ids[i] = static_cast<int32_t>(id);
  }
  return corpus;
}

absl::StatusOr<std::vector<TokenCorpus>> LoadHeldoutCorpora(const std::string& dir, int64_t vocab,
                                                            const std::string& alternative) {
  std::vector<TokenCorpus> out;
  for (const char* name : {"prose", "code"}) {
    const std::string path = absl::StrCat(dir, "/", name, ".npy");
    if (!std::filesystem::exists(path)) {
      return absl::NotFoundError(
          absl::StrCat(path, " not found: run python research/train/make_heldout.py, or pass ", alternative));
    }
    ASSIGN_OR_RETURN(TokenCorpus c, LoadTokenCorpus(path, vocab));
    out.push_back(std::move(c));
  }
  return out;
}

TokenCorpus RandomTokenCorpus(int64_t n, int64_t vocab, uint64_t seed, int32_t first) {
  TokenCorpus corpus;
  corpus.name = "random";
  std::mt19937_64 rng(seed);
  const int32_t lo = vocab > first ? first : 0;
  std::uniform_int_distribution<int32_t> dist(lo, static_cast<int32_t>(vocab - 1));
  corpus.ids.resize(n);
  for (int32_t& id : corpus.ids) id = dist(rng);
  return corpus;
}

absl::StatusOr<std::vector<int32_t>> SampleWindow(const TokenCorpus& corpus, int64_t length, std::mt19937_64& rng) {
  const int64_t n = static_cast<int64_t>(corpus.ids.size());
  if (length < 1 || n <= length) {
    return absl::InvalidArgumentError(absl::StrCat("corpus '", corpus.name, "' has ", n,
                                                   " tokens, too few for a window of ", length));
  }
  std::uniform_int_distribution<int64_t> start_dist(0, n - length - 1);
  const int64_t start = start_dist(rng);
  return std::vector<int32_t>(corpus.ids.begin() + start, corpus.ids.begin() + start + length);
}

}  // namespace mtpspec::bench

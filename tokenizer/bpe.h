// The BPE model of a Hugging Face `tokenizer.json` ("model": {"type": "BPE", ...}), used by
// tokenizer/tokenizer.cc. Words arrive already pre-tokenized and mapped to byte-level characters.
//
// Merging follows HF's semantics: starting from one symbol per character, the adjacent pair with
// the lowest merge rank is merged first, the leftmost one on ties, until no adjacent pair has a
// merge. A priority queue keyed by (rank, position) does this in O(n log n) per word, and a
// bounded cache remembers the ids of words already seen.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace mtpspec::tokenizer_internal {

class BpeModel {
 public:
  // Parses the "model" object. Supported: `vocab`, `merges` in the ["a", "b"] pair form or the
  // legacy "a b" string form, `ignore_merges`, `unk_token` / `fuse_unk`; `dropout`,
  // `continuing_subword_prefix` and `end_of_word_suffix` must be null and `byte_fallback` false.
  // Errors name `source` and the offending field.
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& model, const std::string& source);

  // Appends the ids of one word (byte-level characters). A character with no token maps to the
  // unk token if there is one; without one it is an InvalidArgument error (HF silently drops it).
  // Thread-safe.
  absl::Status Tokenize(std::string_view word, std::vector<int32_t>* ids) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // Null if no vocabulary entry has this id.
  const std::string* IdToToken(int32_t id) const;
  // Largest id in the vocabulary, -1 if it is empty.
  int32_t max_id() const { return max_id_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  BpeModel() = default;
  absl::Status MergeWord(std::string_view word, std::vector<int32_t>* ids) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;
  absl::flat_hash_map<int32_t, std::string> id_to_token_;  // a map: ids need not be dense
  int32_t max_id_ = -1;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  bool ignore_merges_ = false;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;

  static constexpr size_t kCacheCapacity = 10000;
  static constexpr size_t kMaxCachedWordBytes = 256;
  mutable std::mutex cache_mutex_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache_;  // guarded by cache_mutex_
};

}  // namespace mtpspec::tokenizer_internal

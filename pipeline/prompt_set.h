// Prompt sets in the JSONL layouts the field's acceptance benchmarks use, one prompt a line:
//   Spec-Bench / MT-Bench   {"question_id": ..., "category": ..., "turns": ["...", "..."]}
//   SPEED-Bench, chat sets  {"category": ..., "turns": [...]} or {"category": ..., "messages": [...]}
//                           (the user messages' contents are the turns)
//   HumanEval               {"task_id": ..., "prompt": ...} (category "humaneval" unless named)
//   plain                   {"prompt": "..."} (category "default")
// SPEED-Bench's prepared files are parquet with the first layout's columns; mtpspec.prompts reads
// them (and writes them out as JSONL for the CLI). The CLI's --prompts-file FILE.jsonl and
// mtpspec.prompts read every set here. Every fault names the source and the line (a parquet
// file's row); a turn still holding SPEED-Bench's placeholder for unfetched data is one.
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace mtpspec {

struct PromptSetItem {
  std::string id;                  // question_id, task_id or id; else the line number
  std::string category;
  std::vector<std::string> turns;  // [turns] the user turns, in order (at least one, none blank)
  std::string source;              // "SOURCE:LINE"
};

// The items of a JSONL prompt set's `text` (blank lines skipped), named `source` in errors; only
// those of `categories` when it is not empty (each named category must be present).
absl::StatusOr<std::vector<PromptSetItem>> ParsePromptSet(absl::string_view text, absl::string_view source,
                                                          const std::vector<std::string>& categories = {});

// The same, read from `path`.
absl::StatusOr<std::vector<PromptSetItem>> LoadPromptSet(const std::string& path,
                                                         const std::vector<std::string>& categories = {});

}  // namespace mtpspec

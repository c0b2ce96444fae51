// One request as a user states it, for every front end: the options struct that the CLI
// (`mtpspec generate`) and the Python bindings (`Model.generate`) both fill in, its validation, and
// the pipeline (target + drafter on the chosen device) that serves it.
//
// Validation errors name the option the way the front end spells it (`--max-new` on the command
// line, `max_new_tokens` in Python), so the two report the same faults in their own words.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "attention/kv_cache.h"
#include "core/device.h"
#include "core/limits.h"
#include "model/model.h"
#include "mtp/mtp_module.h"
#include "spec/generator.h"
#include "spec/interfaces.h"
#include "spec/lookup_drafter.h"

namespace mtpspec {

enum class DraftKind { kNone, kMtp, kLookup, kHybrid };
const char* DraftKindName(DraftKind kind);

// Which front end's spelling an error uses.
enum class Frontend { kCli, kPython };

struct RequestOptions {
  DraftKind draft = DraftKind::kMtp;
  int64_t k = 3;            // drafts per cycle, 0 … kMaxDraftTokens; the maximum with adaptive_k
  bool adaptive_k = false;  // k = "auto"
  int64_t max_new_tokens = 32;
  AcceptParams accept;      // rule, sampling, relaxed and synthetic parameters
  // Synthetic rates in the other published forms (verify/acceptance.h): unconditional per position,
  // or a mean accepted length on vLLM's schedule. ResolveSyntheticRates turns the one given into
  // accept.synthetic_rates (conditional); at most one of the three forms may be given.
  std::vector<double> synthetic_rates_unconditional;
  std::optional<double> synthetic_acceptance_length;
  bool sample_drafts = false;
  bool custom_accept = false;  // a caller's acceptance rule replaces `accept.rule` (the Python hook)
  bool stop_at_eos = true;
  std::optional<std::vector<int64_t>> eos_token_ids;  // replaces config.json's eos_token_id
  std::vector<int64_t> stop_token_ids;                // further ids that end the request
  bool logprobs = false;                              // each emitted token's raw log-probability
  MtpOptions mtp;
  LookupOptions lookup;
  LatentStorage kv_cache = LatentStorage::kF32;
  Device device = Device::kCpu;
  // With device cuda: FP8 checkpoint matrices widened to bf16 (the default) or kept FP8 on the GPU.
  DeviceWeightFormat device_weights = DeviceWeightFormat::kBf16;
  // Tree drafting (core/draft_tree.h): a static shape (`tree`, "--tree 3,2,1") or a node budget
  // (`tree_nodes`, "--tree-nodes 8"). Empty: a chain of k.
  TreeShape tree;
};

// The name of an option in the front end's spelling: Name(Frontend::kCli, "max_new_tokens") is
// "--max-new", Name(kPython, …) "max_new_tokens".
std::string OptionName(Frontend frontend, const std::string& python_name);

// Parsers for the option values, shared by the front ends; errors name the option.
absl::StatusOr<DraftKind> ParseDraftKind(const std::string& text, Frontend frontend);
// "auto" (adaptive k up to kDefaultAdaptiveKMax) or an integer; sets k and adaptive_k.
absl::Status ParseK(const std::string& text, Frontend frontend, RequestOptions& options);
// "true" or "false", nothing else.
absl::StatusOr<bool> ParseBool(const std::string& text, const std::string& option_name);
// Model-load precision of the weights: "stored", "f32" or "bf16".
absl::StatusOr<WeightDType> ParseWeightDType(const std::string& text, Frontend frontend);

// Fills accept.synthetic_rates from synthetic_rates_unconditional or synthetic_acceptance_length
// (for the request's k), refusing two forms at once or an unconditional list that rises; the front
// ends call it once their options are parsed, before ValidateRequest.
absl::Status ResolveSyntheticRates(RequestOptions& options, Frontend frontend);

// Every rule a request must satisfy before anything is loaded or run.
absl::Status ValidateRequest(const RequestOptions& options, Frontend frontend);
// Combinations that are legal but pointless, one sentence each (the CLI prints them to stderr, the
// bindings raise Python warnings).
std::vector<std::string> RequestWarnings(const RequestOptions& options, Frontend frontend);

// The loop's options for this request (callbacks and a carried controller are the caller's).
GenerateOptions ToGenerateOptions(const RequestOptions& options);

// Cache positions a request with a prompt of `prompt_tokens` needs: the prompt, the new tokens and
// one verify block beyond them, at most max_position_embeddings (no arithmetic overflows).
int64_t RequiredCapacity(const Model& model, int64_t prompt_tokens, const RequestOptions& options);

// The target and drafter of a request on its device. GPU objects own device memory and must outlive
// the loop; the pipeline keeps them.
struct Pipeline {
  std::shared_ptr<void> device_model;  // the uploaded model (--device cuda), kept alive
  std::unique_ptr<Target> target;
  std::unique_ptr<Drafter> drafter;  // null for DraftKind::kNone
};

// Builds the pipeline for `model` with caches of `capacity` positions. On CUDA there is no CPU
// fallback: a build without the backend or a machine without a usable GPU is an error that says so.
absl::StatusOr<Pipeline> BuildPipeline(const Model& model, const RequestOptions& options, int64_t capacity,
                                       Frontend frontend);

}  // namespace mtpspec

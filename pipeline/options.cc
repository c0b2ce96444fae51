#include "pipeline/options.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace mtpspec {
namespace {

using Apply = std::function<absl::Status(const OptionValue&, Frontend, RequestOptions&)>;

int64_t Int(const OptionValue& v) { return std::get<int64_t>(v); }
double Float(const OptionValue& v) { return std::get<double>(v); }
bool Bool(const OptionValue& v) { return std::get<bool>(v); }
const std::string& Text(const OptionValue& v) { return std::get<std::string>(v); }

// Setters for the common shapes: a field of RequestOptions set from a value of the option's type.
template <typename Field>
Apply SetInt(Field field) {
  return [field](const OptionValue& v, Frontend, RequestOptions& r) {
    field(r) = Int(v);
    return absl::OkStatus();
  };
}
template <typename Field>
Apply SetFloat(Field field) {
  return [field](const OptionValue& v, Frontend, RequestOptions& r) {
    field(r) = Float(v);
    return absl::OkStatus();
  };
}
template <typename Field>
Apply SetBool(Field field) {
  return [field](const OptionValue& v, Frontend, RequestOptions& r) {
    field(r) = Bool(v);
    return absl::OkStatus();
  };
}
// A word parsed by `parse(text, option name)` into the field.
template <typename Field, typename Parse>
Apply SetWord(const char* name, Field field, Parse parse) {
  return [name, field, parse](const OptionValue& v, Frontend f, RequestOptions& r) -> absl::Status {
    auto parsed = parse(Text(v), OptionName(f, name));
    if (!parsed.ok()) return parsed.status();
    field(r) = *parsed;
    return absl::OkStatus();
  };
}

std::vector<RequestOption> BuildTable() {
  std::vector<RequestOption> t;
  auto add = [&t](std::string name, std::string flag, OptionType type, std::string default_text, std::string help,
                  Apply apply) {
    t.push_back({std::move(name), std::move(flag), type, std::move(default_text), std::move(help), std::move(apply)});
  };
  add("max_new_tokens", "--max-new", OptionType::kInt, "32", "the most tokens to generate",
      SetInt([](RequestOptions& r) -> int64_t& { return r.max_new_tokens; }));
  add("draft", "--draft", OptionType::kText, "mtp", "the drafter: mtp, lookup (prompt n-grams), hybrid or none",
      [](const OptionValue& v, Frontend f, RequestOptions& r) -> absl::Status {
        ASSIGN_OR_RETURN(r.draft, ParseDraftKind(Text(v), f));
        return absl::OkStatus();
      });
  add("k", "--k", OptionType::kIntOrText, "3", "drafts per cycle, 0 to 15, or auto (adaptive, up to 8)",
      [](const OptionValue& v, Frontend f, RequestOptions& r) -> absl::Status {
        if (std::holds_alternative<std::string>(v)) return ParseK(Text(v), f, r);
        r.k = Int(v);
        r.adaptive_k = false;
        return absl::OkStatus();
      });
  add("adaptive_k", "--adaptive-k", OptionType::kBool, "false", "choose k each cycle, with k the most",
      [](const OptionValue& v, Frontend, RequestOptions& r) {
        if (Bool(v)) r.adaptive_k = true;
        return absl::OkStatus();
      });
  add("accept", "--accept", OptionType::kText, "sampler-equality",
      "sampler-equality (lossless), rejection, relaxed (lossy) or synthetic (benchmarks)",
      SetWord("accept", [](RequestOptions& r) -> AcceptRule& { return r.accept.rule; },
              [](const std::string& text, const std::string&) { return ParseAcceptRule(text); }));
  add("temperature", "--temperature", OptionType::kFloat, "0", "sampling temperature (0: greedy)",
      SetFloat([](RequestOptions& r) -> double& { return r.accept.sampling.temperature; }));
  add("top_k", "--top-k", OptionType::kInt, "0", "sample among the k likeliest tokens (0: all)",
      SetInt([](RequestOptions& r) -> int64_t& { return r.accept.sampling.top_k; }));
  add("top_p", "--top-p", OptionType::kFloat, "1", "nucleus sampling's probability mass",
      SetFloat([](RequestOptions& r) -> double& { return r.accept.sampling.top_p; }));
  add("min_p", "--min-p", OptionType::kFloat, "0", "drop tokens below min_p times the top probability",
      SetFloat([](RequestOptions& r) -> double& { return r.accept.sampling.min_p; }));
  add("seed", "--seed", OptionType::kInt, "0", "the sampler's seed (draws are keyed by seed and position)",
      [](const OptionValue& v, Frontend f, RequestOptions& r) -> absl::Status {
        if (Int(v) < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(OptionName(f, "seed"), " = ", Int(v), " is outside [0, ", INT64_MAX, "]"));
        }
        r.accept.sampling.seed = static_cast<uint64_t>(Int(v));
        return absl::OkStatus();
      });
  add("sample_drafts", "--sample-drafts", OptionType::kBool, "false", "draw drafts from the head's distribution",
      SetBool([](RequestOptions& r) -> bool& { return r.sample_drafts; }));
  add("relaxed_top_n", "--relaxed-top-n", OptionType::kInt, "3", "relaxed acceptance: the target's top-n",
      SetInt([](RequestOptions& r) -> int64_t& { return r.accept.relaxed_top_n; }));
  add("relaxed_delta", "--relaxed-delta", OptionType::kFloat, "0.1",
      "relaxed acceptance: within delta of the top probability",
      SetFloat([](RequestOptions& r) -> double& { return r.accept.relaxed_delta; }));
  add("synthetic_rates", "--synthetic-rates", OptionType::kFloatList, "none",
      "synthetic acceptance per draft position, conditional on the positions before",
      [](const OptionValue& v, Frontend, RequestOptions& r) {
        r.accept.synthetic_rates = std::get<std::vector<double>>(v);
        return absl::OkStatus();
      });
  add("synthetic_rates_unconditional", "--synthetic-rates-unconditional", OptionType::kFloatList, "none",
      "synthetic acceptance as the fraction of drafts accepted up to each position",
      [](const OptionValue& v, Frontend, RequestOptions& r) {
        r.synthetic_rates_unconditional = std::get<std::vector<double>>(v);
        return absl::OkStatus();
      });
  add("synthetic_acceptance_length", "--synthetic-acceptance-length", OptionType::kFloat, "none",
      "synthetic acceptance for a mean accepted length, on vLLM's schedule",
      [](const OptionValue& v, Frontend, RequestOptions& r) {
        r.synthetic_acceptance_length = Float(v);
        return absl::OkStatus();
      });
  add("stop_at_eos", "--stop-at-eos", OptionType::kBool, "true", "end the request at an end-of-sequence id",
      SetBool([](RequestOptions& r) -> bool& { return r.stop_at_eos; }));
  add("eos_token_id", "--eos-ids", OptionType::kIntList, "none",
      "end-of-sequence ids in place of config.json's (empty: none)",
      [](const OptionValue& v, Frontend, RequestOptions& r) {
        r.eos_token_ids = std::get<std::vector<int64_t>>(v);
        return absl::OkStatus();
      });
  add("stop_token_ids", "--stop-ids", OptionType::kIntList, "none", "further ids that end the request",
      [](const OptionValue& v, Frontend, RequestOptions& r) {
        r.stop_token_ids = std::get<std::vector<int64_t>>(v);
        return absl::OkStatus();
      });
  add("logprobs", "--logprobs", OptionType::kBool, "false", "each token's log-probability under the target",
      SetBool([](RequestOptions& r) -> bool& { return r.logprobs; }));
  add("mtp_hidden", "--mtp-hidden", OptionType::kText, "post", "the MTP head's first hidden: post or pre final norm",
      SetWord("mtp_hidden", [](RequestOptions& r) -> MtpHidden& { return r.mtp.hidden; }, ParseMtpHidden));
  add("mtp_chain", "--mtp-chain", OptionType::kText, "default",
      "the state chained for k > 1: normed, raw or default (the model type's)",
      SetWord("mtp_chain", [](RequestOptions& r) -> MtpChain& { return r.mtp.chain; }, ParseMtpChain));
  add("mtp_index_share", "--mtp-index-share", OptionType::kText, "exact",
      "later draft steps rescore (exact) or reuse the first step's indexer selection (shared)",
      SetWord("mtp_index_share", [](RequestOptions& r) -> MtpIndexShare& { return r.mtp.index_share; },
              ParseMtpIndexShare));
  add("ngram", "--ngram", OptionType::kInt, "3", "the lookup drafter's longest n-gram",
      SetInt([](RequestOptions& r) -> int64_t& { return r.lookup.max_ngram; }));
  add("kv_cache", "--kv-cache", OptionType::kText, "f32", "the latent cache: f32, int8 or fp8",
      SetWord("kv_cache", [](RequestOptions& r) -> LatentStorage& { return r.kv_cache; }, ParseLatentStorage));
  add("device", "--device", OptionType::kText, "cpu", "cpu or cuda",
      SetWord("device", [](RequestOptions& r) -> Device& { return r.device; },
              [](const std::string& text, const std::string& what) { return ParseDevice(text, what); }));
  add("device_weights", "--device-weights", OptionType::kText, "bf16",
      "with cuda: FP8 matrices widened to bf16 or kept fp8",
      SetWord("device_weights", [](RequestOptions& r) -> DeviceWeightFormat& { return r.device_weights; },
              [](const std::string& text, const std::string& what) { return ParseDeviceWeightFormat(text, what); }));
  add("tree", "--tree", OptionType::kIntList, "none", "a static draft tree: the branching per depth, e.g. 3,2,1",
      [](const OptionValue& v, Frontend f, RequestOptions& r) -> absl::Status {
        const auto& branching = std::get<std::vector<int64_t>>(v);
        if (branching.empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat(OptionName(f, "tree"), " must list the branching of at least one depth, e.g. 3,2,1"));
        }
        r.tree.branching = branching;
        return absl::OkStatus();
      });
  add("tree_nodes", "--tree-nodes", OptionType::kInt, "none", "a draft tree grown by probability to M nodes",
      [](const OptionValue& v, Frontend f, RequestOptions& r) -> absl::Status {
        if (Int(v) < 1) {
          return absl::InvalidArgumentError(absl::StrCat(OptionName(f, "tree_nodes"), " must be >= 1, got ", Int(v)));
        }
        r.tree.max_nodes = Int(v);
        return absl::OkStatus();
      });
  return t;
}

// An error from a parser that did not name the option gets its name in front.
absl::Status Named(const absl::Status& status, const std::string& name) {
  if (status.ok() || absl::StartsWith(status.message(), name)) return status;
  return absl::Status(status.code(), absl::StrCat(name, ": ", status.message()));
}

}  // namespace

const char* OptionTypeName(OptionType type) {
  switch (type) {
    case OptionType::kInt: return "int";
    case OptionType::kFloat: return "float";
    case OptionType::kBool: return "bool";
    case OptionType::kText: return "str";
    case OptionType::kIntOrText: return "int | str";
    case OptionType::kIntList: return "list[int]";
    case OptionType::kFloatList: return "list[float]";
  }
  return "?";
}

const std::vector<RequestOption>& RequestOptionTable() {
  static const std::vector<RequestOption>* table = new std::vector<RequestOption>(BuildTable());
  return *table;
}

const RequestOption* FindRequestOption(const std::string& name) {
  for (const RequestOption& option : RequestOptionTable()) {
    if (option.name == name) return &option;
  }
  return nullptr;
}

absl::StatusOr<OptionValue> ParseOptionText(const RequestOption& option, const std::string& text) {
  auto bad = [&](const char* what) {
    return absl::InvalidArgumentError(absl::StrCat(option.flag, " must be ", what, ", got \"", text, "\""));
  };
  switch (option.type) {
    case OptionType::kInt: {
      int64_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad("an integer");
      return OptionValue(v);
    }
    case OptionType::kFloat: {
      double v;
      if (!absl::SimpleAtod(text, &v)) return bad("a number");
      return OptionValue(v);
    }
    case OptionType::kBool:
      if (text == "true") return OptionValue(true);
      if (text == "false") return OptionValue(false);
      return bad("true or false");
    case OptionType::kText: return OptionValue(text);
    case OptionType::kIntOrText: {
      int64_t v;
      if (absl::SimpleAtoi(text, &v)) return OptionValue(v);
      return OptionValue(text);
    }
    case OptionType::kIntList:
    case OptionType::kFloatList: {
      std::vector<int64_t> ints;
      std::vector<double> floats;
      if (!text.empty()) {
        for (absl::string_view piece : absl::StrSplit(text, ',')) {
          int64_t i;
          double d;
          if (option.type == OptionType::kIntList ? !absl::SimpleAtoi(piece, &i) : !absl::SimpleAtod(piece, &d)) {
            return bad(option.type == OptionType::kIntList ? "comma-separated integers" : "comma-separated numbers");
          }
          if (option.type == OptionType::kIntList) ints.push_back(i); else floats.push_back(d);
        }
      }
      if (option.type == OptionType::kIntList) return OptionValue(ints);
      return OptionValue(floats);
    }
  }
  return absl::InternalError("unknown option type");
}

absl::StatusOr<RequestOptions> MakeRequest(const std::map<std::string, OptionValue>& values, Frontend frontend) {
  for (const auto& [name, value] : values) {
    if (FindRequestOption(name) == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown option ", name));
  }
  RequestOptions r;
  for (const RequestOption& option : RequestOptionTable()) {
    auto it = values.find(option.name);
    if (it == values.end()) continue;
    RETURN_IF_ERROR(Named(option.apply(it->second, frontend, r), OptionName(frontend, option.name)));
  }
  if (values.count("tree") > 0 && values.count("tree_nodes") > 0) {
    return absl::InvalidArgumentError(absl::StrCat("give ", OptionName(frontend, "tree"), " (a static tree) or ",
                                                   OptionName(frontend, "tree_nodes"), " (a grown one), not both"));
  }
  RETURN_IF_ERROR(ResolveSyntheticRates(r, frontend));
  RETURN_IF_ERROR(ValidateRequest(r, frontend));
  return r;
}

std::string RequestOptionsHelp() {
  std::string out;
  for (const RequestOption& option : RequestOptionTable()) {
    absl::StrAppend(&out, absl::StrFormat("  %-34s %s (default %s)\n", option.flag, option.help, option.default_text));
  }
  return out;
}

}  // namespace mtpspec

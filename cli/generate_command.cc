#include "cli/generate_command.h"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <span>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "pipeline/batch.h"
#include "pipeline/options.h"
#include "pipeline/prompt_set.h"
#include "pipeline/request.h"
#include "pipeline/runner.h"
#include "spec/adaptive_k.h"
#include "tokenizer/tokenizer.h"

namespace mtpspec {

const std::set<std::string>& GenerateOptionNames() {
  static const std::set<std::string> names = [] {
    std::set<std::string> names = {"ids",     "prompt", "stats-json", "weights",    "threads",     "capacity",
                                   "prompts-file", "batch", "k-schedule", "index-keys", "activations", "stop",
                                   "categories"};
    for (const RequestOption& option : RequestOptionTable()) names.insert(option.flag.substr(2));
    return names;
  }();
  return names;
}

namespace {

struct PromptLine {
  int64_t number;  // 1-based line number in the file
  std::string text;
};

// The prompts of a --prompts-file: one prompt text per line (an empty line is an error that names it).
absl::StatusOr<std::vector<PromptLine>> ReadPromptLines(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("--prompts-file ", path, ": cannot be opened"));
  std::vector<PromptLine> lines;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompts-file ", path, " line ", number, " is empty (every line is a prompt)"));
    }
    lines.push_back({number, line});
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat("--prompts-file ", path, ": read failed"));
  if (lines.empty()) return absl::InvalidArgumentError(absl::StrCat("--prompts-file ", path, " has no prompt lines"));
  return lines;
}

// One request's output lines (and its JSON, without the statistics' summary).
nlohmann::json PrintResult(const GenerateResult& result, const std::vector<int32_t>& prompt,
                           const Tokenizer* tokenizer, const StopStrings* stops = nullptr) {
  // Generated ids the tokenizer cannot decode (e.g. the padded rows of a model's vocabulary) leave
  // the text out rather than failing the run. A stop string's request shows the text before it.
  std::string text;
  if (stops != nullptr && stops->hit()) {
    text = *stops->hit();
    std::cout << "prompt_tokens: " << absl::StrJoin(prompt, ",") << "\n";
  } else if (tokenizer) {
    absl::StatusOr<std::string> decoded = tokenizer->Decode(result.tokens);
    text = decoded.ok() ? *decoded : absl::StrCat("(not decodable: ", decoded.status().message(), ")");
    std::cout << "prompt_tokens: " << absl::StrJoin(prompt, ",") << "\n";
  }
  std::cout << "tokens: " << absl::StrJoin(result.tokens, ",") << "\n";
  if (tokenizer) std::cout << "text: " << text << "\n";
  if (!result.logprobs.empty()) std::cout << "logprobs: " << absl::StrJoin(result.logprobs, ",") << "\n";
  std::cout << "stop: " << result.stop_reason << "\n";
  nlohmann::json j = result.stats.ToJson();
  j["tokens"] = result.tokens;
  if (!result.logprobs.empty()) j["logprobs"] = result.logprobs;
  j["stop_reason"] = result.stop_reason;
  if (tokenizer) j["text"] = text;
  return j;
}

// The --stats-json of a series, written as it runs:
//   {"requests": [ one object per finished request ], "aggregate": {...}[, "error": "..."]}
class SeriesJsonWriter {
 public:
  static absl::StatusOr<std::unique_ptr<SeriesJsonWriter>> Open(const std::string& path) {
    auto writer = std::unique_ptr<SeriesJsonWriter>(new SeriesJsonWriter(path));
    writer->out_ << "{\n  \"requests\": [";
    if (!writer->out_) return absl::PermissionDeniedError(absl::StrCat("--stats-json ", path, ": cannot be written"));
    return writer;
  }

  absl::Status Add(const nlohmann::json& request) {
    out_ << (count_++ == 0 ? "\n" : ",\n") << Indented(request.dump(2), "    ");
    out_.flush();  // a reader (or a crash) sees every finished request
    return Check();
  }

  // Closes the document; `error` (if not empty) names the request that stopped the series.
  absl::Status Finish(const nlohmann::json& aggregate, absl::string_view error) {
    out_ << (count_ == 0 ? "]" : "\n  ]") << ",\n  \"aggregate\": " << Indented(aggregate.dump(2), "  ").substr(2);
    if (!error.empty()) out_ << ",\n  \"error\": " << nlohmann::json(std::string(error)).dump();
    out_ << "\n}\n";
    out_.close();
    return Check();
  }

 private:
  explicit SeriesJsonWriter(const std::string& path) : path_(path), out_(path) {}

  static std::string Indented(const std::string& text, absl::string_view prefix) {
    std::string result = absl::StrCat(prefix, text);
    for (size_t at = result.find('\n'); at != std::string::npos; at = result.find('\n', at + 1)) {
      result.insert(at + 1, prefix.data(), prefix.size());
    }
    return result;
  }

  absl::Status Check() {
    if (!out_) return absl::InternalError(absl::StrCat(path_, ": write failed"));
    return absl::OkStatus();
  }

  std::string path_;
  std::ofstream out_;
  int64_t count_ = 0;
};

// The request options of the command line (pipeline/request.h), validated.
// The request options from the flags of the option table (pipeline/options.h).
absl::StatusOr<RequestOptions> ParseRequest(const CliArgs& args) {
  std::map<std::string, OptionValue> values;
  for (const RequestOption& option : RequestOptionTable()) {
    const std::string flag = option.flag.substr(2);
    if (!args.Has(flag)) continue;
    ASSIGN_OR_RETURN(values[option.name], ParseOptionText(option, args.Get(flag)));
  }
  ASSIGN_OR_RETURN(RequestOptions r, MakeRequest(values, Frontend::kCli));
  if (r.device == Device::kCuda && !BuiltWithCuda()) {
    return absl::FailedPreconditionError(
        "--device cuda: this mtpspec was built without the CUDA backend (configure with nvcc and "
        "-DMTPSPEC_ENABLE_CUDA=ON); use --device cpu");
  }
  return r;
}

// A batch request's error without the "request R: " the batch names it by; the command line names
// requests by line.
std::string UnnamedMessage(const absl::Status& status, size_t r) {
  std::string message(status.message());
  const std::string prefix = absl::StrCat("request ", r, ": ");
  if (message.rfind(prefix, 0) == 0) message = message.substr(prefix.size());
  return message;
}

// --batch B: the prompts run B at a time through GenerateBatch (spec/batch.h), one verify forward
// per cycle for every request in the batch. Each request prints as in a series, in file order; a
// request that fails prints its error and the others are kept. The --stats-json document adds the
// batch's statistics: {"requests": [...], "aggregate": {...}, "batch": {...}[, "errors": [...]]}.
absl::Status RunBatch(const CliArgs& args, const Model& model, const RequestOptions& request, int64_t capacity,
                      const std::vector<std::vector<int32_t>>& prompts, const std::vector<std::string>& names,
                      const Tokenizer* tokenizer) {
  ASSIGN_OR_RETURN(const int64_t batch, args.GetInt("batch", 1));
  std::vector<BatchKStep> k_schedule;
  if (args.Has("k-schedule")) {
    if (request.adaptive_k) return absl::InvalidArgumentError("--k-schedule sets k by batch size; it conflicts with --k auto");
    ASSIGN_OR_RETURN(k_schedule, ParseKSchedule(args.Get("k-schedule"), Frontend::kCli));
  }
  const GenerateOptions options = ToGenerateOptions(request);  // each request its own adaptive-k controller
  std::vector<BatchRequest> requests;
  std::vector<std::optional<StopStrings>> stops(prompts.size());  // [requests] each its own watcher
  for (size_t r = 0; r < prompts.size(); ++r) {
    requests.push_back({prompts[r], options});
    if (args.Has("stop")) {
      ASSIGN_OR_RETURN(stops[r], StopStrings::Create(*tokenizer, {args.Get("stop")}, "--stop"));
      requests.back().options.on_tokens = StoppingCallback(&*stops[r], nullptr);
    }
  }
  ASSIGN_OR_RETURN(BatchResult result, RunBatchRequests(model, request, capacity, batch, requests,
                                                        std::move(k_schedule), Frontend::kCli));
  for (size_t r = 0; r < prompts.size(); ++r) {
    if (stops[r]) ApplyStopStrings(*stops[r], result.requests[r].result);
  }

  nlohmann::json j_requests = nlohmann::json::array(), errors = nlohmann::json::array();
  SpecStats total;
  for (size_t r = 0; r < result.requests.size(); ++r) {
    const BatchRequestResult& done = result.requests[r];
    std::cout << "== request " << r + 1 << " of " << prompts.size() << "\n";
    if (!done.status.ok()) {
      const std::string error = absl::StrCat(names[r], ": ", UnnamedMessage(done.status, r));
      std::cout << "error: " << error << "\n";
      std::cerr << "mtpspec generate: " << error << "\n";
      errors.push_back(error);
      continue;
    }
    nlohmann::json j = PrintResult(done.result, prompts[r], tokenizer, stops[r] ? &*stops[r] : nullptr);
    j["slot"] = done.slot;
    j["queued_seconds"] = done.queued_seconds;
    j["latency_seconds"] = done.latency_seconds;
    j["request_tokens_per_second"] = done.tokens_per_second();
    j_requests.push_back(std::move(j));
    total.Merge(done.result.stats);
  }
  std::cout << "== all " << prompts.size() << " requests, " << batch << " at a time\n"
            << total.Summary() << result.stats.Summary() << std::flush;
  if (args.Has("stats-json")) {
    nlohmann::json doc = {{"requests", j_requests}, {"aggregate", total.ToJson()}, {"batch", result.stats.ToJson()}};
    if (!errors.empty()) doc["errors"] = errors;
    std::ofstream out(args.Get("stats-json"));
    out << doc.dump(2) << "\n";
    if (!out) return absl::PermissionDeniedError(absl::StrCat("--stats-json ", args.Get("stats-json"), ": cannot be written"));
  }
  if (!errors.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(errors.size(), " of ", prompts.size(),
                                                   " requests failed (the others finished; see above)"));
  }
  return absl::OkStatus();
}

// One round of a prompt set: `prompts` as a series on one runner or, with --batch B, B at a time;
// each request's result (or its error, named by `names`) in order, with its stop-string watcher.
struct RoundRun {
  std::vector<absl::StatusOr<GenerateResult>> results;  // [requests]
  std::vector<std::optional<StopStrings>> stops;          // [requests]
};

absl::StatusOr<RoundRun> RunRound(const CliArgs& args, const Model& model, const RequestOptions& request,
                                  const Tokenizer& tokenizer, const std::vector<std::vector<int32_t>>& prompts) {
  int64_t longest = 0;
  for (const std::vector<int32_t>& prompt : prompts) longest = std::max<int64_t>(longest, prompt.size());
  ASSIGN_OR_RETURN(const int64_t capacity, args.GetInt("capacity", RequiredCapacity(model, longest, request)));
  RoundRun round;
  round.stops.resize(prompts.size());
  for (size_t r = 0; r < prompts.size() && args.Has("stop"); ++r) {
    ASSIGN_OR_RETURN(round.stops[r], StopStrings::Create(tokenizer, {args.Get("stop")}, "--stop"));
  }
  if (args.Has("batch")) {
    ASSIGN_OR_RETURN(const int64_t batch, args.GetInt("batch", 1));
    std::vector<BatchRequest> requests;
    for (size_t r = 0; r < prompts.size(); ++r) {
      requests.push_back({prompts[r], ToGenerateOptions(request)});
      if (round.stops[r]) requests.back().options.on_tokens = StoppingCallback(&*round.stops[r], nullptr);
    }
    ASSIGN_OR_RETURN(BatchResult result, RunBatchRequests(model, request, capacity, batch, requests, {}, Frontend::kCli));
    for (size_t r = 0; r < prompts.size(); ++r) {
      BatchRequestResult& done = result.requests[r];
      if (done.status.ok() && round.stops[r]) ApplyStopStrings(*round.stops[r], done.result);
      if (!done.status.ok()) {
        round.results.push_back(absl::Status(done.status.code(), UnnamedMessage(done.status, r)));
      } else {
        round.results.push_back(std::move(done.result));
      }
    }
    return round;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<RequestRunner> runner, RequestRunner::Create(model, request, capacity, Frontend::kCli));
  for (size_t r = 0; r < prompts.size(); ++r) {
    RunHooks hooks;
    hooks.stops = round.stops[r] ? &*round.stops[r] : nullptr;
    round.results.push_back(runner->Run(prompts[r], hooks));
  }
  return round;
}

// --prompts-file FILE.jsonl: a prompt set (pipeline/prompt_set.h), only --categories a,b when given.
// Every turn is a request. Turns run in rounds: an item's turn after the first is appended, after a
// blank line, to its text so far with the model's replies, as MT-Bench runs its second turn (and as
// mtpspec.prompts.run_prompt_set runs raw text). A request that fails is reported and ends its
// item; the others go on. The summary and the --stats-json document give each category beside the
// aggregate: {"requests": [...], "categories": {name: {...}}, "aggregate": {...}[, "errors": [...]]}.
// What a turn's reply adds to its item's text, as Python's GenerateResult.text has it: the text
// before a stop string, else the decoded tokens without the EOS or stop id that ended the request
// (nothing when they do not decode).
std::string ReplyText(const GenerateResult& result, const Tokenizer& tokenizer, const StopStrings* stops) {
  if (stops != nullptr && stops->hit()) return *stops->hit();
  std::span<const int32_t> tokens(result.tokens);
  const bool ended = result.stop_reason == "eos" || result.stop_reason == "stop_token";
  if (ended && !tokens.empty()) tokens = tokens.first(tokens.size() - 1);
  absl::StatusOr<std::string> text = tokenizer.Decode(tokens);
  return text.ok() ? *text : "";
}

// A prompt set's statistics per category, with the acceptance length both ways the field states it:
// the mean of the category's requests' and one over all its steps (token-weighted, vLLM's
// mean_acceptance_length).
struct CategoryStats {
  SpecStats stats;
  int64_t requests = 0;
  std::vector<double> lengths;  // [requests that drafted] 1 + accepted / drafts

  void Add(const SpecStats& request) {
    stats.Merge(request);
    requests += 1;
    if (request.num_drafts > 0) lengths.push_back(request.mean_acceptance_length());
  }

  // Prints the summary under "== category NAME" and returns the JSON.
  nlohmann::json Report(const std::string& name) const {
    double per_request = 1.0;
    if (!lengths.empty()) per_request = std::accumulate(lengths.begin(), lengths.end(), 0.0) / lengths.size();
    std::cout << "== category " << name << ": " << requests << " requests; mean acceptance length "
              << absl::StrFormat("%.3f per request, %.3f token-weighted", per_request, stats.mean_acceptance_length())
              << "\n" << stats.Summary();
    nlohmann::json j = stats.ToJson();
    j["requests"] = requests;
    j["mean_acceptance_length_per_request"] = per_request;
    j["mean_acceptance_length_token_weighted"] = stats.mean_acceptance_length();
    return j;
  }
};

// --prompts-file FILE.jsonl: a prompt set (pipeline/prompt_set.h), only --categories a,b when given.
// Every turn is a request. Turns run in rounds: an item's turn after the first is appended, after a
// blank line, to its text so far with the model's replies, as MT-Bench runs its second turn (and as
// mtpspec.prompts.run_prompt_set runs raw text). Each round gets a pipeline sized to its longest
// prompt (so a k = auto controller starts afresh each round). A request that fails, or a round that
// cannot run, is reported and ends those items; the others go on. The summary and the --stats-json
// document give each category beside the aggregate:
// {"requests": [...], "categories": {name: {...}}, "aggregate": {...}[, "errors": [...]]}.
absl::Status RunPromptSet(const CliArgs& args, const Model& model, const RequestOptions& request,
                          const Tokenizer& tokenizer, const std::vector<PromptSetItem>& items) {
  if (args.Has("k-schedule")) return absl::InvalidArgumentError("--k-schedule is not taken with a prompt set");
  std::vector<std::string> contexts(items.size());  // [items] the text so far
  std::vector<bool> ended(items.size(), false);     // [items] a turn failed
  size_t rounds = 0;
  for (const PromptSetItem& item : items) rounds = std::max(rounds, item.turns.size());
  std::map<std::string, CategoryStats> by_category;
  SpecStats total;
  nlohmann::json j_requests = nlohmann::json::array(), errors = nlohmann::json::array();
  auto fail = [&](size_t i, size_t turn, absl::string_view message) {
    const std::string error = absl::StrCat(items[i].source, " turn ", turn + 1, ": ", message);
    std::cout << "error: " << error << "\n";
    std::cerr << "mtpspec generate: " << error << "\n";
    errors.push_back(error);
    ended[i] = true;
  };
  for (size_t t = 0; t < rounds; ++t) {
    std::vector<size_t> members;                 // [requests] item index
    std::vector<std::vector<int32_t>> prompts;  // [requests][prompt tokens]
    for (size_t i = 0; i < items.size(); ++i) {
      if (ended[i] || t >= items[i].turns.size()) continue;
      contexts[i] = t == 0 ? items[i].turns[0] : absl::StrCat(contexts[i], "\n\n", items[i].turns[t]);
      absl::StatusOr<std::vector<int32_t>> encoded = tokenizer.Encode(contexts[i]);
      if (!encoded.ok()) {
        fail(i, t, encoded.status().message());
        continue;
      }
      members.push_back(i);
      prompts.push_back(*std::move(encoded));
    }
    if (members.empty()) continue;
    absl::StatusOr<RoundRun> round = RunRound(args, model, request, tokenizer, prompts);
    for (size_t r = 0; r < members.size(); ++r) {
      const PromptSetItem& item = items[members[r]];
      std::cout << "== " << item.id << " (" << item.category << ") turn " << t + 1 << " of " << item.turns.size()
                << "\n";
      const absl::Status status = round.ok() ? round->results[r].status() : round.status();
      if (!status.ok()) {
        fail(members[r], t, status.message());
        continue;
      }
      const GenerateResult& result = *round->results[r];
      const StopStrings* stops = round->stops[r] ? &*round->stops[r] : nullptr;
      nlohmann::json j = PrintResult(result, prompts[r], &tokenizer, stops);
      contexts[members[r]] += ReplyText(result, tokenizer, stops);
      j["id"] = item.id;
      j["category"] = item.category;
      j["turn"] = t + 1;
      j_requests.push_back(std::move(j));
      by_category[item.category].Add(result.stats);
      total.Merge(result.stats);
    }
    std::cout.flush();
  }
  nlohmann::json j_categories = nlohmann::json::object();
  for (const auto& [name, category] : by_category) j_categories[name] = category.Report(name);
  std::cout << "== all " << j_requests.size() << " requests of " << items.size() << " prompts\n"
            << total.Summary() << std::flush;
  if (args.Has("stats-json")) {
    nlohmann::json doc = {{"requests", j_requests}, {"categories", j_categories}, {"aggregate", total.ToJson()}};
    if (!errors.empty()) doc["errors"] = errors;
    std::ofstream out(args.Get("stats-json"));
    out << doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    if (!out) return absl::PermissionDeniedError(absl::StrCat("--stats-json ", args.Get("stats-json"), ": cannot be written"));
  }
  if (!errors.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(errors.size(), " requests failed (the others finished; see above)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunGenerate(const CliArgs& args) {
  if (args.positional().size() != 1) return absl::InvalidArgumentError("generate takes one model directory");
  if (static_cast<int>(args.Has("ids")) + static_cast<int>(args.Has("prompt")) +
          static_cast<int>(args.Has("prompts-file")) != 1) {
    return absl::InvalidArgumentError("generate needs exactly one of --ids, --prompt and --prompts-file");
  }
  ASSIGN_OR_RETURN(const RequestOptions request, ParseRequest(args));
  for (const std::string& warning : RequestWarnings(request, Frontend::kCli)) {
    std::cerr << "mtpspec generate: warning: " << warning << "\n";
  }
  LoadOptions load;
  ASSIGN_OR_RETURN(load.weight_dtype, ParseWeightDType(args.Get("weights", "stored"), Frontend::kCli));
  ASSIGN_OR_RETURN(load.index_keys, ParseIndexKeyStorage(args.Get("index-keys", "f32"), "--index-keys"));
  ASSIGN_OR_RETURN(load.activations, ParseActivationPrecision(args.Get("activations", "f32"), "--activations"));
  const bool prompt_set = args.Has("prompts-file") && absl::EndsWith(args.Get("prompts-file"), ".jsonl");
  if (args.Has("prompts-file") &&
      (absl::EndsWith(args.Get("prompts-file"), ".parquet") || absl::EndsWith(args.Get("prompts-file"), ".gz"))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--prompts-file ", args.Get("prompts-file"), ": the CLI reads JSONL prompt sets (or a prompt per line); ",
        "write it as JSONL with `python -m mtpspec.prompts ", args.Get("prompts-file"), " OUT.jsonl`"));
  }
  if (args.Has("categories") && !prompt_set) {
    return absl::InvalidArgumentError("--categories chooses from a prompt set (--prompts-file FILE.jsonl)");
  }
  std::vector<PromptSetItem> items;
  if (prompt_set) {
    std::vector<std::string> categories;
    if (args.Has("categories")) categories = absl::StrSplit(args.Get("categories"), ',', absl::SkipEmpty());
    absl::StatusOr<std::vector<PromptSetItem>> loaded = LoadPromptSet(args.Get("prompts-file"), categories);
    if (!loaded.ok()) {
      return absl::Status(loaded.status().code(), absl::StrCat("--prompts-file ", loaded.status().message()));
    }
    items = *std::move(loaded);
  }
  std::vector<PromptLine> lines;
  if (args.Has("prompts-file") && !prompt_set) {
    ASSIGN_OR_RETURN(lines, ReadPromptLines(args.Get("prompts-file")));
  } else if (args.Has("prompt")) {
    lines.push_back({0, args.Get("prompt")});
  }
  ASSIGN_OR_RETURN(auto model, Model::Load(args.positional()[0], load));
  if (!model->load_report().activations_note.empty()) {
    std::cerr << "mtpspec generate: warning: --" << model->load_report().activations_note << "\n";
  }
  const int64_t vocab = model->config().vocab_size;
  for (const auto& [flag, ids] : {std::pair{"--stop-ids", &request.stop_token_ids},
                                  std::pair{"--eos-ids", request.eos_token_ids ? &*request.eos_token_ids : nullptr}}) {
    for (size_t i = 0; ids != nullptr && i < ids->size(); ++i) {
      if ((*ids)[i] < 0 || (*ids)[i] >= vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, "[", i, "] = ", (*ids)[i], " is outside the vocabulary [0, ", vocab, ")"));
      }
    }
  }

  if (prompt_set) {
    ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::Load(args.positional()[0] + "/tokenizer.json"));
    return RunPromptSet(args, *model, request, *tokenizer, items);
  }
  // --prompt TEXT and --prompts-file (a prompt text per line) are encoded with DIR/tokenizer.json,
  // which also decodes the generated tokens.
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<std::vector<int64_t>> requests64;  // [requests][prompt tokens]
  std::vector<std::string> names;                // [requests] "--prompt", "--prompts-file line N" or "--ids"
  if (!lines.empty()) {
    ASSIGN_OR_RETURN(tokenizer, Tokenizer::Load(args.positional()[0] + "/tokenizer.json"));
    for (const PromptLine& line : lines) {
      names.push_back(args.Has("prompt") ? "--prompt" : absl::StrCat("--prompts-file line ", line.number));
      ASSIGN_OR_RETURN(std::vector<int32_t> encoded, tokenizer->Encode(line.text));
      if (encoded.empty()) return absl::InvalidArgumentError(absl::StrCat(names.back(), " encodes to no tokens"));
      requests64.emplace_back(encoded.begin(), encoded.end());
    }
  } else {
    ASSIGN_OR_RETURN(std::vector<int64_t> ids64, args.GetIntList("ids"));
    requests64.push_back(std::move(ids64));
    names.push_back("--ids");
  }
  std::vector<std::vector<int32_t>> prompts;  // [requests][prompt tokens]
  int64_t longest = 0;
  for (size_t r = 0; r < requests64.size(); ++r) {
    std::vector<int32_t>& prompt = prompts.emplace_back();
    for (size_t i = 0; i < requests64[r].size(); ++i) {
      const int64_t id = requests64[r][i];
      if (id < 0 || id >= model->config().vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(names[r], tokenizer ? " token" : "", "[", i, "] = ", id,
                                                       " is outside the ",
                                                       "vocabulary [0, ", model->config().vocab_size, ")"));
      }
      prompt.push_back(static_cast<int32_t>(id));
    }
    longest = std::max<int64_t>(longest, static_cast<int64_t>(prompt.size()));
  }
  ASSIGN_OR_RETURN(const int64_t capacity, args.GetInt("capacity", RequiredCapacity(*model, longest, request)));
  if (capacity < 1 || capacity > model->config().max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("--capacity must be in [1, ", model->config().max_position_embeddings,
                                                   "] (max_position_embeddings), got ", capacity));
  }
  if (args.Has("stop") && tokenizer == nullptr) {
    return absl::InvalidArgumentError("--stop needs a text prompt (--prompt or --prompts-file) and the tokenizer");
  }
  if (args.Has("batch")) return RunBatch(args, *model, request, capacity, prompts, names, tokenizer.get());
  if (args.Has("k-schedule")) return absl::InvalidArgumentError("--k-schedule needs --batch B");
  // A series of requests (--prompts-file) shares the loaded model, the caches and, with --k auto,
  // one adaptive-k controller, so later requests start from what earlier ones measured.
  ASSIGN_OR_RETURN(std::unique_ptr<RequestRunner> runner,
                   RequestRunner::Create(*model, request, capacity, Frontend::kCli));
  std::optional<StopStrings> stops;  // the running request's, made anew for each
  auto run = [&](const std::vector<int32_t>& prompt) -> absl::StatusOr<GenerateResult> {
    if (args.Has("stop")) {
      ASSIGN_OR_RETURN(stops, StopStrings::Create(*tokenizer, {args.Get("stop")}, "--stop"));
    }
    RunHooks hooks;
    hooks.stops = stops ? &*stops : nullptr;
    return runner->Run(prompt, hooks);
  };
  if (prompts.size() == 1) {
    ASSIGN_OR_RETURN(GenerateResult result, run(prompts[0]));
    const nlohmann::json j = PrintResult(result, prompts[0], tokenizer.get(), stops ? &*stops : nullptr);
    std::cout << result.stats.Summary();
    if (args.Has("stats-json")) {
      std::ofstream out(args.Get("stats-json"));
      out << j.dump(2) << "\n";
      if (!out) return absl::InternalError(absl::StrCat(args.Get("stats-json"), ": write failed"));
    }
    return absl::OkStatus();
  }
  // A series writes each request's JSON as it finishes rather than holding them all, so a long
  // series runs in constant memory, and a request that fails leaves the ones before it on disk.
  std::unique_ptr<SeriesJsonWriter> json_out;
  if (args.Has("stats-json")) {
    ASSIGN_OR_RETURN(json_out, SeriesJsonWriter::Open(args.Get("stats-json")));
  }
  SpecStats total;
  for (size_t r = 0; r < prompts.size(); ++r) {
    absl::StatusOr<GenerateResult> result = run(prompts[r]);
    if (!result.ok()) {
      const absl::Status failed(result.status().code(), absl::StrCat(names[r], ": ", result.status().message()));
      if (json_out) RETURN_IF_ERROR(json_out->Finish(total.ToJson(), failed.message()));
      return failed;
    }
    std::cout << "== request " << r + 1 << " of " << prompts.size() << "\n";
    const nlohmann::json j = PrintResult(*result, prompts[r], tokenizer.get(), stops ? &*stops : nullptr);
    std::cout.flush();  // a reader of a pipe sees each request as it finishes
    if (json_out) RETURN_IF_ERROR(json_out->Add(j));
    total.Merge(result->stats);
  }
  std::cout << "== all " << prompts.size() << " requests\n" << std::flush << total.Summary();
  if (json_out) RETURN_IF_ERROR(json_out->Finish(total.ToJson(), ""));
  return absl::OkStatus();
}

}  // namespace mtpspec

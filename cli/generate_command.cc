#include "cli/generate_command.h"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/device.h"
#include "tokenizer/tokenizer.h"
#include "spec/adaptive_k.h"
#include "spec/generator.h"
#include "spec/lookup_drafter.h"
#include "spec/model_target.h"
#include "spec/mtp_drafter.h"
#ifdef MTPSPEC_HAVE_CUDA
#include "spec/cuda_mtp_drafter.h"
#include "spec/cuda_target.h"
#endif

namespace mtpspec {

const std::set<std::string>& GenerateOptionNames() {
  static const std::set<std::string> names = {
      "ids",         "prompt",     "max-new",    "draft",      "k",          "accept",          "temperature",
      "top-k",       "top-p",      "min-p",      "seed",       "mtp-hidden", "mtp-chain",       "mtp-index-share",
      "stats-json",  "weights",    "threads",    "ngram",      "relaxed-top-n",   "relaxed-delta",
      "synthetic-rates", "sample-drafts", "capacity", "kv-cache", "device", "prompts-file"};
  return names;
}

namespace {

absl::StatusOr<std::unique_ptr<Drafter>> MakeDrafter(const std::string& kind, const Model& model, int64_t capacity,
                                                     const MtpOptions& mtp, const LookupOptions& lookup) {
  if (kind == "none") return std::unique_ptr<Drafter>();
  if (kind == "lookup") return std::unique_ptr<Drafter>(new LookupDrafter(lookup));
  if (kind == "mtp") {
    ASSIGN_OR_RETURN(auto d, MtpDrafter::Create(model, capacity, mtp));
    return std::unique_ptr<Drafter>(std::move(d));
  }
  if (kind == "hybrid") {
    ASSIGN_OR_RETURN(auto d, MtpDrafter::Create(model, capacity, mtp));
    return std::unique_ptr<Drafter>(new HybridDrafter(std::make_unique<LookupDrafter>(lookup), std::move(d)));
  }
  return absl::InvalidArgumentError(absl::StrCat("--draft must be mtp, lookup, hybrid or none, got \"", kind, "\""));
}

// The target and drafter of one run, on the device chosen at load time. The GPU objects own device
// memory and must outlive the loop.
struct Pipeline {
#ifdef MTPSPEC_HAVE_CUDA
  std::unique_ptr<cuda::CudaModel> gpu_model;
#endif
  std::unique_ptr<Target> target;
  std::unique_ptr<Drafter> drafter;
};

// --device cuda: the model is uploaded to the GPU; there is no CPU fallback, so a build without the
// CUDA backend or a machine without a usable GPU is an error saying which.
absl::StatusOr<Pipeline> MakeCudaPipeline(const Model& model, int64_t capacity, const std::string& draft,
                                          const MtpOptions& mtp, const LookupOptions& lookup, LatentStorage storage,
                                          const GenerateOptions& options) {
#ifdef MTPSPEC_HAVE_CUDA
  if (options.k >= cuda::kMaxGemvRows) {
    return absl::InvalidArgumentError(absl::StrCat("--device cuda supports k <= ", cuda::kMaxGemvRows - 1,
                                                   " (verify blocks of at most ", cuda::kMaxGemvRows,
                                                   " rows keep speculative output bit-identical); got k = ",
                                                   options.k));
  }
  if (draft != "none" && draft != "lookup" && draft != "mtp" && draft != "hybrid") {
    return absl::InvalidArgumentError(absl::StrCat("--draft must be mtp, lookup, hybrid or none, got \"", draft, "\""));
  }
  Pipeline p;
  ASSIGN_OR_RETURN(p.gpu_model, cuda::CudaModel::Create(model));
  CudaTargetOptions target_options;
  target_options.storage = storage;
  ASSIGN_OR_RETURN(auto target, CudaTarget::Create(*p.gpu_model, capacity, target_options));
  if (draft == "lookup") p.drafter = std::make_unique<LookupDrafter>(lookup);
  if (draft == "mtp" || draft == "hybrid") {
    ASSIGN_OR_RETURN(auto mtp_drafter, CreateCudaMtpDrafter(*target, capacity, mtp));
    p.drafter = std::move(mtp_drafter);
    if (draft == "hybrid") {
      p.drafter = std::make_unique<HybridDrafter>(std::make_unique<LookupDrafter>(lookup), std::move(p.drafter));
    }
  }
  p.target = std::move(target);
  return p;
#else
  return absl::FailedPreconditionError(
      "--device cuda: this mtpspec was built without the CUDA backend (configure with nvcc and "
      "-DMTPSPEC_ENABLE_CUDA=ON); use --device cpu");
#endif
}

struct PromptLine {
  int64_t number;  // 1-based line number in the file
  std::string text;
};

// The prompts of a --prompts-file: one prompt text per non-empty line.
absl::StatusOr<std::vector<PromptLine>> ReadPromptLines(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("--prompts-file ", path, ": cannot be opened"));
  std::vector<PromptLine> lines;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back({number, line});
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat("--prompts-file ", path, ": read failed"));
  if (lines.empty()) return absl::InvalidArgumentError(absl::StrCat("--prompts-file ", path, " has no prompt lines"));
  return lines;
}

// One request's output lines (and its JSON, without the statistics' summary).
nlohmann::json PrintResult(const GenerateResult& result, const std::vector<int32_t>& prompt,
                           const Tokenizer* tokenizer) {
  // Generated ids the tokenizer cannot decode (e.g. the padded rows of a model's vocabulary) leave
  // the text out rather than failing the run.
  std::string text;
  if (tokenizer) {
    absl::StatusOr<std::string> decoded = tokenizer->Decode(result.tokens);
    text = decoded.ok() ? *decoded : absl::StrCat("(not decodable: ", decoded.status().message(), ")");
    std::cout << "prompt_tokens: " << absl::StrJoin(prompt, ",") << "\n";
  }
  std::cout << "tokens: " << absl::StrJoin(result.tokens, ",") << "\n";
  if (tokenizer) std::cout << "text: " << text << "\n";
  std::cout << "stop: " << result.stop_reason << "\n";
  nlohmann::json j = result.stats.ToJson();
  j["tokens"] = result.tokens;
  j["stop_reason"] = result.stop_reason;
  if (tokenizer) j["text"] = text;
  return j;
}

}  // namespace

absl::Status RunGenerate(const CliArgs& args) {
  if (args.positional().size() != 1) return absl::InvalidArgumentError("generate takes one model directory");
  if (static_cast<int>(args.Has("ids")) + static_cast<int>(args.Has("prompt")) +
          static_cast<int>(args.Has("prompts-file")) != 1) {
    return absl::InvalidArgumentError("generate needs exactly one of --ids, --prompt and --prompts-file");
  }
  GenerateOptions options;
  ASSIGN_OR_RETURN(options.max_new_tokens, args.GetInt("max-new", 32));
  const std::string k_text = args.Get("k", "3");
  if (k_text == "auto") {
    options.adaptive_k = true;
    options.k = kMaxDraftTokens / 2;
  } else {
    ASSIGN_OR_RETURN(options.k, args.GetInt("k", 3));
  }
  ASSIGN_OR_RETURN(options.accept.rule, ParseAcceptRule(args.Get("accept", "sampler-equality")));
  SamplingParams& s = options.accept.sampling;
  ASSIGN_OR_RETURN(s.temperature, args.GetDouble("temperature", 0.0));
  ASSIGN_OR_RETURN(s.top_k, args.GetInt("top-k", 0));
  ASSIGN_OR_RETURN(s.top_p, args.GetDouble("top-p", 1.0));
  ASSIGN_OR_RETURN(s.min_p, args.GetDouble("min-p", 0.0));
  ASSIGN_OR_RETURN(s.seed, args.GetUint64("seed", 0));
  ASSIGN_OR_RETURN(options.accept.relaxed_top_n, args.GetInt("relaxed-top-n", 3));
  ASSIGN_OR_RETURN(options.accept.relaxed_delta, args.GetDouble("relaxed-delta", 0.1));
  if (args.Has("synthetic-rates")) {
    for (absl::string_view piece : absl::StrSplit(args.Get("synthetic-rates"), ',')) {
      double v;
      if (!absl::SimpleAtod(piece, &v)) {
        return absl::InvalidArgumentError("--synthetic-rates must be comma-separated numbers");
      }
      options.accept.synthetic_rates.push_back(v);
    }
  }
  options.sample_drafts = args.Get("sample-drafts", "false") == "true";
  RETURN_IF_ERROR(ValidateGenerateOptions(options));
  // Where the model runs, chosen before anything is loaded (default cpu).
  ASSIGN_OR_RETURN(const Device device, ParseDevice(args.Get("device", "cpu"), "--device"));
  if (device == Device::kCuda && !BuiltWithCuda()) {
    return absl::FailedPreconditionError(
        "--device cuda: this mtpspec was built without the CUDA backend (configure with nvcc and "
        "-DMTPSPEC_ENABLE_CUDA=ON); use --device cpu");
  }
#ifdef MTPSPEC_HAVE_CUDA
  if (device == Device::kCuda) {
    const absl::Status gpu = cuda::DeviceStatus();
    if (!gpu.ok()) return absl::Status(gpu.code(), absl::StrCat("--device cuda: ", gpu.message()));
  }
#endif

  MtpOptions mtp;
  ASSIGN_OR_RETURN(mtp.hidden, ParseMtpHidden(args.Get("mtp-hidden", "post")));
  ASSIGN_OR_RETURN(mtp.chain, ParseMtpChain(args.Get("mtp-chain", "normed")));
  const std::string share = args.Get("mtp-index-share", "exact");
  if (share != "exact" && share != "shared") {
    return absl::InvalidArgumentError(absl::StrCat("--mtp-index-share must be exact or shared, got \"", share, "\""));
  }
  mtp.index_share = share == "shared" ? MtpIndexShare::kShared : MtpIndexShare::kExact;
  LookupOptions lookup;
  ASSIGN_OR_RETURN(lookup.max_ngram, args.GetInt("ngram", 3));
  if (lookup.max_ngram < 1) return absl::InvalidArgumentError("--ngram must be >= 1");

  // --prompt TEXT and --prompts-file (a prompt text per line) are encoded with DIR/tokenizer.json,
  // which also decodes the generated tokens.
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<std::vector<int64_t>> requests64;  // [requests][prompt tokens]
  std::vector<std::string> names;                // [requests] "--prompt", "--prompts-file line N" or "--ids"
  if (args.Has("prompt") || args.Has("prompts-file")) {
    std::vector<PromptLine> lines;
    if (args.Has("prompts-file")) {
      ASSIGN_OR_RETURN(lines, ReadPromptLines(args.Get("prompts-file")));
    } else {
      lines.push_back({0, args.Get("prompt")});
    }
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
  LoadOptions load;
  const std::string w = args.Get("weights", "stored");
  load.weight_dtype = w == "f32" ? WeightDType::kF32 : w == "bf16" ? WeightDType::kBF16 : WeightDType::kAsStored;
  ASSIGN_OR_RETURN(auto model, Model::Load(args.positional()[0], load));
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
  const int64_t wanted = longest + options.max_new_tokens + kMaxDraftTokens + 1;
  ASSIGN_OR_RETURN(int64_t capacity,
                   args.GetInt("capacity", std::min(wanted, model->config().max_position_embeddings)));
  ASSIGN_OR_RETURN(const LatentStorage storage, ParseLatentStorage(args.Get("kv-cache", "f32"), "--kv-cache"));
  Pipeline pipeline;
  if (device == Device::kCuda) {
    ASSIGN_OR_RETURN(pipeline, MakeCudaPipeline(*model, capacity, args.Get("draft", "mtp"), mtp, lookup, storage,
                                                options));
  } else {
    ASSIGN_OR_RETURN(pipeline.target, ModelTarget::Create(*model, capacity, {}, storage));
    ASSIGN_OR_RETURN(pipeline.drafter, MakeDrafter(args.Get("draft", "mtp"), *model, capacity, mtp, lookup));
  }
  // A series of requests (--prompts-file) shares the loaded model, the caches and, with --k auto,
  // one adaptive-k controller, so later requests start from what earlier ones measured.
  if (options.adaptive_k && prompts.size() > 1) {
    options.adaptive_controller = std::make_shared<AdaptiveK>(std::max<int64_t>(options.k, 1));
  }
  nlohmann::json j;
  if (prompts.size() == 1) {
    ASSIGN_OR_RETURN(GenerateResult result,
                     Generate(*pipeline.target, pipeline.drafter.get(), prompts[0], options));
    j = PrintResult(result, prompts[0], tokenizer.get());
    std::cout << result.stats.Summary();
  } else {
    SpecStats total;
    j["requests"] = nlohmann::json::array();
    for (size_t r = 0; r < prompts.size(); ++r) {
      absl::StatusOr<GenerateResult> result = Generate(*pipeline.target, pipeline.drafter.get(), prompts[r], options);
      if (!result.ok()) {
        return absl::Status(result.status().code(), absl::StrCat(names[r], ": ", result.status().message()));
      }
      std::cout << "== request " << r + 1 << " of " << prompts.size() << "\n";
      j["requests"].push_back(PrintResult(*result, prompts[r], tokenizer.get()));
      total.Merge(result->stats);
    }
    std::cout << "== all " << prompts.size() << " requests\n" << total.Summary();
    j["aggregate"] = total.ToJson();
  }
  if (args.Has("stats-json")) {
    std::ofstream out(args.Get("stats-json"));
    out << j.dump(2) << "\n";
    if (!out) return absl::InternalError(absl::StrCat(args.Get("stats-json"), ": write failed"));
  }
  return absl::OkStatus();
}

}  // namespace mtpspec

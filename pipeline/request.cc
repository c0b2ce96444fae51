#include "pipeline/request.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "pipeline/options.h"
#include "pipeline/model_target.h"
#include "pipeline/mtp_drafter.h"
#ifdef MTPSPEC_HAVE_CUDA
#include "pipeline/cuda_mtp_drafter.h"
#include "pipeline/cuda_target.h"
#endif

namespace mtpspec {
namespace {

absl::Status Invalid(Frontend f, const std::string& option, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(OptionName(f, option), " ", what));
}

// The rules of tree drafting, in the front end's words.
absl::Status ValidateTree(const RequestOptions& o, Frontend f) {
  const std::string tree = OptionName(f, o.tree.dynamic() ? "tree_nodes" : "tree");
  RETURN_IF_ERROR(ValidateTreeShape(o.tree, tree));
  const bool cli = f == Frontend::kCli;
  if (o.draft != DraftKind::kMtp) {
    return absl::InvalidArgumentError(absl::StrCat(tree, " needs ", cli ? "--draft mtp" : "draft=\"mtp\"", ": the ",
                                                   DraftKindName(o.draft), " drafter cannot branch"));
  }
  if (o.device != Device::kCpu) {
    return absl::InvalidArgumentError(absl::StrCat(tree, ": tree verify runs on the CPU only (", OptionName(f, "device"),
                                                   " cuda cannot verify a tree yet)"));
  }
  if (o.custom_accept || !IsLossless(o.accept.rule)) {
    return absl::InvalidArgumentError(absl::StrCat(tree, " verifies with sampler-equality or rejection; ",
                                                   OptionName(f, "accept"), " ",
                                                   o.custom_accept ? "(a custom rule)" : AcceptRuleName(o.accept.rule),
                                                   " does not support trees"));
  }
  if (o.sample_drafts && o.tree.dynamic()) {
    return absl::InvalidArgumentError(absl::StrCat(tree, " grows by the head's probabilities and takes argmax drafts; ",
                                                   OptionName(f, "sample_drafts"), " needs a static ",
                                                   OptionName(f, "tree")));
  }
  if (o.adaptive_k) {
    return absl::InvalidArgumentError(absl::StrCat(tree, " has a fixed shape; ", OptionName(f, "k"), " auto cannot choose it"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* DraftKindName(DraftKind kind) {
  switch (kind) {
    case DraftKind::kNone: return "none";
    case DraftKind::kMtp: return "mtp";
    case DraftKind::kLookup: return "lookup";
    case DraftKind::kHybrid: return "hybrid";
  }
  return "?";
}

std::string OptionName(Frontend frontend, const std::string& python_name) {
  if (frontend == Frontend::kPython) return python_name;
  if (const RequestOption* option = FindRequestOption(python_name)) return option->flag;
  if (python_name == "dtype") return "--weights";
  if (python_name == "cache_capacity") return "--capacity";
  return absl::StrCat("--", absl::StrReplaceAll(python_name, {{"_", "-"}}));
}

absl::StatusOr<DraftKind> ParseDraftKind(const std::string& text, Frontend frontend) {
  for (DraftKind kind : {DraftKind::kMtp, DraftKind::kLookup, DraftKind::kHybrid, DraftKind::kNone}) {
    if (text == DraftKindName(kind)) return kind;
  }
  return Invalid(frontend, "draft", absl::StrCat("must be mtp, lookup, hybrid or none, got \"", text, "\""));
}

absl::Status ParseK(const std::string& text, Frontend frontend, RequestOptions& options) {
  if (text == "auto") {
    options.adaptive_k = true;
    options.k = kDefaultAdaptiveKMax;
    return absl::OkStatus();
  }
  int64_t k = 0;
  if (!absl::SimpleAtoi(text, &k)) {
    return Invalid(frontend, "k", absl::StrCat("must be an integer or auto, got \"", text, "\""));
  }
  options.adaptive_k = false;
  options.k = k;
  return absl::OkStatus();
}

absl::StatusOr<bool> ParseBool(const std::string& text, const std::string& option_name) {
  if (text == "true") return true;
  if (text == "false") return false;
  return absl::InvalidArgumentError(absl::StrCat(option_name, " must be true or false, got \"", text, "\""));
}

absl::StatusOr<WeightDType> ParseWeightDType(const std::string& text, Frontend frontend) {
  if (text == "stored") return WeightDType::kAsStored;
  if (text == "f32") return WeightDType::kF32;
  if (text == "bf16") return WeightDType::kBF16;
  if (text == "fp8") return WeightDType::kFP8;
  return Invalid(frontend, "dtype", absl::StrCat("must be stored, f32, bf16 or fp8, got \"", text, "\""));
}

absl::Status ValidateRequest(const RequestOptions& o, Frontend f) {
  const int64_t k_min = o.adaptive_k ? 1 : 0;
  if (o.k < k_min || o.k > kMaxDraftTokens) {
    return Invalid(f, "k", absl::StrCat("must be in [", k_min, ", ", kMaxDraftTokens, "]", o.adaptive_k ? " with adaptive k" : "",
                                        " (a verify of k + 1 <= ", kMaxVerifyRows,
                                        " rows keeps speculative output identical to plain decoding), got ", o.k));
  }
  if (o.max_new_tokens < 0) return Invalid(f, "max_new_tokens", absl::StrCat("must be >= 0, got ", o.max_new_tokens));
  const SamplingParams& s = o.accept.sampling;
  if (!(s.temperature >= 0.0) || !std::isfinite(s.temperature)) {
    return Invalid(f, "temperature", absl::StrCat("must be a finite number >= 0, got ", s.temperature));
  }
  if (s.top_k < 0) return Invalid(f, "top_k", absl::StrCat("must be >= 0, got ", s.top_k));
  if (!(s.top_p > 0.0 && s.top_p <= 1.0)) return Invalid(f, "top_p", absl::StrCat("must be in (0, 1], got ", s.top_p));
  if (!(s.min_p >= 0.0 && s.min_p <= 1.0)) return Invalid(f, "min_p", absl::StrCat("must be in [0, 1], got ", s.min_p));
  if (o.accept.relaxed_top_n < 1) {
    return Invalid(f, "relaxed_top_n", absl::StrCat("must be >= 1, got ", o.accept.relaxed_top_n));
  }
  if (!(o.accept.relaxed_delta >= 0.0) || !std::isfinite(o.accept.relaxed_delta)) {
    return Invalid(f, "relaxed_delta", absl::StrCat("must be a finite number >= 0, got ", o.accept.relaxed_delta));
  }
  const std::vector<double>& rates = o.accept.synthetic_rates;
  if (o.accept.rule == AcceptRule::kSynthetic) {
    if (rates.empty()) {
      return Invalid(f, "synthetic_rates", absl::StrCat("is needed with ", OptionName(f, "accept"), " synthetic: one ",
                                                        "acceptance probability per draft position (", o.k, ")"));
    }
    if (static_cast<int64_t>(rates.size()) != o.k) {
      return Invalid(f, "synthetic_rates", absl::StrCat("has ", rates.size(), " rates for k = ", o.k,
                                                        ": give one per draft position"));
    }
  }
  for (size_t i = 0; i < rates.size(); ++i) {
    if (!(rates[i] >= 0.0 && rates[i] <= 1.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(OptionName(f, "synthetic_rates"), "[", i, "] = ", rates[i], " is outside [0, 1]"));
    }
  }
  if (o.lookup.max_ngram < 1) return Invalid(f, "ngram", absl::StrCat("must be >= 1, got ", o.lookup.max_ngram));
  if (o.mtp.extend_chunk < 1) {
    return absl::InvalidArgumentError(absl::StrCat("MTP extend_chunk must be >= 1, got ", o.mtp.extend_chunk));
  }
  if (!o.tree.empty()) RETURN_IF_ERROR(ValidateTree(o, f));
  return absl::OkStatus();
}

std::vector<std::string> RequestWarnings(const RequestOptions& o, Frontend f) {
  std::vector<std::string> warnings;
  if (o.sample_drafts && o.accept.rule == AcceptRule::kSamplerEquality && !o.custom_accept) {
    warnings.push_back(absl::StrCat(OptionName(f, "sample_drafts"), " with ", OptionName(f, "accept"),
                                    " sampler-equality draws the drafts from q, which the rule accepts less often than "
                                    "argmax drafts; use rejection to gain from sampled drafts"));
  }
  if (o.device_weights != DeviceWeightFormat::kBf16 && o.device == Device::kCpu) {
    warnings.push_back(absl::StrCat(OptionName(f, "device_weights"), " ", DeviceWeightFormatName(o.device_weights),
                                    " is unused unless ", OptionName(f, "device"),
                                    " is cuda (the CPU always uses FP8 matrices as stored)"));
  }
  if (!o.accept.synthetic_rates.empty() && o.accept.rule != AcceptRule::kSynthetic) {
    warnings.push_back(absl::StrCat(OptionName(f, "synthetic_rates"), " is unused unless ", OptionName(f, "accept"),
                                    " is synthetic"));
  }
  return warnings;
}

GenerateOptions ToGenerateOptions(const RequestOptions& o) {
  GenerateOptions g;
  g.max_new_tokens = o.max_new_tokens;
  g.k = o.k;
  g.adaptive_k = o.adaptive_k;
  g.accept = o.accept;
  g.sample_drafts = o.sample_drafts;
  g.stop_at_eos = o.stop_at_eos;
  g.eos_token_ids = o.eos_token_ids;
  g.stop_token_ids = o.stop_token_ids;
  g.logprobs = o.logprobs;
  g.tree = o.tree;
  return g;
}

int64_t RequiredCapacity(const Model& model, int64_t prompt_tokens, const RequestOptions& options) {
  const int64_t limit = model.config().max_position_embeddings;
  const int64_t extra = kMaxDraftTokens + 1;  // one verify block past the last new token
  if (prompt_tokens >= limit || options.max_new_tokens >= limit - prompt_tokens) return limit;
  return std::min(limit, prompt_tokens + options.max_new_tokens + extra);
}

absl::Status ResolveSyntheticRates(RequestOptions& o, Frontend f) {
  const bool conditional = !o.accept.synthetic_rates.empty();
  const bool unconditional = !o.synthetic_rates_unconditional.empty();
  const bool length = o.synthetic_acceptance_length.has_value();
  if (conditional + unconditional + length > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "give the synthetic rates in one form: ", OptionName(f, "synthetic_rates"), " (conditional), ",
        OptionName(f, "synthetic_rates_unconditional"), " or ", OptionName(f, "synthetic_acceptance_length")));
  }
  if (unconditional) {
    ASSIGN_OR_RETURN(o.accept.synthetic_rates, SyntheticRatesFromUnconditional(o.synthetic_rates_unconditional,
                                                                               OptionName(f, "synthetic_rates_unconditional")));
    o.synthetic_rates_unconditional.clear();
  }
  if (length) {
    if (o.adaptive_k || !o.tree.empty()) {
      return Invalid(f, "synthetic_acceptance_length", absl::StrCat("needs a fixed ", OptionName(f, "k"),
                                                                   " (its schedule depends on the number of drafts)"));
    }
    ASSIGN_OR_RETURN(o.accept.synthetic_rates,
                     SyntheticRatesForAcceptanceLength(*o.synthetic_acceptance_length, o.k,
                                                       OptionName(f, "synthetic_acceptance_length")));
    o.synthetic_acceptance_length.reset();
  }
  return absl::OkStatus();
}

absl::StatusOr<Pipeline> BuildPipeline(const Model& model, const RequestOptions& options, int64_t capacity,
                                       Frontend frontend) {
  RETURN_IF_ERROR(ValidateRequest(options, frontend));
  const ModelConfig& config = model.config();
  if (!config.has_indexer && options.mtp.index_share == MtpIndexShare::kShared && options.draft != DraftKind::kNone &&
      options.draft != DraftKind::kLookup) {
    return Invalid(frontend, "mtp_index_share", absl::StrCat("shared: ", config.model_type_name,
                                                             " has no DSA indexer, so there is no selection to share"));
  }
  Pipeline p;
  if (options.device == Device::kCpu) {
    ASSIGN_OR_RETURN(p.target, ModelTarget::Create(model, capacity, {}, options.kv_cache));
  } else {
#ifdef MTPSPEC_HAVE_CUDA
    const absl::Status gpu = cuda::DeviceStatus();
    if (!gpu.ok()) return absl::Status(gpu.code(), absl::StrCat(OptionName(frontend, "device"), " cuda: ", gpu.message()));
    cuda::CudaModelOptions model_options;
    model_options.weights = options.device_weights;
    ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaModel> uploaded, cuda::CudaModel::Create(model, model_options));
    std::shared_ptr<cuda::CudaModel> gpu_model(std::move(uploaded));
    p.device_model = gpu_model;
    CudaTargetOptions target_options;
    target_options.storage = options.kv_cache;
    ASSIGN_OR_RETURN(p.target, CudaTarget::Create(*gpu_model, capacity, target_options));
#else
    return absl::FailedPreconditionError(absl::StrCat(
        OptionName(frontend, "device"), " cuda: this mtpspec was built without the CUDA backend (configure with nvcc ",
        "and -DMTPSPEC_ENABLE_CUDA=ON); use the CPU"));
#endif
  }
  if (options.draft == DraftKind::kNone) return p;
  if (options.draft == DraftKind::kLookup) {
    p.drafter = std::make_unique<LookupDrafter>(options.lookup);
    return p;
  }
  absl::StatusOr<std::unique_ptr<MtpDrafter>> mtp = absl::InternalError("no MTP drafter");
  if (options.device == Device::kCpu) {
    mtp = MtpDrafter::Create(model, capacity, options.mtp);
  } else {
#ifdef MTPSPEC_HAVE_CUDA
    mtp = CreateCudaMtpDrafter(static_cast<CudaTarget&>(*p.target), capacity, options.mtp);
#endif
  }
  if (!mtp.ok()) {
    if (mtp.status().code() != absl::StatusCode::kFailedPrecondition) return mtp.status();
    const bool cli = frontend == Frontend::kCli;
    return absl::Status(mtp.status().code(),
                        absl::StrCat(mtp.status().message(), cli ? "; use --draft lookup or --draft none"
                                                                 : "; use draft=\"lookup\" or draft=\"none\""));
  }
  if (options.draft == DraftKind::kMtp) {
    p.drafter = *std::move(mtp);
  } else {
    p.drafter = std::make_unique<HybridDrafter>(std::make_unique<LookupDrafter>(options.lookup), *std::move(mtp));
  }
  return p;
}

}  // namespace mtpspec

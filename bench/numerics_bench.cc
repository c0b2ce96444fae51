// numerics_bench: what a cache or precision variant costs in accuracy against the f32 reference, and
// what it saves in memory: the latent cache in int8 (the default) or fp8, the indexer keys in bf16 or
// fp8, the FP8 matrices' input rows in bf16 or fp8 (--variant).
//
// For S windows of held-out text (alternating corpora), with the MLA latent stored as f32 (the
// reference) and as int8 (one symmetric scale per token; rope and indexer keys stay f32) or, with
// --variant fp8-latent, as DeepSeek-V3.2 is served (LatentStorage::kFp8, attended in bf16):
//   * teacher-forced decoding: the first N tokens in one prefill call, then the next E true tokens
//     one call each; every decode step's logits are compared with the f32 run's: KL(p_f32 ‖ p_int8),
//     the largest logit error, greedy (argmax) agreement, and the held-out loss of the true next
//     token under each;
//   * free-running greedy decoding of G tokens from the N-token prompt with each cache: where the
//     two outputs first differ and the share of equal positions;
//   * MTP drafting with k drafts (sampler-equality, T = 0): the mean acceptance length with each
//     target cache (the MTP layer's own cache stays f32).
// Memory: bytes per token as f32, bf16, int8 and fp8, for the model and for any --memory-configs, and
// what --memory-context tokens take. Writes JSON and prints a Markdown summary.
//
// --variant bf16-index-keys (or fp8-index-keys) compares the indexer keys in bf16 (or fp8;
// LoadOptions::index_keys; the latent stays f32) with f32 the same way, and adds how many of each
// decode step's top-k keys the two selections share, per full layer. --variant bf16-activations (or
// fp8-activations) loads the model with every matrix in FP8 (as stored, or quantised at load) and
// compares its matrices' input rows in bf16 (or fp8; LoadOptions::activations) with f32 rows.
//
//   build/release/bench/numerics_bench [--model DIR] [--heldout DIR | --random-tokens N] ...
//   build/release/bench/numerics_bench --help
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/logit_compare.h"
#include "bench/run_info.h"
#include "bench/token_source.h"
#include "core/parallel.h"
#include "spec/generator.h"
#include "pipeline/model_target.h"
#include "pipeline/mtp_drafter.h"
#include "core/cli_args.h"

namespace mtpspec::bench {
namespace {

constexpr char kUsage[] = R"(numerics_bench: accuracy cost and memory saving of a cache or precision variant against f32.

  --model DIR            checkpoint (default models/glm-tiny-mtp)
  --heldout DIR          prose.npy and code.npy from research/train/make_heldout.py (default build/heldout)
  --random-tokens N      N seeded random ids instead of text (models without held-out text)
  --windows S            windows, alternating corpora (default 8)
  --context N            prompt tokens per window (default 512)
  --eval-tokens E        teacher-forced decode steps per window (default 256)
  --new-tokens G         tokens generated per window, greedy and with MTP (default 128)
  --k K                  MTP drafts per cycle (default 2; skipped when the model has no MTP layer)
  --memory-configs LIST  config.json files to report memory for (besides the model's)
  --memory-context T     context for the memory table (default 131072)
  --variant V            int8-latent (default), fp8-latent, bf16-index-keys, fp8-index-keys,
                         bf16-activations or fp8-activations: what is compared with f32
  --seed S   --threads N   --json PATH (default build/results/kv_int8.json)
)";

struct Settings {
  std::string model_dir;
  int64_t windows = 8, context = 512, eval_tokens = 256, new_tokens = 128, k = 2, memory_context = 131072;
  uint64_t seed = 1;
  std::vector<std::string> memory_configs;
  std::string json_path;
  // --variant int8-latent / fp8-latent: the latent storage compared
  LatentStorage latent = LatentStorage::kInt8;
  // --variant bf16-index-keys / fp8-index-keys: the indexer keys compared (kF32: the latent is)
  IndexKeyStorage index_keys = IndexKeyStorage::kF32;
  // --variant bf16-activations / fp8-activations: the FP8 matrices' input rows compared
  ActivationPrecision activations = ActivationPrecision::kF32;
};

// One side of the comparison: a model (loaded with its indexer-key storage) and its latent storage.
struct Side {
  const Model* model = nullptr;
  LatentStorage storage = LatentStorage::kF32;
  std::string name;  // "f32", "int8", "fp8", "bf16_index_keys", "fp8_index_keys", "bf16_activations", ...
};

absl::StatusOr<Settings> ParseSettings(const CliArgs& args) {
  Settings s;
  s.model_dir = args.Get("model", "models/glm-tiny-mtp");
  ASSIGN_OR_RETURN(s.windows, args.GetInt("windows", 8));
  ASSIGN_OR_RETURN(s.context, args.GetInt("context", 512));
  ASSIGN_OR_RETURN(s.eval_tokens, args.GetInt("eval-tokens", 256));
  ASSIGN_OR_RETURN(s.new_tokens, args.GetInt("new-tokens", 128));
  ASSIGN_OR_RETURN(s.k, args.GetInt("k", 2));
  ASSIGN_OR_RETURN(s.memory_context, args.GetInt("memory-context", 131072));
  ASSIGN_OR_RETURN(s.seed, args.GetUint64("seed", 1));
  s.memory_configs = SplitList(args.Get("memory-configs", ""));
  s.json_path = args.Get("json", "build/results/kv_int8.json");
  const std::string variant = args.Get("variant", "int8-latent");
  if (variant == "fp8-latent") {
    s.latent = LatentStorage::kFp8;
  } else if (variant == "bf16-index-keys") {
    s.index_keys = IndexKeyStorage::kBf16;
  } else if (variant == "fp8-index-keys") {
    s.index_keys = IndexKeyStorage::kFp8;
  } else if (variant == "bf16-activations") {
    s.activations = ActivationPrecision::kBf16;
  } else if (variant == "fp8-activations") {
    s.activations = ActivationPrecision::kFp8;
  } else if (variant != "int8-latent") {
    return absl::InvalidArgumentError(absl::StrCat("--variant must be int8-latent, fp8-latent, bf16-index-keys, fp8-index-keys, "
                                                   "bf16-activations or fp8-activations, got \"", variant, "\""));
  }
  if (s.windows < 1) return absl::InvalidArgumentError(absl::StrCat("--windows must be >= 1, got ", s.windows));
  if (s.context < 1) return absl::InvalidArgumentError(absl::StrCat("--context must be >= 1, got ", s.context));
  if (s.eval_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--eval-tokens must be >= 1, got ", s.eval_tokens));
  }
  if (s.new_tokens < 1) return absl::InvalidArgumentError(absl::StrCat("--new-tokens must be >= 1, got ", s.new_tokens));
  if (s.k < 1 || s.k > kMaxDraftTokens) {
    return absl::InvalidArgumentError(absl::StrCat("--k must be in [1, ", kMaxDraftTokens, "], got ", s.k));
  }
  if (s.memory_context < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--memory-context must be >= 1, got ", s.memory_context));
  }
  return s;
}

absl::StatusOr<std::vector<TokenCorpus>> LoadCorpora(const CliArgs& args, int64_t vocab, uint64_t seed) {
  if (args.Has("random-tokens")) {
    ASSIGN_OR_RETURN(int64_t n, args.GetInt("random-tokens", 0));
    if (n < 2) return absl::InvalidArgumentError(absl::StrCat("--random-tokens must be >= 2, got ", n));
    return std::vector<TokenCorpus>{RandomTokenCorpus(n, vocab, seed)};
  }
  return LoadHeldoutCorpora(args.Get("heldout", "build/heldout"), vocab, "--random-tokens N");
}

// E teacher-forced decode steps after a one-call prefill of window[0, N): their logits, and each
// step's top-k selection in every full layer.
struct TeacherForced {
  std::vector<float> logits;                   // [E, V]
  std::vector<std::vector<TopK>> selections;  // [E][layers]
};
absl::StatusOr<TeacherForced> TeacherForcedLogits(const Side& side, const std::vector<int32_t>& window, int64_t n,
                                                  int64_t steps) {
  const Model& model = *side.model;
  ASSIGN_OR_RETURN(auto cache, model.NewCache(n + steps, side.storage));
  std::vector<int64_t> positions(n);  // [N]
  for (int64_t i = 0; i < n; ++i) positions[i] = i;
  ForwardOptions prefill;
  prefill.logit_rows = {n - 1};
  RETURN_IF_ERROR(model.Forward(*cache, std::span<const int32_t>(window).first(n), positions, prefill).status());
  const int64_t V = model.config().vocab_size;
  TeacherForced result;
  result.logits.resize(static_cast<size_t>(steps * V));
  ForwardOptions step_options;
  step_options.capture_topk = true;
  for (int64_t t = 0; t < steps; ++t) {
    const int64_t position = n + t;
    ASSIGN_OR_RETURN(ForwardOutput out, model.Forward(*cache, std::span<const int32_t>(window).subspan(position, 1),
                                                      std::span<const int64_t>(&position, 1), step_options));
    std::copy(out.logits.data<float>(), out.logits.data<float>() + V, result.logits.begin() + t * V);
    result.selections.push_back(std::move(out.topk));
  }
  return result;
}

// Keys two selections of one row share, and the selection's width (0 when either selection is empty
// or takes every key, so that nothing was chosen).
std::pair<int64_t, int64_t> SharedKeys(const TopK& a, const TopK& b, int64_t num_keys) {
  if (a.width == 0 || a.width != b.width || a.width >= num_keys) return {0, 0};
  std::vector<int32_t> x(a.selected.begin(), a.selected.begin() + a.width);
  std::vector<int32_t> y(b.selected.begin(), b.selected.begin() + b.width);
  std::sort(x.begin(), x.end());
  std::sort(y.begin(), y.end());
  std::vector<int32_t> both;
  std::set_intersection(x.begin(), x.end(), y.begin(), y.end(), std::back_inserter(both));
  return {static_cast<int64_t>(both.size()), a.width};
}

nlohmann::json SummaryJson(const ComparisonSummary& s, const std::string& test_name) {
  return {{"rows", s.rows},
          {"mean_kl_nats", s.mean_kl},
          {"p99_kl_nats", s.p99_kl},
          {"max_kl_nats", s.max_kl},
          {"max_abs_logit_error", s.max_abs_error},
          {"max_relative_logit_error", s.max_relative_error},
          {"argmax_agreement", s.argmax_agreement},
          {"mean_nll_f32", s.mean_nll_ref},
          {"mean_nll_" + test_name, s.mean_nll_test}};
}

nlohmann::json MemoryJson(const ModelConfig& config, const std::string& source, int64_t context) {
  const KvCacheShape f32 = CacheShapeFor(config, LatentStorage::kF32);
  const KvCacheShape int8 = CacheShapeFor(config, LatentStorage::kInt8);
  const KvCacheShape fp8 = CacheShapeFor(config, LatentStorage::kFp8);
  const KvCacheShape served = CacheShapeFor(config, LatentStorage::kFp8, IndexKeyStorage::kFp8);
  const int64_t b32 = CacheBytesPerToken(f32), b16 = CacheBf16BytesPerToken(f32), b8 = CacheBytesPerToken(int8);
  const int64_t bf8 = CacheBytesPerToken(fp8), b_served = CacheBytesPerToken(served);
  const double gib = static_cast<double>(context) / (1024.0 * 1024.0 * 1024.0);
  return {{"source", source},
          {"model_type", config.model_type},
          {"layers", config.num_hidden_layers},
          {"kv_lora_rank", config.kv_lora_rank},
          {"rope_dim", config.qk_rope_head_dim},
          {"index_head_dim", config.index_head_dim},
          {"bytes_per_token",
           {{"f32", b32}, {"bf16", b16}, {"int8", b8}, {"fp8", bf8}, {"fp8_with_fp8_index_keys", b_served}}},
          {"context", context},
          {"gib_at_context", {{"f32", b32 * gib}, {"bf16", b16 * gib}, {"int8", b8 * gib}, {"fp8", bf8 * gib}}}};
}

absl::Status Run(int argc, char** argv) {
  ASSIGN_OR_RETURN(CliArgs args, CliArgs::Parse(argc, argv, 1,
                                                {"model", "heldout", "random-tokens", "windows", "context",
                                                 "eval-tokens", "new-tokens", "k", "memory-configs", "memory-context",
                                                 "seed", "threads", "json", "variant"},
                                                {"help"}));
  if (args.Has("help")) {
    std::cout << kUsage;
    return absl::OkStatus();
  }
  if (!args.positional().empty()) return absl::InvalidArgumentError("numerics_bench takes no positional arguments");
  RETURN_IF_ERROR(ApplyThreadsOption(args));
  ASSIGN_OR_RETURN(Settings s, ParseSettings(args));
  const nlohmann::json run_info = RunInfo(argc, argv);
  const bool activations = s.activations != ActivationPrecision::kF32;
  LoadOptions base_load;
  if (activations) base_load.weight_dtype = WeightDType::kFP8;
  ASSIGN_OR_RETURN(auto model, Model::Load(s.model_dir, base_load));
  const ModelConfig& config = model->config();
  const int64_t n = s.context;
  // The window holds the prompt, the teacher-forced tokens and the next token of the last one; the
  // generation needs the prompt, G tokens and the last verify block.
  const int64_t window_length = n + s.eval_tokens + 1;
  const int64_t capacity = n + s.new_tokens + s.k + 2;
  if (std::max(window_length, capacity) > config.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("--context ", n, " with --eval-tokens ", s.eval_tokens,
                                                   " and --new-tokens ", s.new_tokens, " needs ",
                                                   std::max(window_length, capacity), " positions, beyond ",
                                                   "max_position_embeddings = ", config.max_position_embeddings,
                                                   " in ", s.model_dir, "/config.json"));
  }
  ASSIGN_OR_RETURN(std::vector<TokenCorpus> corpora, LoadCorpora(args, config.vocab_size, s.seed));
  for (const TokenCorpus& c : corpora) {
    if (static_cast<int64_t>(c.ids.size()) <= window_length) {
      return absl::InvalidArgumentError(absl::StrCat("corpus ", c.name, " (", c.path, ") has ", c.ids.size(),
                                                     " tokens, fewer than a window of ", window_length + 1));
    }
  }
  const bool mtp = model->has_mtp();
  std::unique_ptr<Model> keys_model;
  Side sides[2] = {{model.get(), LatentStorage::kF32, "f32"}, {model.get(), s.latent, LatentStorageName(s.latent)}};
  RETURN_IF_ERROR(CheckLatentStorage(s.latent, config.kv_lora_rank, config.qk_rope_head_dim));
  const bool index_keys = s.index_keys != IndexKeyStorage::kF32;
  if (index_keys || activations) {
    LoadOptions load = base_load;
    load.index_keys = s.index_keys;
    load.activations = s.activations;
    ASSIGN_OR_RETURN(keys_model, Model::Load(s.model_dir, load));
    sides[1] = {keys_model.get(), LatentStorage::kF32,
                index_keys ? absl::StrCat(IndexKeyStorageName(s.index_keys), "_index_keys")
                           : absl::StrCat(ActivationPrecisionName(s.activations), "_activations")};
  }
  std::unique_ptr<ModelTarget> targets[2];
  for (int i = 0; i < 2; ++i) {
    ASSIGN_OR_RETURN(targets[i], ModelTarget::Create(*sides[i].model, capacity, {}, sides[i].storage));
  }
  std::unique_ptr<MtpDrafter> drafters[2];  // each side's own (its MTP layer's indexer keys as that side keeps them)
  if (mtp) {
    for (int i = 0; i < 2; ++i) {
      ASSIGN_OR_RETURN(drafters[i], MtpDrafter::Create(*sides[i].model, capacity, MtpOptions{}));
    }
  }
  std::vector<int64_t> shared_keys(config.num_hidden_layers, 0), selected_keys(config.num_hidden_layers, 0);

  const int64_t V = config.vocab_size;
  std::vector<RowComparison> rows;  // every teacher-forced step of every window
  nlohmann::json windows = nlohmann::json::array();
  double greedy_first_sum = 0, greedy_equal_sum = 0;
  double mtp_len_drafts[2] = {0, 0}, mtp_drafts[2] = {0, 0};
  std::mt19937_64 rng(s.seed);
  const double start = NowSeconds();
  for (int64_t w = 0; w < s.windows; ++w) {
    const TokenCorpus& corpus = corpora[w % corpora.size()];
    ASSIGN_OR_RETURN(std::vector<int32_t> window, SampleWindow(corpus, window_length, rng));
    TeacherForced forced[2];
    for (int i = 0; i < 2; ++i) {
      ASSIGN_OR_RETURN(forced[i], TeacherForcedLogits(sides[i], window, n, s.eval_tokens));
    }
    std::vector<RowComparison> window_rows;
    for (int64_t t = 0; t < s.eval_tokens; ++t) {
      window_rows.push_back(CompareLogitRows(forced[0].logits.data() + t * V, forced[1].logits.data() + t * V, V,
                                             window[n + t + 1]));
      for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
        if (!config.layer_has_indexer[l] || l >= static_cast<int64_t>(forced[0].selections[t].size())) continue;
        const auto [shared, width] = SharedKeys(forced[0].selections[t][l], forced[1].selections[t][l], n + t + 1);
        shared_keys[l] += shared;
        selected_keys[l] += width;
      }
    }
    rows.insert(rows.end(), window_rows.begin(), window_rows.end());

    const std::span<const int32_t> prompt = std::span<const int32_t>(window).first(n);
    GenerateOptions greedy;
    greedy.max_new_tokens = s.new_tokens;
    greedy.k = 0;
    greedy.stop_at_eos = false;
    std::vector<int32_t> outputs[2];
    for (int i = 0; i < 2; ++i) {
      ASSIGN_OR_RETURN(GenerateResult r, Generate(*targets[i], nullptr, prompt, greedy));
      outputs[i] = std::move(r.tokens);
    }
    const SequenceAgreement agreement = CompareSequences(outputs[0], outputs[1]);
    greedy_first_sum += static_cast<double>(agreement.first_difference);
    greedy_equal_sum += agreement.equal_fraction;
    nlohmann::json mtp_json = nullptr;
    if (mtp) {
      GenerateOptions drafting = greedy;
      drafting.k = s.k;
      mtp_json = nlohmann::json::object();
      for (int i = 0; i < 2; ++i) {
        ASSIGN_OR_RETURN(GenerateResult r, Generate(*targets[i], drafters[i].get(), prompt, drafting));
        const double drafts = static_cast<double>(r.stats.num_drafts);
        mtp_len_drafts[i] += r.stats.mean_acceptance_length() * drafts;
        mtp_drafts[i] += drafts;
        mtp_json[sides[i].name] = {{"mean_acceptance_length", r.stats.mean_acceptance_length()},
                                              {"drafts", r.stats.num_drafts}};
      }
    }
    windows.push_back({{"corpus", corpus.name},
                       {"teacher_forced", SummaryJson(Summarize(window_rows), sides[1].name)},
                       {"greedy", {{"tokens", agreement.length}, {"first_difference", agreement.first_difference},
                                   {"equal_fraction", agreement.equal_fraction}}},
                       {"mtp", mtp_json}});
    std::fprintf(stderr, "numerics_bench: window %lld/%lld (%s) done, %.0f s\n", static_cast<long long>(w + 1),
                 static_cast<long long>(s.windows), corpus.name.c_str(), NowSeconds() - start);
  }

  const ComparisonSummary pooled = Summarize(rows);
  const double W = static_cast<double>(s.windows);
  nlohmann::json memory = nlohmann::json::array();
  memory.push_back(MemoryJson(config, s.model_dir + "/config.json", s.memory_context));
  for (const std::string& path : s.memory_configs) {
    ASSIGN_OR_RETURN(ModelConfig other, LoadModelConfig(path));
    memory.push_back(MemoryJson(other, path, s.memory_context));
  }
  nlohmann::json mtp_pooled = nullptr;
  if (mtp) {
    mtp_pooled = {{"k", s.k}, {"rule", "sampler-equality, T=0"},
                  {"draft_cache", index_keys ? "the MTP layer's own, latent f32, indexer keys as its side keeps them"
                                             : "f32 (the MTP layer's own)"},
                  {"draft_rows", activations ? "the MTP layer's matrices take their side's input rows" : "f32"},
                  {"mean_acceptance_length_f32", mtp_drafts[0] > 0 ? mtp_len_drafts[0] / mtp_drafts[0] : 1.0},
                  {"mean_acceptance_length_" + sides[1].name, mtp_drafts[1] > 0 ? mtp_len_drafts[1] / mtp_drafts[1] : 1.0}};
  }
  nlohmann::json root = {
      {"benchmark", "numerics_bench"},
      {"run", run_info},
      {"model", s.model_dir},
      {"corpora", [&] {
         nlohmann::json c = nlohmann::json::array();
         for (const TokenCorpus& t : corpora) c.push_back({{"name", t.name}, {"path", t.path}, {"tokens", t.ids.size()}});
         return c;
       }()},
      {"settings", {{"windows", s.windows}, {"context", n}, {"eval_tokens", s.eval_tokens},
                    {"new_tokens", s.new_tokens}, {"k", s.k}, {"seed", s.seed}}},
      {"variant", index_keys    ? absl::StrCat(IndexKeyStorageName(s.index_keys), "-index-keys")
                  : activations ? absl::StrCat(ActivationPrecisionName(s.activations), "-activations")
                                : absl::StrCat(LatentStorageName(s.latent), "-latent")},
      {"quantisation",
       s.activations == ActivationPrecision::kBf16
           ? "every matrix in FP8 on both sides; its input rows rounded to bf16 against f32 rows"
       : s.activations == ActivationPrecision::kFp8
           ? "every matrix in FP8 on both sides; its input rows quantised to e4m3 in groups of 128 with power-of-two "
             "scales against f32 rows"
       : s.index_keys == IndexKeyStorage::kBf16
           ? "indexer keys and queries rounded to bf16 (products summed in f32); latent and rope key f32"
       : s.index_keys == IndexKeyStorage::kFp8
           ? "indexer keys and queries Hadamard-rotated and quantised to e4m3 with a power-of-two scale each; latent "
             "and rope key f32"
       : s.latent == LatentStorage::kFp8
           ? "fp8 latent cache as DeepSeek-V3.2 is served: e4m3 latent with a power-of-two f32 scale per 128 values, "
             "bf16 rope key, decode and verify attention in bf16 pair products; indexer keys f32"
           : "int8 latent, one symmetric f32 scale per token and layer (max|c| / 127); rope and indexer keys f32"},
      {"selection_overlap", [&] {
         nlohmann::json layers = nlohmann::json::array();
         for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
           if (selected_keys[l] == 0) continue;
           layers.push_back({{"layer", l}, {"selected_keys", selected_keys[l]}, {"shared_keys", shared_keys[l]},
                             {"shared_fraction", static_cast<double>(shared_keys[l]) / selected_keys[l]}});
         }
         return layers;
       }()},
      {"teacher_forced", SummaryJson(pooled, sides[1].name)},
      {"greedy", {{"mean_first_difference", greedy_first_sum / W}, {"mean_equal_fraction", greedy_equal_sum / W},
                  {"tokens", s.new_tokens}}},
      {"mtp", mtp_pooled},
      {"windows", windows},
      {"memory", memory},
      {"elapsed_seconds", NowSeconds() - start},
      {"loadavg_end", LoadAverages()},
  };
  RETURN_IF_ERROR(WriteTextFile(s.json_path, root.dump(1) + "\n"));

  const char* test_name = sides[1].name.c_str();
  std::printf("| model | windows x steps | mean KL (nats) | p99 KL | max rel. logit error | greedy agreement "
              "(teacher-forced) | held-out loss f32 -> %s | free-running greedy: first difference, equal share |%s\n",
              test_name, mtp ? absl::StrCat(" MTP mean acc. length f32 -> ", test_name, " |").c_str() : "");
  std::printf("|---|---|---|---|---|---|---|---|%s\n", mtp ? "---|" : "");
  std::printf("| %s | %lld x %lld | %.2e | %.2e | %.4f | %.4f | %.4f -> %.4f | %.1f of %lld, %.3f |", s.model_dir.c_str(),
              static_cast<long long>(s.windows), static_cast<long long>(s.eval_tokens), pooled.mean_kl, pooled.p99_kl,
              pooled.max_relative_error, pooled.argmax_agreement, pooled.mean_nll_ref, pooled.mean_nll_test,
              greedy_first_sum / W, static_cast<long long>(s.new_tokens), greedy_equal_sum / W);
  if (mtp) {
    std::printf(" %.3f -> %.3f |", mtp_pooled["mean_acceptance_length_f32"].get<double>(),
                mtp_pooled[absl::StrCat("mean_acceptance_length_", test_name)].get<double>());
  }
  if (!root["selection_overlap"].empty()) {
    std::printf("\n\n| full layer | decode steps' top-k keys | shared with f32's selection |\n|---|---|---|\n");
    for (const nlohmann::json& layer : root["selection_overlap"]) {
      std::printf("| %lld | %lld | %.4f |\n", static_cast<long long>(layer["layer"].get<int64_t>()),
                  static_cast<long long>(layer["selected_keys"].get<int64_t>()),
                  layer["shared_fraction"].get<double>());
    }
  }
  std::printf("\n\n| config | layers | bytes/token f32 | bf16 | int8 | fp8 | int8 / bf16 | fp8 / bf16 | GiB at %lld "
              "tokens (f32 / bf16 / int8 / fp8) |\n|---|---|---|---|---|---|---|---|---|\n",
              static_cast<long long>(s.memory_context));
  for (const nlohmann::json& m : memory) {
    const nlohmann::json& b = m["bytes_per_token"];
    const nlohmann::json& g = m["gib_at_context"];
    std::printf("| %s | %lld | %lld | %lld | %lld | %lld | %.2f | %.2f | %.2f / %.2f / %.2f / %.2f |\n",
                m["source"].get<std::string>().c_str(), static_cast<long long>(m["layers"].get<int64_t>()),
                static_cast<long long>(b["f32"].get<int64_t>()), static_cast<long long>(b["bf16"].get<int64_t>()),
                static_cast<long long>(b["int8"].get<int64_t>()), static_cast<long long>(b["fp8"].get<int64_t>()),
                b["int8"].get<double>() / b["bf16"].get<double>(), b["fp8"].get<double>() / b["bf16"].get<double>(),
                g["f32"].get<double>(), g["bf16"].get<double>(), g["int8"].get<double>(), g["fp8"].get<double>());
  }
  std::fprintf(stderr, "numerics_bench: wrote %s\n", s.json_path.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace mtpspec::bench

int main(int argc, char** argv) {
  return mtpspec::bench::ExitCode("numerics_bench", mtpspec::bench::Run(argc, argv));
}

// `mtpspec`: the command-line front end.
//
//   mtpspec info DIR [--check-weights]
//   mtpspec logits DIR --ids 1,2,3 [--positions 0,1,2] --out FILE.npy [--rows all|last|0,2]
//                      [--path auto|dense|mask|gather] [--weights stored|f32|bf16|fp8] [--threads N]
//   mtpspec generate DIR …                (cli/generate_command.h)
//   mtpspec make-checkpoint DIR --like glm-5.2|deepseek-v3.2|glm-4.7-flash|deepseek-v3 [--layers N] [--experts E]
//                      [--fill random|zeros] [--seed S] [--shard-gib G]
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/cli_args.h"
#include "cli/generate_command.h"
#include "core/parallel.h"
#include "io/npy.h"
#include "model/model.h"
#include "model/prefill_passes.h"
#include "model/tensor_table.h"
#include "model/weight_check.h"
#include "pipeline/options.h"
#include "pipeline/request.h"
#include "model/release_checkpoint.h"

namespace mtpspec {
namespace {

constexpr char kUsage[] =
    "usage:\n"
    "  mtpspec info DIR [--check-weights] [--weights stored|f32|bf16|fp8] [--activations f32|bf16|fp8]\n"
    "  mtpspec logits DIR --ids 1,2,3 [--positions 0,1,2] --out FILE.npy [--rows all|last|i,j]\n"
    "                 [--path auto|dense|mask|gather] [--weights stored|f32|bf16|fp8] [--threads N] [--kv-cache f32|int8|fp8]\n"
    "                 [--index-keys f32|bf16|fp8] [--activations f32|bf16|fp8]\n"
    "  mtpspec generate DIR --ids 1,2,3 | --prompt TEXT | --prompts-file FILE [--max-new N] [--draft mtp|lookup|hybrid|none] [--k K|auto]\n"
    "                 [--accept sampler-equality|rejection|relaxed|synthetic] [--temperature T] [--top-k K]\n"
    "                 [--top-p P] [--min-p P] [--seed S] [--mtp-hidden post|pre] [--mtp-chain normed|raw|default]\n"
    "                 [--mtp-index-share exact|shared] [--sample-drafts true|false] [--synthetic-rates a,b,..]\n"
    "                 [--synthetic-rates-unconditional a,b,.. | --synthetic-acceptance-length AL]   (synthetic rates as\n"
    "                                               fractions of drafts accepted up to each position, or a mean\n"
    "                                               accepted length on vLLM's schedule; --synthetic-rates is conditional)\n"
    "                 [--stop-ids a,b] [--eos-ids a,b] [--logprobs true|false] [--stats-json FILE] [--device cpu|cuda]\n"
    "                 [--device-weights bf16|fp8]   (with --device cuda: the FP8 matrices (all with --weights fp8)\n"
    "                                               widened to bf16 on the GPU, or kept FP8)\n"
    "                 [--weights stored|f32|bf16|fp8] [--kv-cache f32|int8|fp8] [--index-keys f32|bf16|fp8]\n"
    "                 [--activations f32|bf16|fp8]   (input rows: as given; bf16 for FP8 and bf16 matrices; fp8 per 128 for FP8)\n"
    "                 [--tree B1,B2,.. | --tree-nodes M]   (a draft tree from the MTP head instead of a chain of k)\n"
    "                 [--batch B [--k-schedule B1:k1,B2:k2,..]]   (the prompts B at a time, one verify forward per cycle)\n"
    "  mtpspec make-checkpoint DIR --like glm-5.2|deepseek-v3.2|glm-4.7-flash|deepseek-v3 [--layers N] [--experts E] [--fill random|zeros]\n"
    "                 [--seed S] [--shard-gib G]\n";

absl::StatusOr<LoadOptions> ParseLoadOptions(const CliArgs& args) {
  LoadOptions options;
  ASSIGN_OR_RETURN(options.weight_dtype, ParseWeightDType(args.Get("weights", "stored"), Frontend::kCli));
  ASSIGN_OR_RETURN(options.index_keys, ParseIndexKeyStorage(args.Get("index-keys", "f32"), "--index-keys"));
  ASSIGN_OR_RETURN(options.activations, ParseActivationPrecision(args.Get("activations", "f32"), "--activations"));
  return options;
}

absl::StatusOr<AttentionPath> ParsePath(const std::string& text) {
  if (text == "auto") return AttentionPath::kAuto;
  if (text == "dense") return AttentionPath::kDense;
  if (text == "mask") return AttentionPath::kMask;
  if (text == "gather") return AttentionPath::kGather;
  return absl::InvalidArgumentError(absl::StrCat("--path must be auto, dense, mask or gather, got \"", text, "\""));
}

std::string HumanCount(int64_t n) {
  if (n >= 1000000000) return absl::StrFormat("%.2fB", n / 1e9);
  if (n >= 1000000) return absl::StrFormat("%.2fM", n / 1e6);
  if (n >= 1000) return absl::StrFormat("%.1fK", n / 1e3);
  return absl::StrCat(n);
}

// 31221488576 as "31,221,488,576".
std::string GroupedDigits(int64_t n) {
  std::string digits = absl::StrCat(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// Cache bytes per token of one full-indexer layer and of one shared layer (f32 latent).
std::string CacheBytesPerLayerText(const KvCacheShape& shape, const ModelConfig& c) {
  const int64_t shared = 4 * (shape.kv_lora_rank + shape.rope_dim);
  if (!c.has_indexer) return absl::StrCat(shared, " B on every layer (f32; no indexer keys)");
  return absl::StrCat(shared + 4 * shape.index_head_dim, " B on a full layer, ", shared, " B on a shared one (f32)");
}

// ", N B with --kv-cache fp8 --index-keys fp8" (the latent and indexer keys in e4m3 with their scales,
// the rope key in bf16), or nothing where the dimensions do not allow those storages.
std::string FP8CacheText(const ModelConfig& c) {
  if (!CheckLatentStorage(LatentStorage::kFp8, c.kv_lora_rank, c.qk_rope_head_dim).ok()) return "";
  if (!c.has_indexer) {
    return absl::StrCat(", ", CacheBytesPerToken(CacheShapeFor(c, LatentStorage::kFp8)), " B with --kv-cache fp8");
  }
  if (!CheckIndexKeyStorage(IndexKeyStorage::kFp8, c.index_head_dim).ok()) return "";
  return absl::StrCat(", ", CacheBytesPerToken(CacheShapeFor(c, LatentStorage::kFp8, IndexKeyStorage::kFp8)),
                      " B with --kv-cache fp8 --index-keys fp8");
}

// A checkpoint cut from a release (testing/release_checkpoint.h): the full model's counts beside
// the cut one's, from the release's config.
void PrintCutFrom(const Model& model) {
  std::ifstream in(model.dir() + "/config.json");
  nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.contains("mtpspec_cut_from")) return;
  absl::StatusOr<ModelConfig> full = ParseModelConfig(UncutConfig(config), "the release config");
  absl::StatusOr<Release> release = ParseRelease(config["mtpspec_cut_from"].value("release", ""));
  if (!full.ok() || !release.ok()) return;
  const ParameterCount p = CountConfigParameters(*full);
  const bool copies = ReleaseHasMtpCopies(*release);
  const int64_t total = p.trunk + p.mtp + (copies ? p.mtp_copies : 0);
  KvCache probe(CacheShapeFor(*full), 1);
  std::cout << "cut from       " << ReleaseName(*release) << ": " << full->num_hidden_layers << " layers, "
            << full->n_routed_experts << " experts; full model: parameters trunk " << HumanCount(p.trunk) << " ("
            << HumanCount(p.routed_experts) << " in routed experts), mtp " << HumanCount(p.mtp)
            << (copies ? absl::StrCat(" + ", HumanCount(p.mtp_copies), " in its embed and head copies") : "")
            << ", cache/token " << probe.BytesPerToken() << " B f32, " << probe.Bf16BytesPerToken() << " B bf16"
            << FP8CacheText(*full) << "\n"
            << "release total  " << GroupedDigits(total) << " parameters, the MTP layer" << (copies ? " and its copies" : "")
            << " included";
  if (ReleaseIsFp8(*release)) {
    std::cout << "; " << GroupedDigits(total + CountFp8BlockScales(*full)) << " with the FP8 block scales";
  }
  std::cout << "\n";
}

// Reads every stored value; an error listing the tensors that hold NaN or Inf, if any do.
absl::Status CheckWeights(const std::string& dir) {
  ASSIGN_OR_RETURN(auto store, SafetensorsStore::Open(dir, FileMemory::kMapped));
  const std::vector<NonFiniteTensor> found = FindNonFiniteTensors(*store);
  if (found.empty()) {
    std::cout << "weights        every stored value is finite (" << store->names().size() << " tensors read)\n";
    return absl::OkStatus();
  }
  std::string list;
  for (size_t i = 0; i < found.size() && i < 20; ++i) {
    absl::StrAppend(&list, "\n  ", found[i].name, " (", found[i].file, "): ", found[i].count,
                    " non-finite values, the first at flat index ", found[i].first);
  }
  if (found.size() > 20) absl::StrAppend(&list, "\n  ... and ", found.size() - 20, " more tensors");
  return absl::DataLossError(absl::StrCat(dir, ": ", found.size(), " tensors hold NaN or Inf:", list));
}

// The quantization line of an FP8 checkpoint, or of a model quantised at load, and the activations
// line when matrices take reduced input rows.
void PrintQuantization(const Model& model) {
  const ModelConfig& c = model.config();
  const LoadReport& report = model.load_report();
  if (c.quantization.fp8 || report.fp8_tensors_in_place + report.fp8_tensors_dequantised + report.fp8_tensors_quantised > 0) {
    std::cout << "quantization   fp8 e4m3, 128x128 blocks"
              << (c.quantization.scale_fmt == "ue8m0" ? " (ue8m0 scales)" : "") << "; " << report.fp8_tensors_in_place
              << " matrices used as FP8, " << report.fp8_tensors_dequantised << " widened at load";
    if (report.fp8_tensors_quantised > 0) std::cout << ", " << report.fp8_tensors_quantised << " quantised to FP8 at load";
    if (!c.quantization.modules_to_not_convert.empty()) {
      std::cout << "; " << c.quantization.modules_to_not_convert.size() << " modules not converted";
    }
    std::cout << "\n";
  }
  if (report.matrices_reduced_activations > 0) {
    std::cout << "activations    " << report.matrices_reduced_activations << " matrices take their input rows in "
              << ActivationPrecisionName(model.activation_precision()) << ", the rest in f32\n";
  }
}

// The indexer's lines: its dimensions, the layer schedule and the attention paths, or that the type
// has none.
void PrintIndexer(const ModelConfig& c, const std::string& schedule_mlp) {
  if (!c.has_indexer) {
    std::cout << "indexer        none: " << c.model_type_name
              << " has no DSA indexer; every layer, the MTP layer too, attends over every causal key\n"
              << "layers (D/M)   " << schedule_mlp << "\n"
              << "attention      dense at every length\n";
    return;
  }
  std::string schedule_index;
  int64_t full_layers = 0;
  for (bool f : c.layer_has_indexer) {
    schedule_index += f ? 'F' : 'S';
    full_layers += f;
  }
  std::cout << "indexer        " << c.index_n_heads << " heads x " << c.index_head_dim << ", top-k " << c.index_topk
            << ", rope " << (c.indexer_rope_interleave ? "interleaved" : "half-split") << " ("
            << c.indexer_rope_source << "), schedule from " << c.index_schedule_source << "\n"
            << "layers (D/M)   " << schedule_mlp << "\n"
            << "layers (F/S)   " << schedule_index << "  (" << full_layers << " full)\n"
            << "attention      dense while T <= " << c.index_topk << "; beyond, gather for L <= 16 rows, else mask\n";
}

// The MTP line: where the layer sits, whether it has its own embed and head copies and whether
// they hold the trunk's values, and the chaining default for k > 1.
void PrintMtp(const Model& model) {
  const ModelConfig& c = model.config();
  std::cout << "mtp            ";
  if (!model.has_mtp()) {
    std::cout << "none (" << model.load_report().mtp_note << ")\n";
    return;
  }
  const MtpLayerWeights& mtp = model.weights().mtp[0];
  auto copy = [](bool own, const TensorView& theirs, const TensorView& trunk, const char* what, const char* shared) {
    if (!own) return std::string(shared);
    return absl::StrCat("own ", what, SameStoredValues(theirs, trunk) ? " (equal to the trunk's)" : " (differs from the trunk's)");
  };
  std::cout << c.num_nextn_predict_layers << " layer(s) at index " << c.num_hidden_layers << ", "
            << copy(mtp.own_embed, mtp.embed, model.weights().embed, "embed", "shares embed") << ", "
            << copy(mtp.own_head, mtp.head, model.weights().lm_head, "head", "shares lm_head") << "\n"
            << "mtp chain      " << (c.mtp_chain_raw ? "raw" : "normed") << " state carried for k > 1 by default ("
            << c.mtp_chain_source << "; --mtp-chain overrides)\n";
}

absl::Status RunInfo(const CliArgs& args) {
  if (args.positional().size() != 1) return absl::InvalidArgumentError("info takes one model directory");
  ASSIGN_OR_RETURN(LoadOptions options, ParseLoadOptions(args));
  options.file_memory = FileMemory::kMapped;  // info reads shapes, scales and norms, not the weights
  ASSIGN_OR_RETURN(auto model, Model::Load(args.positional()[0], options));
  if (!model->load_report().activations_note.empty()) {
    std::cerr << "mtpspec info: warning: --" << model->load_report().activations_note << "\n";
  }
  const ModelConfig& c = model->config();
  std::string schedule_mlp;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) schedule_mlp += c.layer_is_dense[l] ? 'D' : 'M';
  std::cout << "model          " << model->dir() << "\n"
            << "model_type     " << c.model_type_name << "\n"
            << "dims           hidden " << c.hidden_size << ", layers " << c.num_hidden_layers << ", heads "
            << c.num_attention_heads << ", q_lora " << c.q_lora_rank << ", kv_lora " << c.kv_lora_rank
            << ", nope/rope/v " << c.qk_nope_head_dim << "/" << c.qk_rope_head_dim << "/" << c.v_head_dim
            << ", vocab " << c.vocab_size << "\n"
            << "moe            " << c.n_routed_experts << " experts, top-" << c.num_experts_per_tok << ", "
            << c.n_shared_experts << " shared, groups " << c.n_group << "/" << c.topk_group << ", scale "
            << c.routed_scaling_factor << "\n"
            << "rope           theta " << c.rope.theta << ", type " << c.rope.type << ", "
            << (c.rope_interleave ? "interleaved" : "half-split") << ", softmax scale " << c.softmax_scale() << "\n";
  PrintIndexer(c, schedule_mlp);
  std::cout << "parameters     trunk " << HumanCount(model->weights().parameter_count) << ", mtp "
            << HumanCount(model->weights().mtp_parameter_count) << "\n"
            << "weights        " << absl::StrFormat("%.2f GB", model->weights().weight_bytes / 1e9)
            << " as used for compute\n";
  PrintQuantization(*model);
  auto cache = model->CacheShape();
  KvCache probe(cache, 1);
  std::cout << "cache/token    " << probe.BytesPerToken() << " B (f32 as stored here), " << probe.Bf16BytesPerToken()
            << " B in bf16" << FP8CacheText(c) << "\n"
            << "cache/layer    " << CacheBytesPerLayerText(cache, c) << "\n";
  PrintMtp(*model);
  if (model->dir().empty() == false) PrintCutFrom(*model);
  if (args.Has("check-weights")) return CheckWeights(args.positional()[0]);
  return absl::OkStatus();
}

// A checkpoint in a release's exact format (testing/release_checkpoint.h), random or zero weights.
absl::Status RunMakeCheckpoint(const CliArgs& args) {
  if (args.positional().size() != 1) return absl::InvalidArgumentError("make-checkpoint takes one output directory");
  if (!args.Has("like")) return absl::InvalidArgumentError("make-checkpoint needs --like glm-5.2, deepseek-v3.2, glm-4.7-flash or deepseek-v3");
  ReleaseCheckpointOptions options;
  ASSIGN_OR_RETURN(options.release, ParseRelease(args.Get("like")));
  ASSIGN_OR_RETURN(options.layers, args.GetInt("layers", 0));
  ASSIGN_OR_RETURN(options.experts, args.GetInt("experts", 0));
  ASSIGN_OR_RETURN(const int64_t seed, args.GetInt("seed", 1));
  if (seed < 0) return absl::InvalidArgumentError(absl::StrCat("--seed must be >= 0, got ", seed));
  options.seed = static_cast<uint64_t>(seed);
  const std::string fill = args.Get("fill", "random");
  if (fill != "random" && fill != "zeros") {
    return absl::InvalidArgumentError(absl::StrCat("--fill must be random or zeros, got \"", fill, "\""));
  }
  options.zeros = fill == "zeros";
  ASSIGN_OR_RETURN(const double shard_gib, args.GetDouble("shard-gib", 4.0));
  if (!(shard_gib > 0 && shard_gib <= 1024)) {
    return absl::InvalidArgumentError(absl::StrCat("--shard-gib must be in (0, 1024], got ", shard_gib));
  }
  options.shard_bytes = static_cast<int64_t>(shard_gib * (1 << 30));
  RETURN_IF_ERROR(WriteReleaseCheckpoint(args.positional()[0], options));
  std::cout << "wrote " << args.positional()[0] << " (" << ReleaseName(options.release) << ", " << fill << ")\n";
  return absl::OkStatus();
}

absl::Status RunLogits(const CliArgs& args) {
  if (args.positional().size() != 1) return absl::InvalidArgumentError("logits takes one model directory");
  if (!args.Has("ids")) return absl::InvalidArgumentError("logits needs --ids");
  if (!args.Has("out")) return absl::InvalidArgumentError("logits needs --out FILE.npy");
  ASSIGN_OR_RETURN(LoadOptions load_options, ParseLoadOptions(args));
  ASSIGN_OR_RETURN(std::vector<int64_t> ids64, args.GetIntList("ids"));
  ASSIGN_OR_RETURN(std::vector<int64_t> positions, args.GetIntList("positions"));
  if (positions.empty()) {
    for (size_t i = 0; i < ids64.size(); ++i) positions.push_back(static_cast<int64_t>(i));
  }
  if (positions.size() != ids64.size()) {
    return absl::InvalidArgumentError(absl::StrCat("--positions has ", positions.size(), " entries but --ids has ",
                                                   ids64.size()));
  }
  ASSIGN_OR_RETURN(auto model, Model::Load(args.positional()[0], load_options));
  if (!model->load_report().activations_note.empty()) {
    std::cerr << "mtpspec logits: warning: --" << model->load_report().activations_note << "\n";
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i < ids64.size(); ++i) {
    if (ids64[i] < 0 || ids64[i] >= model->config().vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("--ids[", i, "] = ", ids64[i], " is outside the vocabulary [0, ",
                                                     model->config().vocab_size, ")"));
    }
    ids.push_back(static_cast<int32_t>(ids64[i]));
  }
  if (positions[0] != 0) {
    return absl::InvalidArgumentError("--positions must start at 0 (logits runs on an empty cache)");
  }
  ForwardOptions options;
  ASSIGN_OR_RETURN(options.attention.path, ParsePath(args.Get("path", "auto")));
  if (!model->config().has_indexer &&
      (options.attention.path == AttentionPath::kMask || options.attention.path == AttentionPath::kGather)) {
    return absl::InvalidArgumentError(absl::StrCat("--path ", args.Get("path"), " selects keys with the DSA indexer, which ",
                                                   model->config().model_type_name,
                                                   " does not have: every layer attends densely (--path auto or dense)"));
  }
  const std::string rows = args.Get("rows", "all");
  if (rows == "last") {
    options.logit_rows = {static_cast<int64_t>(ids.size()) - 1};
  } else if (rows != "all") {
    ASSIGN_OR_RETURN(options.logit_rows, args.GetIntList("rows"));
  }
  const int64_t capacity = std::min<int64_t>(model->config().max_position_embeddings, positions.back() + 1);
  ASSIGN_OR_RETURN(const LatentStorage storage, ParseLatentStorage(args.Get("kv-cache", "f32"), "--kv-cache"));
  ASSIGN_OR_RETURN(auto cache, model->NewCache(std::max<int64_t>(capacity, 1), storage));
  ASSIGN_OR_RETURN(ForwardOutput out, ForwardInPasses(*model, *cache, ids, positions, options));
  RETURN_IF_ERROR(WriteNpy(args.Get("out"), out.logits.view()));
  std::cout << "wrote " << args.Get("out") << " " << ShapeString(out.logits.view()) << " f32\n";
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "help") {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  absl::Status status;
  if (command == "info") {
    auto args = CliArgs::Parse(argc, argv, 2, {"weights", "threads", "activations"}, {"check-weights"});
    status = args.ok() ? ApplyThreadsOption(*args) : args.status();
    if (status.ok()) status = RunInfo(*args);
  } else if (command == "logits") {
    auto args =
        CliArgs::Parse(argc, argv, 2, {"ids", "positions", "out", "rows", "path", "weights", "threads", "kv-cache",
                                              "index-keys", "activations"});
    status = args.ok() ? ApplyThreadsOption(*args) : args.status();
    if (status.ok()) status = RunLogits(*args);
  } else if (command == "make-checkpoint") {
    auto args = CliArgs::Parse(argc, argv, 2, {"like", "layers", "experts", "fill", "seed", "shard-gib", "threads"});
    status = args.ok() ? ApplyThreadsOption(*args) : args.status();
    if (status.ok()) status = RunMakeCheckpoint(*args);
  } else if (command == "generate" && std::find(argv + 2, argv + argc, std::string("--help")) != argv + argc) {
    std::cout << "usage: mtpspec generate DIR --ids 1,2,3 | --prompt TEXT | --prompts-file FILE [options]\n"
              << "  [--weights stored|f32|bf16|fp8] [--activations f32|bf16|fp8] [--index-keys f32|bf16|fp8]\n"
              << "  [--capacity N] [--threads N] [--stats-json FILE] [--batch B [--k-schedule B1:k1,...]]\n"
              << "  [--stop TEXT]   (end a text prompt's request where its output holds TEXT)\n"
              << "--prompts-file FILE: a prompt per line, or FILE.jsonl: a prompt set (MT-Bench, Spec-Bench, SPEED-Bench,\n"
              << "  HumanEval layouts) [--categories a,b], every turn a request, statistics per category\n"
              << "chat messages: the CLI takes text or ids; Python's Model.generate(messages=...) and the server's\n"
              << "  /v1/chat/completions render the checkpoint's chat template (mtpspec-serve --chat-template FILE)\n"
              << "request options (the same as Python's Model.generate keywords and the server's fields):\n"
              << RequestOptionsHelp();
    return 0;
  } else if (command == "generate") {
    auto args = CliArgs::Parse(argc, argv, 2, GenerateOptionNames());
    status = args.ok() ? ApplyThreadsOption(*args) : args.status();
    if (status.ok()) status = RunGenerate(*args);
  } else {
    status = absl::InvalidArgumentError(absl::StrCat("unknown command \"", command, "\"\n", kUsage));
  }
  if (!status.ok()) {
    std::cerr << "mtpspec " << command << ": " << status.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace mtpspec

int main(int argc, char** argv) { return mtpspec::Main(argc, argv); }

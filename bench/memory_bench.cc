// memory_bench: what loading and decoding a checkpoint costs in memory, against its file bytes.
//
// Loads DIR (files read into huge pages, or mapped), prefills a context of random ids and decodes
// plainly, then reports the process's peak resident memory (VmHWM) over the resident memory before
// the load, the KV cache's bytes, and (peak − start − cache) ÷ the checkpoint's file bytes: how much
// more than its files a checkpoint needs. FP8 checkpoints are used as stored, so that ratio should be
// close to 1; checkpoints widened at load (f16, or --weights f32|bf16) show what widening costs.
//
//   build/release/bench/memory_bench --model DIR [--file-memory huge|mapped] [--weights stored|f32|bf16|fp8]
//       [--context N] [--new-tokens M] [--json PATH]
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/run_info.h"
#include "core/cli_args.h"
#include "core/parallel.h"
#include "pipeline/request.h"
#include "spec/generator.h"
#include "pipeline/model_target.h"

namespace mtpspec::bench {
namespace {

constexpr char kUsage[] = R"(memory_bench: peak resident memory of loading and decoding a checkpoint.

  --model DIR            checkpoint directory (required)
  --file-memory MODE     huge (read into transparent huge pages, the default) or mapped (zero-copy mmap)
  --weights W            stored (default), f32 or bf16
  --context N            prompt tokens of random ids (default 512)
  --new-tokens M         plain decode steps after it (default 16)
  --threads N   --json PATH (default build/results/memory.json)
)";

// A field of /proc/self/status in kB ("VmHWM", "VmRSS"), or -1.
int64_t StatusKiB(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

int64_t CheckpointFileBytes(const std::string& dir) {
  int64_t bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().extension() == ".safetensors") bytes += entry.file_size();
  }
  return bytes;
}

absl::Status Run(int argc, char** argv) {
  const std::set<std::string> names = {"model", "file-memory", "weights", "context", "new-tokens", "threads", "json"};
  ASSIGN_OR_RETURN(CliArgs args, CliArgs::Parse(argc, argv, 1, names, std::set<std::string>{"help"}));
  if (args.Has("help")) {
    std::cout << kUsage;
    return absl::OkStatus();
  }
  if (!args.Has("model")) return absl::InvalidArgumentError("--model DIR is required");
  const std::string dir = args.Get("model");
  LoadOptions load;
  const std::string mode = args.Get("file-memory", "huge");
  if (mode != "huge" && mode != "mapped") {
    return absl::InvalidArgumentError(absl::StrCat("--file-memory must be huge or mapped, got \"", mode, "\""));
  }
  load.file_memory = mode == "huge" ? FileMemory::kHugePages : FileMemory::kMapped;
  ASSIGN_OR_RETURN(load.weight_dtype, ParseWeightDType(args.Get("weights", "stored"), Frontend::kCli));
  ASSIGN_OR_RETURN(const int64_t context, args.GetInt("context", 512));
  ASSIGN_OR_RETURN(const int64_t new_tokens, args.GetInt("new-tokens", 16));
  if (context < 1 || new_tokens < 0) return absl::InvalidArgumentError("--context must be >= 1, --new-tokens >= 0");
  RETURN_IF_ERROR(ApplyThreadsOption(args));
  DefaultThreadPool();  // start the pool before the baseline so its stacks count there

  const int64_t file_bytes = CheckpointFileBytes(dir);
  const int64_t start_kib = StatusKiB("VmRSS");
  double t = NowSeconds();
  ASSIGN_OR_RETURN(auto model, Model::Load(dir, load));
  const double load_seconds = NowSeconds() - t;
  const int64_t loaded_kib = StatusKiB("VmRSS");

  const int64_t capacity = context + new_tokens + 1;
  ASSIGN_OR_RETURN(auto target, ModelTarget::Create(*model, capacity));
  std::mt19937 rng(7);
  std::vector<int32_t> prompt(context);  // [N] random ids
  for (int32_t& id : prompt) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(model->config().vocab_size));
  GenerateOptions options;
  options.max_new_tokens = new_tokens;
  options.stop_at_eos = false;
  t = NowSeconds();
  ASSIGN_OR_RETURN(GenerateResult result, Generate(*target, nullptr, prompt, options));
  const double decode_seconds = NowSeconds() - t;
  const int64_t peak_kib = StatusKiB("VmHWM");
  const int64_t cache_bytes = CacheBytesPerToken(model->CacheShape()) * capacity;

  const double over_files =
      (static_cast<double>(peak_kib - start_kib) * 1024.0 - static_cast<double>(cache_bytes)) / file_bytes;
  nlohmann::json j = {
      {"benchmark", "memory_bench"},
      {"run", RunInfo(argc, argv)},
      {"model", dir},
      {"file_memory", mode},
      {"weights", args.Get("weights", "stored")},
      {"file_bytes", file_bytes},
      {"weight_bytes_in_memory", model->weights().weight_bytes},
      {"fp8_tensors_in_place", model->load_report().fp8_tensors_in_place},
      {"fp8_tensors_dequantised", model->load_report().fp8_tensors_dequantised},
      {"rss_start_bytes", start_kib * 1024},
      {"rss_after_load_bytes", loaded_kib * 1024},
      {"peak_rss_bytes", peak_kib * 1024},
      {"cache_bytes", cache_bytes},
      {"context", context},
      {"new_tokens", static_cast<int64_t>(result.tokens.size())},
      {"load_seconds", load_seconds},
      {"decode_seconds", decode_seconds},
      {"peak_over_file_bytes", over_files},
  };
  std::cout << absl::StrFormat(
      "model %s (%s, %s weights): files %.3f GB; RSS %.3f GB at start, %.3f GB after the load, peak %.3f GB; "
      "cache %.3f GB; (peak - start - cache) / files = %.3f\n",
      dir, mode, args.Get("weights", "stored"), file_bytes / 1e9, start_kib * 1024 / 1e9, loaded_kib * 1024 / 1e9,
      peak_kib * 1024 / 1e9, cache_bytes / 1e9, over_files);
  return WriteTextFile(args.Get("json", "build/results/memory.json"), j.dump(2) + "\n");
}

}  // namespace
}  // namespace mtpspec::bench

int main(int argc, char** argv) {
  const absl::Status status = mtpspec::bench::Run(argc, argv);
  if (!status.ok()) {
    std::fprintf(stderr, "memory_bench: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}

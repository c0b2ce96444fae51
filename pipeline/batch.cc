#include "pipeline/batch.h"

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "pipeline/model_target.h"
#include "pipeline/mtp_drafter.h"

namespace mtpspec {
namespace {

std::string GiB(int64_t bytes) { return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / (1 << 30)); }

bool UsesMtp(const RequestOptions& o) { return o.draft == DraftKind::kMtp || o.draft == DraftKind::kHybrid; }

}  // namespace

int64_t SlotCacheBytes(const Model& model, const RequestOptions& options, int64_t capacity) {
  const KvCacheShape trunk = model.CacheShape(options.kv_cache);
  int64_t per_token = CacheBytesPerToken(trunk);
  if (UsesMtp(options) && model.has_mtp()) {
    KvCacheShape mtp = trunk;  // one f32 layer, with its own indexer keys where the type has an indexer
    mtp.latent_storage = LatentStorage::kF32;
    mtp.has_indexer = {model.config().has_indexer};
    per_token += CacheBytesPerToken(mtp);
  }
  return per_token * capacity;
}

int64_t AvailableMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    int64_t kib = -1;
    if (fields >> kib && kib >= 0) return kib * 1024;
  }
  return -1;
}

absl::Status CheckBatchMemory(const Model& model, const RequestOptions& options, int64_t capacity, int64_t batch,
                              Frontend frontend, int64_t available_bytes) {
  if (available_bytes < 0) available_bytes = AvailableMemoryBytes();
  if (available_bytes < 0) return absl::OkStatus();
  const int64_t per_slot = SlotCacheBytes(model, options, capacity);
  // Divide rather than multiply, so that an absurd B cannot overflow.
  if (per_slot > 0 && batch > available_bytes / per_slot) {
    const double needed = static_cast<double>(per_slot) * static_cast<double>(batch);
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s %d: %d slots of %d cache positions need %.2f GiB of cache (%s per slot), more than the %s this machine "
        "has available; use a smaller batch or a smaller %s",
        OptionName(frontend, "batch"), batch, batch, capacity, needed / (1 << 30), GiB(per_slot), GiB(available_bytes),
        OptionName(frontend, "cache_capacity")));
  }
  return absl::OkStatus();
}

absl::StatusOr<BatchPipeline> BuildBatchPipeline(const Model& model, const RequestOptions& options, int64_t capacity,
                                                 int64_t batch, Frontend frontend) {
  const std::string name = OptionName(frontend, "batch");
  if (batch < 1) return absl::InvalidArgumentError(absl::StrCat(name, " must be >= 1, got ", batch));
  if (options.device != Device::kCpu) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": batched verify runs on the CPU only (",
                                                   OptionName(frontend, "device"), " cuda verifies one request at a time)"));
  }
  RETURN_IF_ERROR(CheckBatchMemory(model, options, capacity, batch, frontend));
  BatchPipeline out;
  for (int64_t s = 0; s < batch; ++s) {
    ASSIGN_OR_RETURN(Pipeline pipeline, BuildPipeline(model, options, capacity, frontend));
    out.pipelines.push_back(std::move(pipeline));
  }
  for (Pipeline& p : out.pipelines) out.slots.push_back({p.target.get(), p.drafter.get()});
  out.verifier = std::make_unique<ModelBatchVerifier>(model);
  if (options.draft == DraftKind::kMtp) out.drafter = std::make_unique<MtpBatchDrafter>();
  return out;
}

absl::StatusOr<std::vector<BatchKStep>> ParseKSchedule(const std::string& text, Frontend frontend) {
  const std::string name = OptionName(frontend, "k_schedule");
  std::vector<BatchKStep> schedule;
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> parts = absl::StrSplit(entry, ':');
    BatchKStep step;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &step.max_batch) || !absl::SimpleAtoi(parts[1], &step.k)) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be a list of B:k pairs such as 1:4,4:2,16:1; got \"",
                                                     entry, "\""));
    }
    schedule.push_back(step);
  }
  const absl::Status valid = ValidateKSchedule(schedule);
  if (!valid.ok()) return absl::InvalidArgumentError(absl::StrCat(name, ": ", valid.message()));
  return schedule;
}

absl::Status CheckSharedSlotOptions(const RequestOptions& batch, const RequestOptions& request, const std::string& what,
                                    Frontend frontend) {
  std::string differs;
  if (request.draft != batch.draft) differs = "draft";
  else if (request.mtp.hidden != batch.mtp.hidden) differs = "mtp_hidden";
  else if (request.mtp.chain != batch.mtp.chain) differs = "mtp_chain";
  else if (request.mtp.index_share != batch.mtp.index_share) differs = "mtp_index_share";
  else if (request.lookup.max_ngram != batch.lookup.max_ngram) differs = "ngram";
  else if (request.kv_cache != batch.kv_cache) differs = "kv_cache";
  else if (request.device != batch.device) differs = "device";
  else if (request.device_weights != batch.device_weights) differs = "device_weights";
  if (differs.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(OptionName(frontend, differs), ": ", what,
                                                 " sets it differently from the rest of the batch, whose slots share "
                                                 "it: give it for the whole batch"));
}

}  // namespace mtpspec

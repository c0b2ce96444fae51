#include "mtp/mtp_chain_cpu.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace mtpspec {

absl::StatusOr<std::unique_ptr<CpuMtpBackend>> CpuMtpBackend::Create(const Model& model, int64_t capacity) {
  ASSIGN_OR_RETURN(auto module, MtpModule::Create(model));
  ASSIGN_OR_RETURN(auto cache, module->NewCache(capacity));
  return std::unique_ptr<CpuMtpBackend>(new CpuMtpBackend(std::move(module), std::move(cache)));
}

absl::Status CpuMtpBackend::QueueHidden(const float* hidden, int64_t rows) {
  const int64_t H = config().hidden_size;
  queued_hidden_.insert(queued_hidden_.end(), hidden, hidden + rows * H);
  return absl::OkStatus();
}

absl::Status CpuMtpBackend::TruncateCache(int64_t length) {
  return cache_->Truncate(std::min(cache_->length(), length));
}

void CpuMtpBackend::ClearCache() {
  cache_->Clear();
  start_normed_.clear();
  start_raw_.clear();
  start_topk_.clear();
}

absl::Status CpuMtpBackend::Extend(int64_t begin, std::span<const int32_t> tokens, int64_t first_position,
                                   const MtpOptions& options, bool keep_start) {
  const int64_t H = config().hidden_size;
  const int64_t rows = static_cast<int64_t>(tokens.size());
  if (begin < 0 || (begin + rows) * H > static_cast<int64_t>(queued_hidden_.size())) {
    return absl::InternalError("MTP drafter: extend past the queued hidden rows");
  }
  std::vector<int64_t> positions(rows);  // [rows] absolute positions of the pairs
  for (int64_t r = 0; r < rows; ++r) positions[r] = first_position + r;
  ASSIGN_OR_RETURN(MtpStepOutput out,
                   module_->Extend(*cache_, queued_hidden_.data() + begin * H, tokens, positions, options));
  if (keep_start) {
    const float* normed = out.normed.data<float>() + (rows - 1) * H;
    const float* raw = out.raw.data<float>() + (rows - 1) * H;
    start_normed_.assign(normed, normed + H);
    start_raw_.assign(raw, raw + H);
    start_topk_.clear();
    if (out.topk.width > 0) start_topk_.assign(out.topk.row(rows - 1), out.topk.row(rows - 1) + out.topk.width);
  }
  return absl::OkStatus();
}

absl::Status CpuMtpBackend::BeginChain() {
  if (start_normed_.empty()) return absl::InternalError("MTP drafter: no committed pair to start a chain from");
  chained_normed_ = start_normed_;
  chained_raw_ = start_raw_;
  shared_.width = static_cast<int64_t>(start_topk_.size());
  shared_.selected = start_topk_;
  return absl::OkStatus();
}

absl::StatusOr<MtpHeadRow*> CpuMtpBackend::Head() {
  head_.values = module_->Logits(chained_normed_.data(), 1);  // [1, V]
  return &head_;
}

absl::Status CpuMtpBackend::Step(int32_t token, int64_t position, const MtpOptions& options, bool share_selection) {
  const int64_t H = config().hidden_size;
  const std::vector<float>& input = options.chain == MtpChain::kNormed ? chained_normed_ : chained_raw_;  // [H]
  ASSIGN_OR_RETURN(MtpStepOutput out,
                   module_->Extend(*cache_, input.data(), std::span<const int32_t>(&token, 1),
                                   std::span<const int64_t>(&position, 1), options,
                                   share_selection ? &shared_ : nullptr));
  std::copy(out.normed.data<float>(), out.normed.data<float>() + H, chained_normed_.begin());
  std::copy(out.raw.data<float>(), out.raw.data<float>() + H, chained_raw_.begin());
  return absl::OkStatus();
}

absl::Status CpuMtpBackend::BeginTree() {
  if (start_normed_.empty()) return absl::InternalError("MTP drafter: no committed pair to start a tree from");
  tree_normed_ = start_normed_;
  tree_raw_ = start_raw_;
  return absl::OkStatus();
}

absl::StatusOr<Tensor> CpuMtpBackend::TreeHeads(std::span<const int64_t> states) {
  const int64_t H = config().hidden_size, rows = static_cast<int64_t>(states.size());
  const int64_t have = static_cast<int64_t>(tree_normed_.size()) / H;
  std::vector<float> normed(rows * H);  // [rows, H]
  for (int64_t r = 0; r < rows; ++r) {
    if (states[r] < 0 || states[r] >= have) return absl::InternalError("MTP drafter: tree head of an unknown state");
    std::copy_n(tree_normed_.data() + states[r] * H, H, normed.data() + r * H);
  }
  return module_->Logits(normed.data(), rows);  // [rows, V]
}

absl::Status CpuMtpBackend::TreeStep(std::span<const int64_t> parent_states, std::span<const int32_t> tokens,
                                     std::span<const int64_t> positions, const TreeMask& mask,
                                     const MtpOptions& options, bool share_selection) {
  const int64_t H = config().hidden_size, rows = static_cast<int64_t>(tokens.size());
  const int64_t have = static_cast<int64_t>(tree_normed_.size()) / H;
  const std::vector<float>& states = options.chain == MtpChain::kNormed ? tree_normed_ : tree_raw_;  // [states, H]
  std::vector<float> input(rows * H);  // [rows, H] each row's chained input
  for (int64_t r = 0; r < rows; ++r) {
    if (parent_states[r] < 0 || parent_states[r] >= have) {
      return absl::InternalError("MTP drafter: tree step from an unknown state");
    }
    std::copy_n(states.data() + parent_states[r] * H, H, input.data() + r * H);
  }
  MtpOptions tree_options = options;
  tree_options.attention.tree = &mask;
  TopK shared;  // [rows, width] the start's selection for every row
  if (share_selection) {
    shared.width = static_cast<int64_t>(start_topk_.size());
    for (int64_t r = 0; r < rows; ++r) shared.selected.insert(shared.selected.end(), start_topk_.begin(), start_topk_.end());
  }
  ASSIGN_OR_RETURN(MtpStepOutput out, module_->Extend(*cache_, input.data(), tokens, positions, tree_options,
                                                      share_selection ? &shared : nullptr));
  tree_normed_.insert(tree_normed_.end(), out.normed.data<float>(), out.normed.data<float>() + rows * H);
  tree_raw_.insert(tree_raw_.end(), out.raw.data<float>(), out.raw.data<float>() + rows * H);
  return absl::OkStatus();
}

}  // namespace mtpspec

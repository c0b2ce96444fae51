#include "mtp/mtp_chain_cpu.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/linear.h"

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
  if (keep_start) KeepStart(out, rows);
  return absl::OkStatus();
}

void CpuMtpBackend::KeepStart(const MtpStepOutput& out, int64_t rows) {
  const int64_t H = config().hidden_size;
  const float* normed = out.normed.data<float>() + (rows - 1) * H;
  const float* raw = out.raw.data<float>() + (rows - 1) * H;
  start_normed_.assign(normed, normed + H);
  start_raw_.assign(raw, raw + H);
  start_topk_.clear();
  if (out.topk.width > 0) start_topk_.assign(out.topk.row(rows - 1), out.topk.row(rows - 1) + out.topk.width);
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

bool CpuMtpBatch::CanJoin(const MtpChainBackend& backend) const {
  return dynamic_cast<const CpuMtpBackend*>(&backend) != nullptr;
}

absl::StatusOr<std::vector<CpuMtpBackend*>> CpuMtpBatch::Members(std::span<MtpChainBackend* const> backends,
                                                                  bool begun) {
  std::vector<CpuMtpBackend*> members;
  for (size_t i = 0; i < backends.size(); ++i) {
    auto* member = dynamic_cast<CpuMtpBackend*>(backends[i]);
    if (member == nullptr) return absl::InvalidArgumentError(absl::StrCat("MTP batch: backend ", i, " is not on the host"));
    if (!members.empty() && &member->module_->model() != &members.front()->module_->model()) {
      return absl::InvalidArgumentError(absl::StrCat("MTP batch: backend ", i, " runs another model"));
    }
    if (begun && member->chained_normed_.empty()) return absl::InternalError("MTP batch: a chain has not begun");
    members.push_back(member);
  }
  if (members.empty()) return absl::InvalidArgumentError("MTP batch: no backends");
  return members;
}

absl::StatusOr<std::vector<MtpHeadRow*>> CpuMtpBatch::Heads(std::span<MtpChainBackend* const> backends) {
  ASSIGN_OR_RETURN(std::vector<CpuMtpBackend*> members, Members(backends));
  const int64_t H = members[0]->config().hidden_size, V = members[0]->config().vocab_size;
  const int64_t rows = static_cast<int64_t>(members.size());
  std::vector<float> normed(rows * H);  // [rows, H] each chain's chained state
  for (int64_t r = 0; r < rows; ++r) std::copy_n(members[r]->chained_normed_.data(), H, normed.data() + r * H);
  Tensor logits;  // [rows, V]
  {
    const RowInvariantScope row_invariant;  // each row's bits as in its own Head
    logits = members[0]->module_->Logits(normed.data(), rows);
  }
  std::vector<MtpHeadRow*> heads;
  for (int64_t r = 0; r < rows; ++r) {
    members[r]->head_.values = Tensor::Empty(DType::kF32, {1, V});
    std::copy_n(logits.data<float>() + r * V, V, members[r]->head_.values.data<float>());
    heads.push_back(&members[r]->head_);
  }
  return heads;
}

absl::Status CpuMtpBatch::Steps(std::span<MtpChainBackend* const> backends, std::span<const int32_t> tokens,
                                std::span<const int64_t> positions, const MtpOptions& options) {
  ASSIGN_OR_RETURN(std::vector<CpuMtpBackend*> members, Members(backends));
  if (tokens.size() != members.size() || positions.size() != members.size()) {
    return absl::InvalidArgumentError("MTP batch: one token and one position per backend");
  }
  const int64_t H = members[0]->config().hidden_size;
  std::vector<MtpSegment> segments;
  for (size_t i = 0; i < members.size(); ++i) {
    CpuMtpBackend& m = *members[i];
    const std::vector<float>& input = options.chain == MtpChain::kNormed ? m.chained_normed_ : m.chained_raw_;  // [H]
    MtpSegment& segment = segments.emplace_back();
    segment.cache = m.cache_.get();
    segment.hidden = input.data();
    segment.tokens = tokens.subspan(i, 1);
    segment.positions = positions.subspan(i, 1);
  }
  std::vector<MtpStepOutput> out;
  {
    const RowInvariantScope row_invariant;  // each chain's bits as in its own Step
    ASSIGN_OR_RETURN(out, members[0]->module_->ExtendBatch(segments, options));
  }
  for (size_t i = 0; i < members.size(); ++i) {
    std::copy_n(out[i].normed.data<float>(), H, members[i]->chained_normed_.begin());
    std::copy_n(out[i].raw.data<float>(), H, members[i]->chained_raw_.begin());
  }
  return absl::OkStatus();
}

absl::Status CpuMtpBatch::Extends(std::span<MtpChainBackend* const> backends,
                                  std::span<const std::span<const int32_t>> tokens,
                                  std::span<const int64_t> first_positions, const MtpOptions& options) {
  ASSIGN_OR_RETURN(std::vector<CpuMtpBackend*> members, Members(backends, /*begun=*/false));
  if (tokens.size() != members.size() || first_positions.size() != members.size()) {
    return absl::InvalidArgumentError("MTP batch: one token list and one first position per backend");
  }
  const int64_t H = members[0]->config().hidden_size;
  std::vector<std::vector<int64_t>> positions(members.size());  // [backends][rows]
  std::vector<MtpSegment> segments;
  for (size_t i = 0; i < members.size(); ++i) {
    const int64_t rows = static_cast<int64_t>(tokens[i].size());
    if (rows < 1 || rows >= kLinearGemmRows) {
      return absl::InvalidArgumentError(absl::StrCat("MTP batch: backend ", i, " extends ", rows, " rows; 1 to ",
                                                     kLinearGemmRows - 1, " keep their per-row bits"));
    }
    if (rows * H > static_cast<int64_t>(members[i]->queued_hidden_.size())) {
      return absl::InternalError("MTP drafter: extend past the queued hidden rows");
    }
    for (int64_t r = 0; r < rows; ++r) positions[i].push_back(first_positions[i] + r);
    MtpSegment& segment = segments.emplace_back();
    segment.cache = members[i]->cache_.get();
    segment.hidden = members[i]->queued_hidden_.data();  // [rows, H]
    segment.tokens = tokens[i];
    segment.positions = positions[i];
  }
  std::vector<MtpStepOutput> out;
  {
    const RowInvariantScope row_invariant;  // each chain's bits as in its own Extend
    ASSIGN_OR_RETURN(out, members[0]->module_->ExtendBatch(segments, options));
  }
  for (size_t i = 0; i < members.size(); ++i) members[i]->KeepStart(out[i], static_cast<int64_t>(tokens[i].size()));
  return absl::OkStatus();
}

}  // namespace mtpspec

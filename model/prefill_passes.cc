#include "model/prefill_passes.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mtpspec {
namespace {

// Copies `from`'s row `from_row` into `to`'s row `to_row` (both [rows, width] f32).
void CopyRow(const Tensor& from, int64_t from_row, Tensor& to, int64_t to_row) {
  const int64_t width = to.dim(1);
  std::copy_n(from.data<float>() + from_row * width, width, to.data<float>() + to_row * width);
}

}  // namespace

absl::StatusOr<ForwardOutput> ForwardInPasses(const Model& model, KvCache& cache, std::span<const int32_t> tokens,
                                              std::span<const int64_t> positions, const ForwardOptions& options,
                                              int64_t pass_rows) {
  if (pass_rows < 1) {
    return absl::InvalidArgumentError(absl::StrCat("ForwardInPasses: pass_rows must be >= 1, got ", pass_rows));
  }
  const int64_t rows = static_cast<int64_t>(tokens.size());
  if (rows <= pass_rows) return model.Forward(cache, tokens, positions, options);
  if (static_cast<int64_t>(positions.size()) != rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("ForwardInPasses: ", rows, " tokens but ", positions.size(), " positions"));
  }
  if (options.capture_topk) {
    return absl::InvalidArgumentError(absl::StrCat("ForwardInPasses: capturing the indexer's selection needs one pass; ",
                                                   rows, " rows exceed the pass size ", pass_rows));
  }
  for (int64_t row : options.logit_rows) {
    if (row < 0 || row >= rows) {
      return absl::InvalidArgumentError(absl::StrCat("logit row ", row, " is outside the call's ", rows, " rows"));
    }
  }
  const bool every_row = options.logit_rows.empty();
  const int64_t hidden = model.config().hidden_size, vocab = model.config().vocab_size;
  const int64_t logit_count = every_row ? rows : static_cast<int64_t>(options.logit_rows.size());
  ForwardOutput all;
  all.hidden_postnorm = Tensor::Empty(DType::kF32, {rows, hidden});  // [rows, H]
  all.hidden_prenorm = Tensor::Empty(DType::kF32, {rows, hidden});   // [rows, H]
  all.logits = Tensor::Empty(DType::kF32, {logit_count, vocab});     // [R, V]
  for (int64_t first = 0; first < rows; first += pass_rows) {
    const int64_t n = std::min(pass_rows, rows - first);
    ForwardOptions pass = options;
    std::vector<int64_t> wanted;  // indices into options.logit_rows that fall in this pass
    if (!every_row) {
      pass.logit_rows.clear();
      for (size_t j = 0; j < options.logit_rows.size(); ++j) {
        const int64_t row = options.logit_rows[j];
        if (row < first || row >= first + n) continue;
        wanted.push_back(static_cast<int64_t>(j));
        pass.logit_rows.push_back(row - first);
      }
      if (pass.logit_rows.empty()) pass.logit_rows = {n - 1};  // one head row, not read
    }
    ASSIGN_OR_RETURN(ForwardOutput out, model.Forward(cache, tokens.subspan(first, n), positions.subspan(first, n), pass));
    for (int64_t r = 0; r < n; ++r) {
      CopyRow(out.hidden_postnorm, r, all.hidden_postnorm, first + r);
      CopyRow(out.hidden_prenorm, r, all.hidden_prenorm, first + r);
    }
    if (every_row) {
      for (int64_t r = 0; r < n; ++r) CopyRow(out.logits, r, all.logits, first + r);
    } else {
      for (size_t m = 0; m < wanted.size(); ++m) CopyRow(out.logits, static_cast<int64_t>(m), all.logits, wanted[m]);
    }
    all.paths = std::move(out.paths);  // the last pass's paths
  }
  return all;
}

}  // namespace mtpspec

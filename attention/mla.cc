#include "attention/mla.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "attention/mla_bf16.h"
#include "kernels/linear.h"
#include "core/parallel.h"
#include "kernels/row_kernels.h"
#include "core/status.h"

namespace mtpspec {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Everything one call needs, with the per-row query pieces laid out once.
struct QueryBlock {
  int64_t rows = 0;
  const float* q = nullptr;  // [rows, N_h, d_n + d_r]; rope part already rotated
};

// Which keys each row of a call may use: in range, and causal (j ≤ the row's position) or, with a
// tree, visible to the row (the committed context and the row's own path).
struct KeyRule {
  const int64_t* positions = nullptr;  // [rows]
  int64_t num_keys = 0;                // T
  const TreeMask* tree = nullptr;
  // The row's own slot: the last key it may see.
  int64_t OwnSlot(int64_t r) const { return tree ? tree->slots[r] : positions[r]; }
  // Keys [0, Reach(r)) are the only ones row r may see.
  int64_t Reach(int64_t r) const { return std::min(OwnSlot(r), num_keys - 1) + 1; }
  bool Valid(int64_t r, int64_t j) const {
    if (j < 0 || j >= num_keys) return false;
    return tree ? tree->Visible(r, j) : j <= positions[r];
  }
};

// Rows first, first+1, ... of a 2-D weight as the row kernels read them: pointers to f32 or bf16
// elements (Row = const float* or const uint16_t*), or FP8 rows with their block scales.
template <typename Row>
std::vector<Row> WeightRows(const TensorView& w, int64_t first, int64_t count) {
  std::vector<Row> rows(count);
  for (int64_t i = 0; i < count; ++i) {
    if constexpr (std::is_same_v<Row, Fp8ScaledRow>) {
      rows[i] = {w.as<uint8_t>() + (first + i) * w.stride[0], w.block_scale + ((first + i) / kFp8Block) * w.scale_stride};
    } else {
      rows[i] = static_cast<Row>(w.data) + (first + i) * w.stride[0];
    }
  }
  return rows;
}

// Absorbed form (§3.4) for heads [h_begin, h_end) of every row; Row is how the row kernels read
// kv_b_proj's rows (f32, bf16 or FP8, WeightRows).
// keys[r] lists row r's usable keys. Per row and head: fold W_UK into the query, score the keys
// (one product over the whole [keys, r_kv + d_r] block), softmax, combine the latents into z, and
// un-absorb through W_UV. All products are DotRows / CombineRows, whose per-element order does not
// depend on the head range or the number of rows, so a row's output never does either.
// With an fp8 cache each thread lays out the row's keys for the bf16 products itself
// (attention/mla_bf16.h): a layout shared between the threads would be read from the other core's
// cache by every thread, which on this kind of host sometimes costs more than the layout itself.
template <typename Row>
void AttendAbsorbedHeads(const MlaWeights& w, const MlaDims& dims, const QueryBlock& qb, const LayerKvCache& cache,
                         const std::vector<std::vector<int32_t>>& keys, int64_t h_begin, int64_t h_end,
                         float* o /*[rows, N_h·d_v]*/) {
  const int64_t rows = qb.rows, nh = dims.heads, r_kv = dims.kv_lora, d_r = dims.rope_dim;
  const int64_t d_n = dims.nope_dim, d_qk = d_n + d_r, d_v = dims.v_dim;
  const int64_t heads = h_end - h_begin;
  // q_lat^h = (W_UK^h)ᵀ q_nope^h for every row: each head's d_n rows of kv_b_proj combined.
  std::vector<float> q_lat(rows * heads * r_kv);  // [rows, heads, r_kv]
  for (int64_t h = h_begin; h < h_end; ++h) {
    const std::vector<Row> w_uk = WeightRows<Row>(w.kv_b_proj, h * (d_n + d_v), d_n);
    CombineRows(qb.q + h * d_qk, rows, nh * d_qk, w_uk.data(), d_n, r_kv,
                q_lat.data() + (h - h_begin) * r_kv, heads * r_kv);
  }
  std::vector<float> z(rows * heads * r_kv);  // [rows, heads, r_kv] softmax-weighted latents
  std::vector<float> scores;                  // [heads, n] for one row
  std::vector<float> dequantised;             // [n, r_kv] (int8 cache only)
  std::vector<const float*> latent_rows, rope_rows;  // [n] the row's selected cache slots
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = static_cast<int64_t>(keys[r].size());
    float* z_row = z.data() + r * heads * r_kv;
    if (n == 0) {
      std::fill(z_row, z_row + heads * r_kv, 0.0f);
      continue;
    }
    if (cache.fp8()) {
      thread_local Bf16KeyBlock block;  // this thread's layout of the row's keys
      GatherBf16Keys(cache, keys[r], &block);
      AttendBf16Keys(q_lat.data() + r * heads * r_kv, qb.q + (r * nh + h_begin) * d_qk + d_n, d_qk, heads, r_kv, d_r,
                     dims.softmax_scale, block, z_row);
      continue;
    }
    const float* rope_key = cache.rope_key.data<float>();  // [capacity, d_r]
    latent_rows.resize(n);
    rope_rows.resize(n);
    if (cache.int8()) dequantised.resize(n * r_kv);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t j = keys[r][k];
      if (cache.int8()) {
        cache.LoadLatent(j, dequantised.data() + k * r_kv);
        latent_rows[k] = dequantised.data() + k * r_kv;
      } else {
        latent_rows[k] = cache.latent.data<float>() + j * r_kv;
      }
      rope_rows[k] = rope_key + j * d_r;
    }
    // scores[h, k] = scale · (q_lat^h · c_k + q_rope^h · k_r_k)
    scores.resize(heads * n);
    DotRows(q_lat.data() + r * heads * r_kv, heads, r_kv, latent_rows.data(), n, r_kv, scores.data(), n);
    DotRows(qb.q + (r * nh + h_begin) * d_qk + d_n, heads, d_qk, rope_rows.data(), n, d_r, scores.data(), n,
            /*accumulate=*/true);
    for (int64_t h = 0; h < heads; ++h) {
      float* s = scores.data() + h * n;
      for (int64_t k = 0; k < n; ++k) s[k] *= dims.softmax_scale;
      SoftmaxInPlace(s, n);
    }
    // z^h = Σ_k p[h, k] · c_k
    CombineRows(scores.data(), heads, n, latent_rows.data(), n, r_kv, z_row, r_kv);
  }
  // Un-absorb: o^h[v] = W_UV^h[v, :] · z^h, for every row at once.
  for (int64_t h = h_begin; h < h_end; ++h) {
    const std::vector<Row> w_uv = WeightRows<Row>(w.kv_b_proj, h * (d_n + d_v) + d_n, d_v);
    DotRows(z.data() + (h - h_begin) * r_kv, rows, heads * r_kv, w_uv.data(), d_v, r_kv, o + h * d_v, nh * d_v);
  }
}

// Absorbed form (§3.4) over an explicit key list per row; keys_of(r) returns {pointer, count}.
// Entries that are out of range or not causal for the row (−1 fillers, future keys of a verify
// row) are dropped before attending: the re-mask. Dropping a key gives exactly what a −∞ score
// would, since its softmax weight would be exactly 0. One parallel region, split by head.
template <typename KeysOf>
void AttendAbsorbed(const MlaWeights& w, const MlaDims& dims, const QueryBlock& qb, const LayerKvCache& cache,
                    const KeyRule& rule, KeysOf keys_of, float* o /*[rows, N_h·d_v]*/) {
  std::vector<std::vector<int32_t>> keys(qb.rows);  // [rows][≤ K] usable keys, in the given order
  for (int64_t r = 0; r < qb.rows; ++r) {
    const auto [list, n] = keys_of(r);
    keys[r].reserve(n);
    for (int64_t k = 0; k < n; ++k) {
      if (rule.Valid(r, list[k])) keys[r].push_back(list[k]);
    }
  }
  DefaultThreadPool().ParallelFor(dims.heads, 1, [&](int64_t begin, int64_t end) {
    if (w.kv_b_proj.dtype == DType::kBF16) {
      AttendAbsorbedHeads<const uint16_t*>(w, dims, qb, cache, keys, begin, end, o);
    } else if (w.kv_b_proj.dtype == DType::kF8E4M3) {
      MTPSPEC_CHECK(w.kv_b_proj.block_scale != nullptr);
      AttendAbsorbedHeads<Fp8ScaledRow>(w, dims, qb, cache, keys, begin, end, o);
    } else {
      MTPSPEC_CHECK(w.kv_b_proj.dtype == DType::kF32);
      AttendAbsorbedHeads<const float*>(w, dims, qb, cache, keys, begin, end, o);
    }
  });
}

// Naive form (§3.2): expand k_nope and v for keys [0, num_keys) through kv_b_proj, then attend
// head by head with matrix products: S = q_nope·k_nopeᵀ + q_rope·k_ropeᵀ over a block of rows and
// the keys the block can reach, masked (−∞ where the key is invalid for the row or not allowed),
// softmax per row, O = P·v. allowed(r, j) says whether row r may attend key j (causality and trees
// are checked here as well). Prefill only: the products' summation order follows Eigen's blocking.
template <typename Allowed>
void AttendNaive(const MlaWeights& w, const MlaDims& dims, const QueryBlock& qb, const LayerKvCache& cache,
                 const KeyRule& rule, Allowed allowed, float* o /*[rows, N_h·d_v]*/) {
  using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ConstStrided = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;
  using Strided = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;
  const int64_t num_keys = rule.num_keys, rows = qb.rows;
  const int64_t nh = dims.heads, d_r = dims.rope_dim, d_n = dims.nope_dim, d_v = dims.v_dim;
  const int64_t d_qk = d_n + d_r, kv_width = nh * (d_n + d_v);
  std::vector<float> expanded(num_keys * kv_width);  // [T, N_h, d_n + d_v]
  const float* latent_rows = cache.latent.data<float>();  // [T, r_kv]
  std::vector<float> widened;                             // [T, r_kv] (int8 and fp8 caches)
  if (cache.int8() || cache.fp8()) {  // the expansion reads every row once: widen them first
    widened.resize(num_keys * dims.kv_lora);
    for (int64_t j = 0; j < num_keys; ++j) cache.LoadLatent(j, widened.data() + j * dims.kv_lora);
    latent_rows = widened.data();
  }
  Linear(latent_rows, num_keys, w.kv_b_proj, expanded.data());
  const float* rope_key = cache.rope_key.data<float>();  // [capacity, d_r]
  std::vector<float> widened_rope;                       // [T, d_r] (fp8 cache: its bf16 rope keys)
  if (cache.rope_key.dtype() != DType::kF32) {
    widened_rope.resize(num_keys * d_r);
    for (int64_t j = 0; j < num_keys; ++j) cache.LoadRopeKey(j, widened_rope.data() + j * d_r);
    rope_key = widened_rope.data();
  }
  // Row blocks: a block's products reach the keys up to its last row's own slot only (a chain's
  // rows see more keys row by row), so short blocks waste little on the causal triangle.
  constexpr int64_t kRowBlock = kNaiveRowBlock;
  DefaultThreadPool().ParallelFor(nh, 1, [&](int64_t h_begin, int64_t h_end) {
    std::vector<float> scores;  // [block rows, reach]
    for (int64_t h = h_begin; h < h_end; ++h) {
      const ConstStrided k_nope(expanded.data() + h * (d_n + d_v), num_keys, d_n, Eigen::OuterStride<>(kv_width));
      const ConstStrided v(expanded.data() + h * (d_n + d_v) + d_n, num_keys, d_v, Eigen::OuterStride<>(kv_width));
      const ConstStrided k_rope(rope_key, num_keys, d_r, Eigen::OuterStride<>(d_r));
      for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
        const int64_t nr = std::min(kRowBlock, rows - r0);
        int64_t reach = 0;  // keys [0, reach) are the only ones any row of the block may see
        for (int64_t r = r0; r < r0 + nr; ++r) reach = std::max(reach, rule.Reach(r));
        const ConstStrided q_nope(qb.q + (r0 * nh + h) * d_qk, nr, d_n, Eigen::OuterStride<>(nh * d_qk));
        const ConstStrided q_rope(qb.q + (r0 * nh + h) * d_qk + d_n, nr, d_r, Eigen::OuterStride<>(nh * d_qk));
        scores.resize(nr * reach);
        Eigen::Map<RowMatrix> s(scores.data(), nr, reach);  // [nr, reach]
        s.noalias() = q_nope * k_nope.topRows(reach).transpose();
        s.noalias() += q_rope * k_rope.topRows(reach).transpose();
        for (int64_t i = 0; i < nr; ++i) {
          float* row = scores.data() + i * reach;
          for (int64_t j = 0; j < reach; ++j) {
            row[j] = rule.Valid(r0 + i, j) && allowed(r0 + i, j) ? dims.softmax_scale * row[j] : kNegInf;
          }
          if (!SoftmaxInPlace(row, reach)) std::fill(row, row + reach, 0.0f);  // no key: o = 0
        }
        Strided o_head(o + r0 * nh * d_v + h * d_v, nr, d_v, Eigen::OuterStride<>(nh * d_v));  // [nr, d_v]
        o_head.noalias() = s * v.topRows(reach);
      }
    }
  });
}

}  // namespace

const char* AttentionPathName(AttentionPath path) {
  switch (path) {
    case AttentionPath::kAuto: return "auto";
    case AttentionPath::kDense: return "dense";
    case AttentionPath::kMask: return "mask";
    case AttentionPath::kGather: return "gather";
  }
  return "?";
}

absl::StatusOr<AttentionPath> ChooseAttentionPath(int64_t num_keys, int64_t index_topk, int64_t rows,
                                                 const AttentionOptions& options) {
  AttentionPath path = options.path;
  if (path == AttentionPath::kAuto) {
    path = num_keys <= index_topk
               ? AttentionPath::kDense
               : (rows <= options.gather_max_rows ? AttentionPath::kGather : AttentionPath::kMask);
  }
  if (path == AttentionPath::kDense && num_keys > index_topk) {
    return absl::InvalidArgumentError(absl::StrCat("attention path dense needs T <= index_topk, got T = ", num_keys,
                                                   " > ", index_topk));
  }
  return path;
}

AttentionFormCost AttentionFormCosts(const MlaDims& dims, int64_t num_keys, std::span<const int64_t> reach,
                                     int64_t index_topk) {
  const double per_weight_pass = static_cast<double>(dims.heads * (dims.nope_dim + dims.v_dim) * dims.kv_lora);
  const double naive_per_key = static_cast<double>(dims.heads * (dims.nope_dim + dims.rope_dim + dims.v_dim));
  const double absorbed_per_key = static_cast<double>(dims.heads * (2 * dims.kv_lora + dims.rope_dim));
  const int64_t rows = static_cast<int64_t>(reach.size());
  AttentionFormCost cost;
  cost.naive = static_cast<double>(num_keys) * per_weight_pass;
  cost.absorbed = static_cast<double>(rows) * per_weight_pass;
  for (int64_t r0 = 0; r0 < rows; r0 += kNaiveRowBlock) {
    const int64_t r1 = std::min(rows, r0 + kNaiveRowBlock);
    const int64_t block_reach = *std::max_element(reach.begin() + r0, reach.begin() + r1);
    cost.naive += static_cast<double>((r1 - r0) * block_reach) * naive_per_key;
  }
  for (const int64_t keys : reach) {
    const int64_t used = index_topk > 0 ? std::min(keys, index_topk) : keys;
    cost.absorbed += static_cast<double>(used) * absorbed_per_key;
  }
  return cost;
}

absl::StatusOr<MlaStepResult> MlaForward(const MlaWeights& w, const MlaDims& dims, const RotaryEmbedding& rope,
                                         const float* x, int64_t rows, const int64_t* positions,
                                         LayerKvCache& cache, int64_t capacity, const AttentionOptions& options,
                                         TopK* topk, float* out) {
  MlaSegment segment;
  segment.rows = rows;
  segment.positions = positions;
  segment.cache = &cache;
  segment.capacity = capacity;
  segment.tree = options.tree;
  segment.topk = topk;
  RETURN_IF_ERROR(MlaForwardSegments(w, dims, rope, x, std::span<MlaSegment>(&segment, 1), options, out));
  MlaStepResult result;
  result.path_used = segment.path_used;
  return result;
}

namespace {

// The indexer's two steps on a layer's cache, with its keys in whichever storage the cache keeps them
// (f32, bf16 or e4m3 with scales: attention/indexer.h).
void StoreIndexKeys(const IndexerWeights& w, const IndexerDims& dims, const RotaryEmbedding& rope, float* keys,
                    int64_t rows, const int64_t* positions, LayerKvCache& cache, const TreeMask* tree) {
  switch (cache.index_key.dtype()) {
    case DType::kBF16:
      return IndexerStoreKeys(w, dims, rope, keys, rows, positions, cache.index_key.data<uint16_t>(), tree);
    case DType::kF8E4M3:
      return IndexerStoreKeys(w, dims, rope, keys, rows, positions, cache.index_key.data<uint8_t>(),
                              cache.index_key_scale.data<float>(), tree);
    default:
      return IndexerStoreKeys(w, dims, rope, keys, rows, positions, cache.index_key.data<float>(), tree);
  }
}
void ScoreIndexKeys(const IndexerDims& dims, const RotaryEmbedding& rope, float* q, float* head_weights, int64_t rows,
                    const int64_t* positions, const LayerKvCache& cache, int64_t num_keys, float* scores,
                    const TreeMask* tree) {
  switch (cache.index_key.dtype()) {
    case DType::kBF16:
      return IndexerScoresFromProjections(dims, rope, q, head_weights, rows, positions,
                                          cache.index_key.data<uint16_t>(), num_keys, scores, tree);
    case DType::kF8E4M3:
      return IndexerScoresFromProjections(dims, rope, q, head_weights, rows, positions, cache.index_key.data<uint8_t>(),
                                          cache.index_key_scale.data<float>(), num_keys, scores, tree);
    default:
      return IndexerScoresFromProjections(dims, rope, q, head_weights, rows, positions, cache.index_key.data<float>(),
                                          num_keys, scores, tree);
  }
}

// One segment's attention (after the projections): RoPE on its queries, its keys into its cache,
// its selection, and its rows of o. The projections are rotated and scaled in place. q: [rows, N_h, d_qk] (rotated here); kv: [rows, r_kv + d_r];
// index_keys: [rows, d_I] on full layers; index_q, index_weights: [rows, N_I·d_I], [rows, N_I]
// when `scored`; o: [rows, N_h·d_v].
absl::Status AttendSegment(const MlaWeights& w, const MlaDims& dims, const RotaryEmbedding& rope,
                           const AttentionOptions& options, MlaSegment& segment, float* q, const float* kv,
                           float* index_keys, float* index_q, float* index_weights, bool scored, float* o) {
  const int64_t rows = segment.rows;
  const int64_t* positions = segment.positions;
  const TreeMask* tree = segment.tree;
  LayerKvCache& cache = *segment.cache;
  TopK* topk = segment.topk;
  if (tree) {
    MTPSPEC_CHECK(tree->rows() == rows);
  } else {
    for (int64_t r = 1; r < rows; ++r) MTPSPEC_CHECK(positions[r] == positions[0] + r);
  }
  const int64_t num_keys = tree ? tree->num_slots() : positions[rows - 1] + 1;  // T
  MTPSPEC_CHECK(num_keys <= segment.capacity);
  const KeyRule rule{positions, num_keys, tree};
  const int64_t nh = dims.heads, r_kv = dims.kv_lora, d_r = dims.rope_dim;
  const int64_t d_qk = dims.nope_dim + d_r;
  const int64_t k_top = dims.indexer.topk;
  ASSIGN_OR_RETURN(const AttentionPath path, ChooseAttentionPath(num_keys, k_top, rows, options));
  segment.path_used = path;
  const bool use_given_topk = !w.indexer.has_value() || options.reuse_topk;
  const bool score_keys = !use_given_topk && path != AttentionPath::kDense;
  MTPSPEC_CHECK(!score_keys || scored);
  ForwardProfile* profile = options.profile;

  std::optional<ScopedTimer> projection_timer(std::in_place, profile, Component::kAttentionProjections);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < nh; ++h) rope.Apply(q + (r * nh + h) * d_qk + dims.nope_dim, positions[r], dims.rope_style);
  }
  // Latent and rope key of the new tokens go straight into the cache.
  std::vector<float> c(r_kv);   // [r_kv] normalized latent of one token
  std::vector<float> kr(d_r);   // [d_r] its rotated rope key
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = kv + r * (r_kv + d_r);
    RmsNorm(row, w.kv_a_norm.data<float>(), r_kv, dims.latent_norm_eps, c.data());
    cache.StoreLatent(rule.OwnSlot(r), c.data());
    std::copy(row + r_kv, row + r_kv + d_r, kr.data());
    rope.Apply(kr.data(), positions[r], dims.rope_style);
    cache.StoreRopeKey(rule.OwnSlot(r), kr.data());
  }
  projection_timer.reset();

  // Selection: full layers run their indexer; shared layers received the donor's top-k.
  if (w.indexer.has_value()) {
    ScopedTimer timer(profile, Component::kIndexerScores);
    StoreIndexKeys(*w.indexer, dims.indexer, rope, index_keys, rows, positions, cache, tree);
  }
  if (!use_given_topk) {
    if (score_keys) {
      std::vector<float> scores(rows * num_keys);  // [rows, T]
      {
        ScopedTimer timer(profile, Component::kIndexerScores);
        ScoreIndexKeys(dims.indexer, rope, index_q, index_weights, rows, positions, cache, num_keys, scores.data(),
                       tree);
      }
      ScopedTimer timer(profile, Component::kTopK);
      *topk = SelectTopK(scores.data(), rows, num_keys, k_top, positions, tree);
    } else {
      *topk = AllCausalKeys(rows, num_keys, positions, tree);
    }
  } else if (path != AttentionPath::kDense) {
    if (topk == nullptr || topk->width <= 0 || static_cast<int64_t>(topk->selected.size()) != rows * topk->width) {
      return absl::InternalError("DSA layer called without a top-k selection for these rows (shared layer without donor, or reuse_topk without a selection)");
    }
  }

  ScopedTimer attention_timer(profile, Component::kAttention);
  AttentionForm form = options.form;
  if (path == AttentionPath::kGather) form = AttentionForm::kAbsorbed;
  if (form == AttentionForm::kAuto) {
    form = AttentionForm::kAbsorbed;  // row-independent: verify blocks and batched verifies
    if (rows > options.gather_max_rows && !RowInvariantActive()) {
      std::vector<int64_t> reach(rows);  // [rows]
      for (int64_t r = 0; r < rows; ++r) reach[r] = rule.Reach(r);
      const AttentionFormCost cost =
          AttentionFormCosts(dims, num_keys, reach, path == AttentionPath::kDense ? 0 : k_top);
      if (cost.naive < cost.absorbed) form = AttentionForm::kNaive;
    }
  }
  QueryBlock qb;
  qb.rows = rows;
  qb.q = q;
  if (path == AttentionPath::kDense) {
    std::vector<int32_t> all_keys(num_keys);
    for (int64_t j = 0; j < num_keys; ++j) all_keys[j] = static_cast<int32_t>(j);
    if (form == AttentionForm::kAbsorbed) {
      AttendAbsorbed(w, dims, qb, cache, rule,
                     [&](int64_t r) { return std::pair<const int32_t*, int64_t>(all_keys.data(), rule.OwnSlot(r) + 1); },
                     o);
    } else {
      AttendNaive(w, dims, qb, cache, rule, [](int64_t, int64_t) { return true; }, o);
    }
  } else if (path == AttentionPath::kGather) {
    AttendAbsorbed(w, dims, qb, cache, rule,
                   [&](int64_t r) { return std::pair<const int32_t*, int64_t>(topk->row(r), topk->width); }, o);
  } else {  // mask
    std::vector<uint8_t> selected(rows * num_keys, 0);  // [rows, T]
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < topk->width; ++k) {
        const int32_t j = topk->row(r)[k];
        if (j >= 0 && j < num_keys) selected[r * num_keys + j] = 1;
      }
    }
    if (form == AttentionForm::kAbsorbed) {
      std::vector<int32_t> masked_keys(rows * num_keys);  // [rows, T]: key j, or −1 when not selected
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < num_keys; ++j) masked_keys[r * num_keys + j] = selected[r * num_keys + j] ? j : -1;
      }
      AttendAbsorbed(w, dims, qb, cache, rule,
                     [&](int64_t r) {
                       return std::pair<const int32_t*, int64_t>(masked_keys.data() + r * num_keys, num_keys);
                     },
                     o);
    } else {
      AttendNaive(w, dims, qb, cache, rule,
                  [&](int64_t r, int64_t j) { return selected[r * num_keys + j] != 0; }, o);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MlaForwardSegments(const MlaWeights& w, const MlaDims& dims, const RotaryEmbedding& rope, const float* x,
                                std::span<MlaSegment> segments, const AttentionOptions& options, float* out) {
  int64_t rows = 0;  // all segments'
  bool score_any = false;
  const bool use_given_topk = !w.indexer.has_value() || options.reuse_topk;
  for (const MlaSegment& segment : segments) {
    MTPSPEC_CHECK(segment.rows > 0 && segment.cache != nullptr);
    rows += segment.rows;
    const int64_t num_keys = segment.tree ? segment.tree->num_slots() : segment.positions[segment.rows - 1] + 1;
    ASSIGN_OR_RETURN(const AttentionPath path, ChooseAttentionPath(num_keys, dims.indexer.topk, segment.rows, options));
    score_any = score_any || (!use_given_topk && path != AttentionPath::kDense);
  }
  const int64_t nh = dims.heads, r_q = dims.q_lora, r_kv = dims.kv_lora, d_r = dims.rope_dim;
  const int64_t d_qk = dims.nope_dim + d_r, d_v = dims.v_dim;
  const int64_t n_i = dims.indexer.n_heads, d_i = dims.indexer.head_dim;

  ForwardProfile* profile = options.profile;
  std::optional<ScopedTimer> projection_timer(std::in_place, profile, Component::kAttentionProjections);
  // Every projection of x in one parallel region (then those of c_q in a second), over the rows of
  // every segment: the query latent, the key latent + rope key, and on full layers the indexer key
  // and head weights. Each row's result does not depend on the other rows (kernels/linear.h).
  std::vector<float> q_latent(rows * r_q);      // [rows, r_q]
  std::vector<float> kv(rows * (r_kv + d_r));   // [rows, r_kv + d_r]
  std::vector<float> index_keys;                // [rows, d_I] full layers
  std::vector<float> index_q, index_weights;    // [rows, N_I·d_I], [rows, N_I] when a segment scores keys
  std::vector<LinearJob> jobs = {{x, rows, w.q_a_proj, q_latent.data()}, {x, rows, w.kv_a_proj, kv.data()}};
  if (w.indexer.has_value()) {
    index_keys.resize(rows * d_i);
    jobs.push_back({x, rows, w.indexer->wk, index_keys.data()});
  }
  if (score_any) {
    index_weights.resize(rows * n_i);
    jobs.push_back({x, rows, w.indexer->weights_proj, index_weights.data()});
  }
  LinearBatch(jobs);

  // Query: c_q = RMSNorm(W_qa x); q = W_qb c_q (RoPE per segment, at its positions).
  for (int64_t r = 0; r < rows; ++r) {
    float* row = q_latent.data() + r * r_q;
    RmsNorm(row, w.q_a_norm.data<float>(), r_q, dims.latent_norm_eps, row);
  }
  std::vector<float> q(rows * nh * d_qk);  // [rows, N_h, d_qk]
  jobs = {{q_latent.data(), rows, w.q_b_proj, q.data()}};
  if (score_any) {
    index_q.resize(rows * n_i * d_i);
    jobs.push_back({q_latent.data(), rows, w.indexer->wq_b, index_q.data()});
  }
  LinearBatch(jobs);
  projection_timer.reset();

  // Block-diagonal attention: each segment attends over its own cache only.
  std::vector<float> o(rows * nh * d_v);  // [rows, N_h·d_v]
  int64_t first = 0;                      // the segment's first row
  for (MlaSegment& segment : segments) {
    RETURN_IF_ERROR(AttendSegment(
        w, dims, rope, options, segment, q.data() + first * nh * d_qk, kv.data() + first * (r_kv + d_r),
        index_keys.empty() ? nullptr : index_keys.data() + first * d_i,
        score_any ? index_q.data() + first * n_i * d_i : nullptr,
        score_any ? index_weights.data() + first * n_i : nullptr, score_any, o.data() + first * nh * d_v));
    first += segment.rows;
  }
  ScopedTimer timer(profile, Component::kAttentionProjections);
  Linear(o.data(), rows, w.o_proj, out);
  return absl::OkStatus();
}

}  // namespace mtpspec

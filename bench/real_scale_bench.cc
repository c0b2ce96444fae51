// real_scale_bench: the costs of decoding and verifying at a release's real dimensions, layer by
// layer, on a checkpoint cut from it (`mtpspec make-checkpoint --like glm-5.2 --layers 4 --experts
// 32`): FP8 weights used as stored, real hidden size, heads, latent, indexer and expert shapes.
//
// For each context N the caches are filled with random rows (FillCacheRandom; a 128K prefill at
// real dimensions would take hours and the values do not change a step's bytes or multiply-adds),
// then for L = 1 … max_rows rows at positions N … N + L − 1, interleaved over repetitions:
//   * every trunk layer on its own (DecoderLayerForward), with its component split;
//   * the head (final norm + lm_head) over L rows;
//   * the MTP layer: its extend of L rows (no head), and at L = 1 one draft step with the head;
//   * the whole model (Model::Forward over L rows), which the sum of the parts must predict, and
//     the model truncated to its first n layers (ForwardOptions::trunk_layers, n in --prefix-layers),
//     which the sum of those layers' parts must predict, measured in the same interleaved run;
//   * the routed experts each MoE layer's rows chose between them (the union the layer read).
// Each repetition's parts and forwards run the same random tokens, so they route the same experts;
// which of the two runs first alternates, and each repetition starts by measuring the read
// bandwidth, so its one-row forward can be compared with the memory's speed of that minute.
// Optionally (--e2e N,...) Generate runs plain decoding and MTP k = 1 … 4 with SYNTHETIC acceptance
// at --rates on the whole cut model, from a random prefix of N tokens (the target's and the MTP
// layer's caches filled with random rows), for measured speedups; each repetition runs plain and
// k = 1 … 4 in turn, so they interleave.
// At the start and the end it also measures the compute ceilings of a step's parts on this machine
// (bench/compute_ceilings.h), which the report holds the measured step against.
// bench/report/real_scale_report.py turns the JSON into the projection of the full model.
//
//   build/release/bench/real_scale_bench --model DIR [--contexts 4096,16384,65536,131072]
//       [--max-rows 8] [--reps 5] [--check-reps 0] [--e2e 4096,16384 --rates 0.88,0.75,0.58] [--json PATH]
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_format.h"
#include "bench/compute_ceilings.h"
#include "bench/e2e_speed.h"
#include "bench/prefix_target.h"
#include "bench/run_info.h"
#include "core/cli_args.h"
#include "core/parallel.h"
#include "kernels/linear.h"
#include "model/decoder_layer.h"
#include "pipeline/request.h"
#include "mtp/mtp_module.h"
#include "pipeline/mtp_drafter.h"

namespace mtpspec::bench {
namespace {

constexpr char kUsage[] = R"(real_scale_bench: per-layer decode and verify costs at a release's real dimensions.

  --model DIR         a checkpoint cut from a release (mtpspec make-checkpoint --like ...)
  --contexts LIST     N values (default 4096,16384,65536,131072)
  --max-rows L        verify rows 1..L (default 8)      --reps R (default 5, interleaved)
  --e2e LIST          also measure Generate end to end from a random prefix of N tokens, for each N
                      (default: off)
  --rates LIST        conditional acceptance a_1,a_2,... for --e2e (default 0.88,0.75,0.58)
  --new-tokens G      tokens per end-to-end run (default 32)   --e2e-reps R (default 3)
  --prefix-layers LIST  also time the model truncated to its first n layers, for each n < its layers
                      (default 2,3,4)
  --check-reps R      repetitions of L = 1, 3, 5 for the projection check alone, each timing the
                      parts and the forwards twice, parts first and last (default 0: the check
                      uses the --reps repetitions)
  --index-keys f32|bf16|fp8  how the caches keep the indexer keys (default f32; LoadOptions::index_keys)
  --activations f32|bf16|fp8  the precision of the FP8 matrices' input rows (default f32;
                      LoadOptions::activations)
  --decode-side-by-side LIST  instead of the above: only one-row decode steps at each context, for each
                      entry KEYS[:ACTIVATIONS[:LATENT]] of LIST (say f32,bf16,f32:fp8,fp8:fp8:fp8: the
                      indexer keys' storage, the input rows' precision and the latent cache's storage
                      (f32, int8 or fp8), f32 when left out; one model, switched between
                      precisions by Model::SetActivationPrecision), alternating within every one of
                      --reps repetitions, each paired with the read bandwidth measured before it
  --weights stored|fp8|bf16|f32  how the matrices are held (default stored; LoadOptions::weight_dtype)
  --stream-mib M      read-bandwidth buffer (default 1024)   --threads N   --seed S
  --json PATH         (default build/results/real_scale.json)
)";

const char* KindOf(const ModelConfig& c, int64_t l) {
  if (c.layer_is_dense[l]) return c.layer_has_indexer[l] ? "dense+full" : "dense+shared";
  return c.layer_has_indexer[l] ? "moe+full" : "moe+shared";
}

// Weight bytes one row's step reads in layer l: every attention and indexer matrix, the dense MLP
// or the router, the shared expert and k_e routed experts.
int64_t LayerRowBytes(const DecoderLayerWeights& w, const ModelConfig& c) {
  int64_t bytes = 0;
  for (const TensorView* m : {&w.attn.q_a_proj, &w.attn.q_b_proj, &w.attn.kv_a_proj, &w.attn.kv_b_proj, &w.attn.o_proj}) {
    bytes += static_cast<int64_t>(m->nbytes());
  }
  if (w.attn.indexer) {
    bytes += static_cast<int64_t>(w.attn.indexer->wq_b.nbytes() + w.attn.indexer->wk.nbytes() +
                                  w.attn.indexer->weights_proj.nbytes());
  }
  auto mlp = [](const MlpWeights& m) { return static_cast<int64_t>(m.gate.nbytes() + m.up.nbytes() + m.down.nbytes()); };
  if (w.dense_mlp) return bytes + mlp(w.mlp);
  bytes += static_cast<int64_t>(w.moe.router.nbytes());
  if (w.moe.shared) bytes += mlp(*w.moe.shared);
  return bytes + c.num_experts_per_tok * mlp(w.moe.experts[0]);
}

nlohmann::json Components(const ForwardProfile& p) {
  nlohmann::json j;
  for (int c = 0; c < static_cast<int>(Component::kCount); ++c) j[ComponentName(static_cast<Component>(c))] = p.seconds[c];
  return j;
}

struct Samples {
  std::vector<double> seconds;
  std::vector<ForwardProfile> profiles;
};

double MedianOf(const Samples& s) { return Median(s.seconds); }
nlohmann::json MedianComponents(const Samples& s) {
  ForwardProfile median;
  for (int c = 0; c < static_cast<int>(Component::kCount); ++c) {
    std::vector<double> v;
    for (const ForwardProfile& p : s.profiles) v.push_back(p.seconds[c]);
    median.seconds[c] = Median(v);
  }
  return Components(median);
}

struct ContextSamples {
  // [L][layer]
  std::vector<std::vector<Samples>> layers;
  std::vector<std::vector<std::vector<double>>> experts_used;  // [L][layer][sample] routed experts its rows chose
  std::vector<Samples> head, mtp_extend, whole;
  std::vector<std::vector<Samples>> prefix;  // [rows][prefix index]
  Samples mtp_step;  // L = 1, with the head
};

double MeanOf(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
}

// One pass of the parts (every trunk layer on its own, the head, the MTP layer) and one pass of the
// forwards (whole, then truncated to each prefix) over the same tokens.
struct PartsPass {
  std::vector<double> layer_seconds;       // [layers]
  std::vector<ForwardProfile> profiles;    // [layers]
  std::vector<double> experts_used;        // [layers] routed experts the rows chose (MoE layers)
  double head = 0, mtp_extend = 0, mtp_step = 0;
};
struct ForwardsPass {
  double whole = 0;
  std::vector<double> prefix;  // [prefixes]
};

// The L = 1, 3, 5 rows the projection check reports (those up to max_rows).
std::vector<int64_t> CheckRows(int64_t max_rows) {
  std::vector<int64_t> rows;
  for (int64_t L : {1, 3, 5}) {
    if (L <= max_rows) rows.push_back(L);
  }
  return rows;
}

// Each repetition draws L random tokens, runs them through every trunk layer on its own (timed one
// by one, from the embedding, exactly the calls Model::Forward makes), the head, the MTP layer, then
// Model::Forward of the same tokens whole and truncated (the forwards first in odd repetitions):
// the parts and the forwards of one repetition route the same experts, so repetition by repetition
// the sum of the parts is a paired prediction of the forwards ("paired" in the JSON).
// Then check_reps repetitions of L = 1, 3, 5 serve the projection check alone ("check" in the JSON):
// each times the parts, the forwards, the forwards again and the parts again (the MTP layer left
// out), and keeps the mean of each side's two passes, so a drift of the machine's speed within the
// repetition cancels to first order.
absl::StatusOr<nlohmann::json> MeasureContext(const Model& model, const MtpModule* mtp, int64_t N, int64_t max_rows,
                                              int64_t reps, int64_t check_reps, uint64_t seed,
                                              const std::vector<int64_t>& prefixes) {
  const ModelConfig& c = model.config();
  const int64_t H = c.hidden_size, layers = c.num_hidden_layers, capacity = N + max_rows + 1;
  ASSIGN_OR_RETURN(auto cache, model.NewCache(capacity));
  FillCacheRandom(*cache, N, seed);
  std::unique_ptr<KvCache> mtp_cache;
  if (mtp != nullptr) {
    ASSIGN_OR_RETURN(mtp_cache, mtp->NewCache(capacity));
    FillCacheRandom(*mtp_cache, N, seed + 1);
  }
  std::mt19937_64 rng(seed);
  const LayerContext& ctx = model.layer_context();
  // The parts over L rows at positions N …; with_mtp adds the MTP layer's extend (and at L = 1 a
  // draft step). Each layer runs from the embedding exactly as Model::Forward calls it.
  auto run_parts = [&](const std::vector<int32_t>& tokens, const std::vector<int32_t>& next,
                       const std::vector<int64_t>& positions, bool with_mtp) -> absl::StatusOr<PartsPass> {
    const int64_t L = static_cast<int64_t>(tokens.size());
    PartsPass pass;
    std::vector<float> h(L * H);  // [L, H] the residual stream
    model.Embed(model.weights().embed, tokens, h.data());
    TopK topk;
    for (int64_t l = 0; l < layers; ++l) {
      ForwardProfile profile;
      AttentionOptions options;
      options.profile = &profile;
      AttentionPath path;
      int64_t experts_used = 0;
      const double t = NowSeconds();
      RETURN_IF_ERROR(DecoderLayerForward(model.weights().layers[l], ctx, h.data(), L, positions.data(),
                                          cache->layer(l), capacity, options, &topk, &path, &experts_used));
      pass.layer_seconds.push_back(NowSeconds() - t);
      pass.profiles.push_back(profile);
      pass.experts_used.push_back(static_cast<double>(experts_used));
    }
    std::vector<float> normed(L * H), logits(L * c.vocab_size);  // [L, H], [L, V]
    double t = NowSeconds();
    for (int64_t r = 0; r < L; ++r) {
      RmsNorm(h.data() + r * H, model.weights().final_norm.data<float>(), H, c.rms_norm_eps, normed.data() + r * H);
    }
    model.ApplyHead(model.weights().lm_head, normed.data(), L, logits.data());
    pass.head = NowSeconds() - t;
    if (with_mtp && mtp != nullptr) {
      MtpOptions mtp_options;
      t = NowSeconds();
      RETURN_IF_ERROR(mtp->Extend(*mtp_cache, normed.data(), next, positions, mtp_options).status());
      pass.mtp_extend = NowSeconds() - t;
      if (L == 1) {
        t = NowSeconds();
        RETURN_IF_ERROR(mtp->Forward(*mtp_cache, normed.data(), next, positions, mtp_options).status());
        pass.mtp_step = NowSeconds() - t;
      }
    }
    RETURN_IF_ERROR(cache->Truncate(N));
    return pass;
  };
  // The forwards of the same tokens: whole, then truncated to each prefix.
  auto run_forwards = [&](const std::vector<int32_t>& tokens,
                          const std::vector<int64_t>& positions) -> absl::StatusOr<ForwardsPass> {
    ForwardsPass pass;
    double t = NowSeconds();
    RETURN_IF_ERROR(model.Forward(*cache, tokens, positions).status());
    pass.whole = NowSeconds() - t;
    RETURN_IF_ERROR(cache->Truncate(N));
    for (int64_t prefix : prefixes) {
      ForwardOptions truncated;
      truncated.trunk_layers = prefix;
      t = NowSeconds();
      RETURN_IF_ERROR(model.Forward(*cache, tokens, positions, truncated).status());
      pass.prefix.push_back(NowSeconds() - t);
      RETURN_IF_ERROR(cache->Truncate(N));
    }
    return pass;
  };
  auto draw = [&](int64_t L, std::vector<int32_t>* tokens, std::vector<int32_t>* next, std::vector<int64_t>* positions) {
    tokens->resize(L);
    for (int32_t& id : *tokens) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(c.vocab_size));
    next->resize(L);  // the pairs' tokens x_{t+1}, for the MTP layer
    for (int32_t& id : *next) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(c.vocab_size));
    positions->resize(L);
    for (int64_t r = 0; r < L; ++r) (*positions)[r] = N + r;
  };
  // One repetition's pair, as the JSON's "paired" and "check" entries hold it.
  auto pair_json = [&](const PartsPass& parts, const ForwardsPass& forwards) {
    return nlohmann::json{{"layers", parts.layer_seconds}, {"head", parts.head}, {"whole", forwards.whole},
                          {"prefix", forwards.prefix}};
  };

  ContextSamples s;
  s.layers.assign(max_rows + 1, std::vector<Samples>(layers));
  s.experts_used.assign(max_rows + 1, std::vector<std::vector<double>>(layers));
  s.head.resize(max_rows + 1);
  s.mtp_extend.resize(max_rows + 1);
  s.whole.resize(max_rows + 1);
  s.prefix.assign(max_rows + 1, std::vector<Samples>(prefixes.size()));
  std::vector<nlohmann::json> paired(max_rows + 1, nlohmann::json::array());  // [L] one entry per repetition
  std::vector<double> read_bandwidth;  // [reps] bytes/s measured just before each repetition
  std::vector<int32_t> tokens, next;
  std::vector<int64_t> positions;
  for (int64_t rep = -1; rep < reps; ++rep) {  // rep -1 warms up
    // The memory's speed moves from minute to minute on a shared machine: each repetition's decode
    // (L = 1) is compared with the read bandwidth measured next to it.
    if (rep >= 0) read_bandwidth.push_back(MeasureReadBandwidth(512, 3)["bytes_per_second"].get<double>());
    for (int64_t L = 1; L <= max_rows; ++L) {
      draw(L, &tokens, &next, &positions);
      // Which runs first alternates between repetitions, so a drift of the machine's speed during
      // one repetition (its memory bandwidth moves from minute to minute) favours neither side.
      PartsPass parts;
      ForwardsPass forwards;
      if (rep % 2 == 0) {
        ASSIGN_OR_RETURN(parts, run_parts(tokens, next, positions, /*with_mtp=*/true));
        ASSIGN_OR_RETURN(forwards, run_forwards(tokens, positions));
      } else {
        ASSIGN_OR_RETURN(forwards, run_forwards(tokens, positions));
        ASSIGN_OR_RETURN(parts, run_parts(tokens, next, positions, /*with_mtp=*/true));
      }
      if (rep < 0) continue;
      for (int64_t l = 0; l < layers; ++l) {
        s.layers[L][l].seconds.push_back(parts.layer_seconds[l]);
        s.layers[L][l].profiles.push_back(parts.profiles[l]);
        s.experts_used[L][l].push_back(parts.experts_used[l]);
      }
      s.head[L].seconds.push_back(parts.head);
      if (mtp != nullptr) {
        s.mtp_extend[L].seconds.push_back(parts.mtp_extend);
        if (L == 1) s.mtp_step.seconds.push_back(parts.mtp_step);
      }
      s.whole[L].seconds.push_back(forwards.whole);
      for (size_t i = 0; i < prefixes.size(); ++i) s.prefix[L][i].seconds.push_back(forwards.prefix[i]);
      paired[L].push_back(pair_json(parts, forwards));
    }
  }
  std::vector<nlohmann::json> check(max_rows + 1, nlohmann::json::array());  // [L] one entry per check repetition
  for (int64_t rep = 0; rep < check_reps; ++rep) {
    for (int64_t L : CheckRows(max_rows)) {
      draw(L, &tokens, &next, &positions);
      ASSIGN_OR_RETURN(PartsPass parts, run_parts(tokens, next, positions, /*with_mtp=*/false));
      ASSIGN_OR_RETURN(ForwardsPass forwards, run_forwards(tokens, positions));
      ASSIGN_OR_RETURN(ForwardsPass forwards_again, run_forwards(tokens, positions));
      ASSIGN_OR_RETURN(PartsPass parts_again, run_parts(tokens, next, positions, /*with_mtp=*/false));
      for (int64_t l = 0; l < layers; ++l) parts.layer_seconds[l] = (parts.layer_seconds[l] + parts_again.layer_seconds[l]) / 2;
      parts.head = (parts.head + parts_again.head) / 2;
      forwards.whole = (forwards.whole + forwards_again.whole) / 2;
      for (size_t i = 0; i < prefixes.size(); ++i) forwards.prefix[i] = (forwards.prefix[i] + forwards_again.prefix[i]) / 2;
      check[L].push_back(pair_json(parts, forwards));
    }
  }
  nlohmann::json j = {{"context", N}, {"rows", nlohmann::json::array()}};
  for (int64_t L = 1; L <= max_rows; ++L) {
    nlohmann::json row = {{"rows", L}, {"layers", nlohmann::json::array()}};
    for (int64_t l = 0; l < layers; ++l) {
      nlohmann::json layer = {{"layer", l}, {"kind", KindOf(c, l)}, {"seconds", MedianOf(s.layers[L][l])},
                              {"components", MedianComponents(s.layers[L][l])}};
      if (!c.layer_is_dense[l]) layer["experts_used"] = MeanOf(s.experts_used[L][l]);
      row["layers"].push_back(layer);
    }
    row["head_seconds"] = MedianOf(s.head[L]);
    row["whole_seconds"] = MedianOf(s.whole[L]);
    row["prefix_seconds"] = nlohmann::json::array();
    for (size_t i = 0; i < prefixes.size(); ++i) {
      row["prefix_seconds"].push_back({{"layers", prefixes[i]}, {"seconds", MedianOf(s.prefix[L][i])}});
    }
    if (mtp != nullptr) row["mtp_extend_seconds"] = MedianOf(s.mtp_extend[L]);
    // Repetition by repetition: each layer's seconds, the head's, and the forwards of the same tokens.
    row["paired"] = paired[L];
    if (!check[L].empty()) row["check"] = check[L];
    j["rows"].push_back(row);
  }
  if (mtp != nullptr) j["mtp_step_seconds"] = MedianOf(s.mtp_step);
  j["read_bandwidth_by_rep"] = read_bandwidth;
  return j;
}

// Generate end to end on the whole cut model: plain, then MTP k = 1 … 4 with SYNTHETIC acceptance.
absl::StatusOr<nlohmann::json> MeasureEndToEnd(const Model& model, int64_t N, const std::vector<double>& rates,
                                               int64_t new_tokens, int64_t reps, uint64_t seed) {
  const int64_t capacity = N + new_tokens + kMaxDraftTokens + 2;
  ASSIGN_OR_RETURN(auto target, PrefixCachedTarget::Create(model, capacity, LongContextAttention()));
  std::vector<int32_t> prefix(N);
  std::mt19937_64 rng(seed);
  for (int32_t& id : prefix) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(model.config().vocab_size));
  RETURN_IF_ERROR(target->FillRandom(prefix, seed));
  MtpOptions mtp_options;
  mtp_options.attention = LongContextAttention();
  ASSIGN_OR_RETURN(auto mtp, MtpDrafter::Create(model, capacity, mtp_options));
  FillPromptRandomly(*mtp, seed + 1);
  MtpDrafter& drafter = *mtp;
  std::vector<SpeedResult> totals(5);
  for (int64_t rep = 0; rep < reps; ++rep) {
    for (int64_t k = 0; k <= 4; ++k) {
      GenerateOptions options;
      options.max_new_tokens = new_tokens;
      options.k = k;
      options.stop_at_eos = false;
      options.accept.rule = AcceptRule::kSynthetic;
      options.accept.synthetic_rates = rates;
      options.accept.sampling.temperature = 1.0;
      options.accept.sampling.seed = seed + static_cast<uint64_t>(rep);
      ASSIGN_OR_RETURN(SpeedResult run, TimedGenerate(*target, k == 0 ? nullptr : &drafter, prefix, options,
                                                      k == 0 ? "plain" : absl::StrCat("k=", k)));
      Accumulate(run, &totals[k]);
      std::fprintf(stderr, "real_scale_bench: e2e N=%lld %s %.3f tok/s\n", static_cast<long long>(N), run.label.c_str(),
                   run.tokens_per_second);
    }
  }
  nlohmann::json j = {{"context", N}, {"rates", rates}, {"runs", nlohmann::json::array()}};
  for (const SpeedResult& r : totals) j["runs"].push_back(ToJson(r));
  return j;
}

// One-row decode steps at context N with the indexer keys in each of `storages`, side by side: one
// cache per storage, filled with the same random values, and per repetition, for each storage in
// turn (the first one rotating from repetition to repetition), the read bandwidth (StreamSum over
// 512 MiB) and then one whole Model::Forward of a random token. The model's weights serve every cache;
// the attention reads each cache's keys as that cache stores them.
// One entry of --decode-side-by-side: the indexer keys' storage and the input rows' precision.
struct SideBySideEntry {
  std::string name;
  IndexKeyStorage storage = IndexKeyStorage::kF32;
  ActivationPrecision activations = ActivationPrecision::kF32;
  LatentStorage latent = LatentStorage::kF32;
};

absl::StatusOr<nlohmann::json> MeasureDecodeSideBySide(Model& model, const std::vector<SideBySideEntry>& entries,
                                                       int64_t N, const std::vector<int64_t>& verify_rows, int64_t reps,
                                                       uint64_t seed) {
  std::vector<std::unique_ptr<KvCache>> caches;
  for (const SideBySideEntry& entry : entries) {
    KvCacheShape shape = model.CacheShape(entry.latent);
    shape.index_key_storage = entry.storage;
    const int64_t most_rows = verify_rows.empty() ? 1 : *std::max_element(verify_rows.begin(), verify_rows.end());
    caches.push_back(std::make_unique<KvCache>(shape, N + std::max<int64_t>(most_rows, 2)));
    FillCacheRandom(*caches.back(), N, seed);
  }
  std::mt19937_64 rng(seed);
  const int64_t count = static_cast<int64_t>(entries.size());
  std::vector<std::vector<double>> whole(count), bandwidth(count);  // [entry][rep]
  std::vector<std::map<int64_t, std::vector<double>>> verify(count);  // [entry][rows][rep]
  const std::vector<int64_t> position = {N};
  for (int64_t rep = -1; rep < reps; ++rep) {  // repetition −1 warms up
    const std::vector<int32_t> token = {static_cast<int32_t>(rng() % static_cast<uint64_t>(model.config().vocab_size))};
    for (int64_t i = 0; i < count; ++i) {
      const int64_t s = (i + std::max<int64_t>(rep, 0)) % count;
      model.SetActivationPrecision(entries[s].activations);
      const double bytes_per_second = MeasureReadBandwidth(512, 3)["bytes_per_second"].get<double>();
      const double t = NowSeconds();
      RETURN_IF_ERROR(model.Forward(*caches[s], token, position).status());
      const double seconds = NowSeconds() - t;
      RETURN_IF_ERROR(caches[s]->Truncate(N));
      if (rep >= 0) {
        whole[s].push_back(seconds);
        bandwidth[s].push_back(bytes_per_second);
      }
      for (int64_t rows : verify_rows) {  // a verify of `rows` rows right after the step
        std::vector<int32_t> tokens(rows);
        for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(model.config().vocab_size));
        std::vector<int64_t> positions(rows);
        for (int64_t r = 0; r < rows; ++r) positions[r] = N + r;
        const double start = NowSeconds();
        RETURN_IF_ERROR(model.Forward(*caches[s], tokens, positions).status());
        if (rep >= 0) verify[s][rows].push_back(NowSeconds() - start);
        RETURN_IF_ERROR(caches[s]->Truncate(N));
      }
    }
  }
  nlohmann::json point = {{"context", N}, {"storages", nlohmann::json::object()}};
  for (int64_t s = 0; s < count; ++s) {
    point["storages"][entries[s].name] = {{"whole", whole[s]}, {"read_bandwidth", bandwidth[s]},
                                          {"cache_bytes_per_token", caches[s]->BytesPerToken()}};
    for (const auto& [rows, seconds] : verify[s]) point["storages"][entries[s].name]["verify"][std::to_string(rows)] = seconds;
  }
  return point;
}

absl::Status Run(int argc, char** argv) {
  const std::set<std::string> names = {"model",      "contexts", "max-rows",   "reps",    "e2e",  "rates",
                                       "new-tokens", "e2e-reps", "stream-mib", "threads", "seed", "json",
                                       "prefix-layers", "check-reps", "index-keys", "decode-side-by-side",
                                       "activations", "side-by-side-rows", "weights"};
  ASSIGN_OR_RETURN(CliArgs args, CliArgs::Parse(argc, argv, 1, names, std::set<std::string>{"help"}));
  if (args.Has("help")) {
    std::cout << kUsage;
    return absl::OkStatus();
  }
  if (!args.Has("model")) return absl::InvalidArgumentError("--model DIR is required");
  ASSIGN_OR_RETURN(std::vector<int64_t> contexts, ParseIntList("contexts", args.Get("contexts", "4096,16384,65536,131072")));
  ASSIGN_OR_RETURN(const int64_t max_rows, args.GetInt("max-rows", 8));
  ASSIGN_OR_RETURN(const int64_t reps, args.GetInt("reps", 5));
  ASSIGN_OR_RETURN(const int64_t check_reps, args.GetInt("check-reps", 0));
  std::vector<int64_t> e2e;
  if (args.Has("e2e")) {
    ASSIGN_OR_RETURN(e2e, ParseIntList("e2e", args.Get("e2e")));
  }
  ASSIGN_OR_RETURN(std::vector<double> rates, ParseDoubleList("rates", args.Get("rates", "0.88,0.75,0.58")));
  ASSIGN_OR_RETURN(const int64_t new_tokens, args.GetInt("new-tokens", 32));
  ASSIGN_OR_RETURN(const int64_t e2e_reps, args.GetInt("e2e-reps", 3));
  ASSIGN_OR_RETURN(const int64_t stream_mib, args.GetInt("stream-mib", 1024));
  ASSIGN_OR_RETURN(const int64_t seed, args.GetInt("seed", 7));
  if (max_rows < 1 || max_rows > kMaxVerifyRows || reps < 1 || check_reps < 0 || new_tokens < 2 || e2e_reps < 1) {
    return absl::InvalidArgumentError(
        "--max-rows must be in [1, 16], --reps, --e2e-reps >= 1, --check-reps >= 0, --new-tokens >= 2");
  }
  for (int64_t n : e2e) {
    if (n < 2) return absl::InvalidArgumentError(absl::StrCat("--e2e: a context of ", n, " tokens; give N >= 2"));
  }
  RETURN_IF_ERROR(ApplyThreadsOption(args));
  const double start = NowSeconds();
  LoadOptions load;
  ASSIGN_OR_RETURN(load.index_keys, ParseIndexKeyStorage(args.Get("index-keys", "f32"), "--index-keys"));
  ASSIGN_OR_RETURN(load.activations, ParseActivationPrecision(args.Get("activations", "f32"), "--activations"));
  ASSIGN_OR_RETURN(load.weight_dtype, ParseWeightDType(args.Get("weights", "stored"), Frontend::kCli));
  ASSIGN_OR_RETURN(auto model, Model::Load(args.Get("model"), load));
  if (args.Has("decode-side-by-side")) {
    std::vector<SideBySideEntry> entries;
    for (const std::string& name : SplitList(args.Get("decode-side-by-side"))) {
      const std::vector<std::string> fields = absl::StrSplit(name, ':');
      if (fields.size() > 3) {
        return absl::InvalidArgumentError(
            absl::StrCat("--decode-side-by-side: \"", name, "\" has more than KEYS:ACTIVATIONS:LATENT"));
      }
      SideBySideEntry entry{name};
      ASSIGN_OR_RETURN(entry.storage, ParseIndexKeyStorage(fields[0], "--decode-side-by-side"));
      if (fields.size() > 1) {
        ASSIGN_OR_RETURN(entry.activations, ParseActivationPrecision(fields[1], "--decode-side-by-side"));
      }
      if (fields.size() > 2) {
        ASSIGN_OR_RETURN(entry.latent, ParseLatentStorage(fields[2], "--decode-side-by-side"));
        RETURN_IF_ERROR(CheckLatentStorage(entry.latent, model->config().kv_lora_rank,
                                           model->config().qk_rope_head_dim));
      }
      entries.push_back(entry);
    }
    if (entries.empty()) return absl::InvalidArgumentError("--decode-side-by-side needs at least one entry");
    std::vector<int64_t> verify_rows;
    if (args.Has("side-by-side-rows")) {
      ASSIGN_OR_RETURN(verify_rows, ParseIntList("side-by-side-rows", args.Get("side-by-side-rows")));
    }
    for (int64_t rows : verify_rows) {
      if (rows < 2 || rows > kMaxVerifyRows) {
        return absl::InvalidArgumentError(absl::StrCat("--side-by-side-rows: ", rows, " rows; give 2 to ", kMaxVerifyRows));
      }
    }
    nlohmann::json j = {{"benchmark", "real_scale_bench"}, {"run", RunInfo(argc, argv)}, {"mode", "decode_side_by_side"}};
    {
      std::ifstream in(args.Get("model") + "/config.json");
      j["config"] = nlohmann::json::parse(in, nullptr, false);
    }
    int64_t step_bytes = static_cast<int64_t>(model->weights().lm_head.nbytes());
    for (int64_t l = 0; l < model->config().num_hidden_layers; ++l) {
      step_bytes += LayerRowBytes(model->weights().layers[l], model->config());
    }
    j["step_weight_bytes"] = step_bytes;
    j["contexts"] = nlohmann::json::array();
    for (int64_t N : contexts) {
      std::fprintf(stderr, "real_scale_bench: side by side, N = %lld\n", static_cast<long long>(N));
      ASSIGN_OR_RETURN(nlohmann::json point,
                       MeasureDecodeSideBySide(*model, entries, N, verify_rows, reps, static_cast<uint64_t>(seed)));
      j["contexts"].push_back(point);
    }
    j["elapsed_seconds"] = NowSeconds() - start;
    return WriteTextFile(args.Get("json", "build/results/real_scale.json"), j.dump(1) + "\n");
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> prefixes, ParseIntList("prefix-layers", args.Get("prefix-layers", "2,3,4")));
  std::erase_if(prefixes, [&](int64_t n) { return n < 1 || n >= model->config().num_hidden_layers; });
  std::unique_ptr<MtpModule> mtp;
  if (model->has_mtp()) {
    ASSIGN_OR_RETURN(mtp, MtpModule::Create(*model));
  }
  const ModelConfig& c = model->config();
  nlohmann::json j = {{"benchmark", "real_scale_bench"},
                      {"run", RunInfo(argc, argv)},
                      {"index_keys", IndexKeyStorageName(load.index_keys)},
                      {"activations", ActivationPrecisionName(load.activations)},
                      {"weights", args.Get("weights", "stored")}};
  j["read_bandwidth_start"] = MeasureReadBandwidth(stream_mib, 5);
  j["compute_ceilings_start"] = MeasureComputeCeilings(c.hidden_size);
  {
    std::ifstream in(args.Get("model") + "/config.json");
    j["config"] = nlohmann::json::parse(in, nullptr, false);
  }
  nlohmann::json layers = nlohmann::json::array();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    layers.push_back({{"layer", l}, {"kind", KindOf(c, l)}, {"row_weight_bytes", LayerRowBytes(model->weights().layers[l], c)}});
  }
  j["layers"] = layers;
  j["head_bytes"] = static_cast<int64_t>(model->weights().lm_head.nbytes());
  if (mtp) j["mtp_row_weight_bytes"] = LayerRowBytes(model->weights().mtp[0].block, c) +
                                       static_cast<int64_t>(model->weights().mtp[0].eh_proj.nbytes());
  j["expert_bytes"] = c.n_routed_experts > 0 && !model->weights().layers.back().dense_mlp
                          ? static_cast<int64_t>(model->weights().layers.back().moe.experts[0].gate.nbytes() * 3)
                          : 0;
  j["contexts"] = nlohmann::json::array();
  for (int64_t N : contexts) {
    std::fprintf(stderr, "real_scale_bench: N = %lld\n", static_cast<long long>(N));
    ASSIGN_OR_RETURN(nlohmann::json point, MeasureContext(*model, mtp.get(), N, max_rows, reps, check_reps,
                                                                     static_cast<uint64_t>(seed), prefixes));
    j["contexts"].push_back(point);
  }
  if (!e2e.empty() && mtp) {
    j["e2e"] = nlohmann::json::array();
    for (int64_t n : e2e) {
      ASSIGN_OR_RETURN(nlohmann::json speeds,
                       MeasureEndToEnd(*model, n, rates, new_tokens, e2e_reps, static_cast<uint64_t>(seed)));
      j["e2e"].push_back(speeds);
    }
  }
  j["read_bandwidth_end"] = MeasureReadBandwidth(stream_mib, 5);
  j["compute_ceilings_end"] = MeasureComputeCeilings(c.hidden_size);
  j["elapsed_seconds"] = NowSeconds() - start;
  return WriteTextFile(args.Get("json", "build/results/real_scale.json"), j.dump(1) + "\n");
}

}  // namespace
}  // namespace mtpspec::bench

int main(int argc, char** argv) { return mtpspec::bench::ExitCode("real_scale_bench", mtpspec::bench::Run(argc, argv)); }

// Invariants of the forward pass that need no oracle: chunked = one-shot prefill, decode = rows of
// a longer prefill, truncation rolls back (the attention paths' and forms' agreement is in
// tests/attention/mla_paths_test.cc).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <span>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/linear.h"
#include "model/decoder_layer.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "tests/model/model_test_util.h"

namespace mtpspec {
namespace {

using testing_util::Range;
using testing_util::RelativeMaxDiff;
using testing_util::TestTokens;
using testing_util::TinyModelEnv;

using testing_util::RunTiny;
using testing_util::Tiny;


TEST(ModelForwardTest, LogitsAreFiniteAndNotDegenerate) {
  auto cache = *Tiny().NewCache(64);
  auto out = RunTiny(*cache, TestTokens(20, Tiny().config().vocab_size), 0);
  ASSERT_EQ(out.logits.dim(0), 20);
  double spread = 0;
  for (int64_t i = 0; i < out.logits.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(out.logits.data<float>()[i]));
    spread = std::max(spread, std::abs(static_cast<double>(out.logits.data<float>()[i])));
  }
  EXPECT_GT(spread, 0.1);
  EXPECT_EQ(cache->length(), 20);
}

// Chunked prefill with any chunk size equals one-shot prefill.
TEST(ModelForwardTest, ChunkedPrefillEqualsOneShot) {
  const auto tokens = TestTokens(30, Tiny().config().vocab_size);
  auto cache = *Tiny().NewCache(64);
  const ForwardOutput whole = RunTiny(*cache, tokens, 0);
  for (int64_t chunk : {1, 2, 3, 7, 16, 29}) {
    auto chunked_cache = *Tiny().NewCache(64);
    std::vector<float> logits;
    for (int64_t start = 0; start < 30; start += chunk) {
      const int64_t end = std::min<int64_t>(30, start + chunk);
      auto out = RunTiny(*chunked_cache, std::vector<int32_t>(tokens.begin() + start, tokens.begin() + end), start);
      logits.insert(logits.end(), out.logits.data<float>(), out.logits.data<float>() + out.logits.numel());
    }
    EXPECT_LT(RelativeMaxDiff(logits.data(), whole.logits.data<float>(), whole.logits.numel()), 2e-5)
        << "chunk " << chunk;
  }
}

// Sparse regime: decode-step logits equal the matching rows of one longer prefill.
TEST(ModelForwardTest, DecodeStepsEqualPrefillRows) {
  const auto tokens = TestTokens(40, Tiny().config().vocab_size, 5);
  auto full_cache = *Tiny().NewCache(64);
  const ForwardOutput full = RunTiny(*full_cache, tokens, 0);
  auto cache = *Tiny().NewCache(64);
  RunTiny(*cache, std::vector<int32_t>(tokens.begin(), tokens.begin() + 30), 0);
  const int64_t vocab = Tiny().config().vocab_size;
  for (int64_t p = 30; p < 40; ++p) {
    const ForwardOutput step = RunTiny(*cache, {tokens[p]}, p);
    EXPECT_EQ(step.paths[0], AttentionPath::kGather);
    EXPECT_LT(RelativeMaxDiff(step.logits.data<float>(), full.logits.data<float>() + p * vocab, vocab), 1e-5)
        << "position " << p;
  }
}

// trunk_layers = n is the first n layers run one by one, then the final norm and head, bit for bit;
// n = every layer is the default forward.
TEST(ModelForwardTest, TrunkLayersRunsTheFirstLayersThenTheHead) {
  const Model& m = Tiny();
  const ModelConfig& c = m.config();
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const auto tokens = TestTokens(20, V, 3);
  const auto positions = Range(0, 20);
  for (int64_t n = 1; n <= c.num_hidden_layers; ++n) {
    ForwardOptions options;
    options.trunk_layers = n;
    auto cache = *m.NewCache(32);
    const ForwardOutput cut = RunTiny(*cache, tokens, 0, options);

    auto by_hand_cache = *m.NewCache(32);
    std::vector<float> hidden(20 * H);  // [20, H]
    m.Embed(m.weights().embed, tokens, hidden.data());
    TopK topk;
    for (int64_t l = 0; l < n; ++l) {
      AttentionPath path;
      ASSERT_TRUE(DecoderLayerForward(m.weights().layers[l], m.layer_context(), hidden.data(), 20, positions.data(),
                                      by_hand_cache->layer(l), by_hand_cache->capacity(), {}, &topk, &path)
                      .ok());
    }
    ASSERT_EQ(cut.hidden_prenorm.numel(), 20 * H);
    for (int64_t i = 0; i < 20 * H; ++i) ASSERT_EQ(cut.hidden_prenorm.data<float>()[i], hidden[i]) << "n " << n;
    std::vector<float> normed(20 * H), logits(20 * V);  // [20, H], [20, V]
    for (int64_t r = 0; r < 20; ++r) {
      RmsNorm(hidden.data() + r * H, m.weights().final_norm.data<float>(), H, c.rms_norm_eps, normed.data() + r * H);
    }
    m.ApplyHead(m.weights().lm_head, normed.data(), 20, logits.data());
    for (int64_t i = 0; i < 20 * V; ++i) ASSERT_EQ(cut.logits.data<float>()[i], logits[i]) << "n " << n;
    if (n == c.num_hidden_layers) {
      auto full_cache = *m.NewCache(32);
      EXPECT_EQ(RelativeMaxDiff(RunTiny(*full_cache, tokens, 0).logits, cut.logits), 0.0);
    }
  }
  for (const int64_t bad : {int64_t{0}, int64_t{-2}, c.num_hidden_layers + 1}) {
    ForwardOptions options;
    options.trunk_layers = bad;
    auto cache = *m.NewCache(32);
    auto out = m.Forward(*cache, tokens, positions, options);
    ASSERT_FALSE(out.ok());
    EXPECT_THAT(std::string(out.status().message()), ::testing::HasSubstr("trunk_layers"));
  }
}

TEST(ModelForwardTest, TruncateRollsBack) {
  const auto tokens = TestTokens(36, Tiny().config().vocab_size, 9);
  auto cache = *Tiny().NewCache(64);
  RunTiny(*cache, std::vector<int32_t>(tokens.begin(), tokens.begin() + 30), 0);
  const ForwardOutput first = RunTiny(*cache, std::vector<int32_t>(tokens.begin() + 30, tokens.end()), 30);
  ASSERT_TRUE(cache->Truncate(30).ok());
  EXPECT_EQ(cache->length(), 30);
  // A different continuation, then rollback again and the original continuation.
  RunTiny(*cache, {3, 4, 5}, 30);
  ASSERT_TRUE(cache->Truncate(30).ok());
  const ForwardOutput again = RunTiny(*cache, std::vector<int32_t>(tokens.begin() + 30, tokens.end()), 30);
  EXPECT_EQ(RelativeMaxDiff(again.logits, first.logits), 0.0);
  EXPECT_FALSE(cache->Truncate(37).ok());
}

TEST(ModelForwardTest, ForwardAtAnEarlierPositionOverwrites) {
  const auto tokens = TestTokens(20, Tiny().config().vocab_size, 2);
  auto cache = *Tiny().NewCache(64);
  RunTiny(*cache, tokens, 0);
  const ForwardOutput a = RunTiny(*cache, {7}, 20);
  const ForwardOutput b = RunTiny(*cache, {7}, 20);  // same slot again
  EXPECT_EQ(RelativeMaxDiff(a.logits, b.logits), 0.0);
  EXPECT_EQ(cache->length(), 21);
}

TEST(ModelForwardTest, HiddenStatesRelateThroughFinalNorm) {
  auto cache = *Tiny().NewCache(64);
  auto out = RunTiny(*cache, TestTokens(5, Tiny().config().vocab_size), 0);
  const int64_t H = Tiny().config().hidden_size;
  ASSERT_EQ(out.hidden_prenorm.dim(1), H);
  for (int64_t r = 0; r < 5; ++r) {
    const float* pre = out.hidden_prenorm.data<float>() + r * H;
    const float* post = out.hidden_postnorm.data<float>() + r * H;
    double ms = 0;
    for (int64_t i = 0; i < H; ++i) ms += static_cast<double>(pre[i]) * pre[i];
    const double inv = 1.0 / std::sqrt(ms / H + Tiny().config().rms_norm_eps);
    for (int64_t i = 0; i < H; ++i) {
      EXPECT_NEAR(post[i], Tiny().weights().final_norm.data<float>()[i] * pre[i] * inv, 1e-4);
    }
  }
}

// Bad input returns an error naming the problem and leaves the cache usable and unchanged.
TEST(ModelForwardTest, BadInputIsRejectedAndLosesNothing) {
  const int64_t vocab = Tiny().config().vocab_size;
  auto cache = *Tiny().NewCache(16);
  const auto tokens = TestTokens(10, vocab);
  RunTiny(*cache, tokens, 0);
  struct Case {
    std::vector<int32_t> tokens;
    std::vector<int64_t> positions;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{static_cast<int32_t>(vocab)}, {10}, "outside the vocabulary"},
      {{-1}, {10}, "outside the vocabulary"},
      {{1, 2}, {10, 12}, "consecutive"},
      {{1}, {12}, "gap"},
      {{1, 2, 3, 4, 5, 6, 7}, Range(10, 17), "beyond the cache capacity"},
      {{1}, {}, "positions"},
      {{}, {}, "no tokens"},
  };
  for (const Case& c : cases) {
    auto out = Tiny().Forward(*cache, c.tokens, c.positions);
    ASSERT_FALSE(out.ok());
    EXPECT_THAT(std::string(out.status().message()), ::testing::HasSubstr(c.expected));
    EXPECT_EQ(cache->length(), 10);
  }
  ForwardOptions dense;
  dense.attention.path = AttentionPath::kDense;  // T = 11 > K = 8
  EXPECT_FALSE(Tiny().Forward(*cache, std::vector<int32_t>{1}, std::vector<int64_t>{10}, dense).ok());
  EXPECT_EQ(cache->length(), 10);
  // The cache still gives the same answer as a fresh one.
  auto fresh = *Tiny().NewCache(16);
  RunTiny(*fresh, tokens, 0);
  EXPECT_EQ(RelativeMaxDiff(RunTiny(*cache, {5}, 10).logits, RunTiny(*fresh, {5}, 10).logits), 0.0);
  EXPECT_FALSE(Tiny().NewCache(0).ok());
  EXPECT_FALSE(Tiny().NewCache(Tiny().config().max_position_embeddings + 1).ok());
}

TEST(ModelForwardTest, CacheBytesPerToken) {
  auto cache = *Tiny().NewCache(4);
  const auto& c = Tiny().config();
  // 4 layers × (latent 32 + rope 8) + 3 full layers × indexer 16, in f32.
  EXPECT_EQ(cache->BytesPerToken(), (4 * (c.kv_lora_rank + c.qk_rope_head_dim) + 3 * c.index_head_dim) * 4);
}

// LoadOptions::index_keys = bf16 or fp8: the caches keep the indexer keys in that format (2 bytes a
// value, or 1 and a 4-byte scale a key), rows that see at most index_topk keys (which take every key,
// whatever the scores) are bit-identical to f32's, and decode steps still equal the rows of a prefill.
TEST(ModelForwardTest, ReducedPrecisionIndexKeysOnlyChangeTheScoresOfTheIndexer) {
  for (const auto& [storage, dtype, key_bytes] : {std::tuple{IndexKeyStorage::kBf16, DType::kBF16, int64_t{-1}},
                                                  std::tuple{IndexKeyStorage::kFp8, DType::kF8E4M3, int64_t{-2}}}) {
    LoadOptions options;
    options.index_keys = storage;
    auto loaded = Model::Load(TinyModelEnv::Get().dir(), options);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    const Model& model = **loaded;
    const char* name = IndexKeyStorageName(storage);
    EXPECT_EQ(model.index_key_storage(), storage);
    const auto& c = Tiny().config();
    const int64_t K = c.index_topk, T = K + 12, vocab = c.vocab_size, d_i = c.index_head_dim;
    auto cache = *model.NewCache(T + 4);
    auto f32_cache = *Tiny().NewCache(T + 4);
    int64_t full_layers = 0;
    for (int64_t l = 0; l < cache->num_layers(); ++l) {
      if (cache->layer(l).index_key.empty()) continue;
      ++full_layers;
      EXPECT_EQ(cache->layer(l).index_key.dtype(), dtype) << name << " layer " << l;
    }
    ASSERT_GT(full_layers, 0);
    // Bytes saved per key against f32: 2·d_I (bf16), or 3·d_I less the scale's 4 (fp8).
    const int64_t saved = key_bytes == -1 ? 2 * d_i : 3 * d_i - 4;
    EXPECT_EQ(f32_cache->BytesPerToken() - cache->BytesPerToken(), full_layers * saved) << name;

    const auto tokens = TestTokens(T, vocab, 17);
    auto out = model.Forward(*cache, tokens, Range(0, T));
    ASSERT_TRUE(out.ok()) << out.status();
    const ForwardOutput f32 = RunTiny(*f32_cache, tokens, 0);
    for (int64_t i = 0; i < K * vocab; ++i) {
      ASSERT_EQ(out->logits.data<float>()[i], f32.logits.data<float>()[i]) << name << " row " << i / vocab;
    }
    for (int64_t i = K * vocab; i < T * vocab; ++i) ASSERT_TRUE(std::isfinite(out->logits.data<float>()[i])) << name;

    auto step_cache = *model.NewCache(T + 4);
    ASSERT_TRUE(model.Forward(*step_cache, std::span(tokens).first(K), Range(0, K)).ok());
    for (int64_t p = K; p < T; ++p) {
      auto step = model.Forward(*step_cache, std::span(tokens).subspan(p, 1), Range(p, p + 1));
      ASSERT_TRUE(step.ok()) << step.status();
      EXPECT_LT(RelativeMaxDiff(step->logits.data<float>(), out->logits.data<float>() + p * vocab, vocab), 1e-5)
          << name << " position " << p;
    }
  }
}

// bf16 indexer keys are stored in pairs and fp8 keys are Hadamard-rotated: an odd index_head_dim, and
// for fp8 one that is not a power of two, is refused at load, naming the file and the field.
TEST(ModelForwardTest, ReducedPrecisionIndexKeysNeedTheirIndexHeadDim) {
  std::ifstream in(TinyModelEnv::Get().dir() + "/config.json");
  const nlohmann::json config = nlohmann::json::parse(in);
  const int64_t rope = config["qk_rope_head_dim"].get<int64_t>();
  for (const auto& [storage, head_dim] : {std::pair{IndexKeyStorage::kBf16, rope + 1 + rope % 2},
                                         std::pair{IndexKeyStorage::kFp8, 3 * rope + 3 * (rope % 2) + 2}}) {
    testing_util::ScopedTempDir temp;
    nlohmann::json changed = config;
    changed["index_head_dim"] = head_dim;  // bf16: odd; fp8: even, ≥ rope, and not a power of two
    std::ofstream(temp.File("config.json")) << changed.dump();
    LoadOptions options;
    options.index_keys = storage;
    auto loaded = Model::Load(temp.path(), options);
    ASSERT_FALSE(loaded.ok()) << IndexKeyStorageName(storage) << " index_head_dim " << head_dim;
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(loaded.status().message(), testing::HasSubstr("index_head_dim"));
    EXPECT_THAT(loaded.status().message(), testing::HasSubstr("config.json"));
  }
}

// The logits [tokens, vocab] of `tokens` run through `model` from an empty cache (empty on an error,
// which fails the test).
Tensor LogitsOf(const Model& model, const std::vector<int32_t>& tokens) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  auto cache = model.NewCache(T + 2);
  if (!cache.ok()) {
    ADD_FAILURE() << cache.status();
    return Tensor();
  }
  auto out = model.Forward(**cache, tokens, Range(0, T));
  if (!out.ok()) {
    ADD_FAILURE() << out.status();
    return Tensor();
  }
  return std::move(out->logits);
}

// LoadOptions::activations on a model whose matrices are FP8 (quantised at load): every Linear
// matrix takes its rows in bf16 or fp8 and carries its line flags, kv_b_proj (the row kernels) stays
// f32, and the logits move away from those with f32 rows (the rows were quantised) but stay finite.
// How far they move is measured on the trained model (tests/mtp/reduced_activations_test.cc): this
// random model's top-k selection and routing flip at the slightest change.
TEST(ModelForwardTest, ReducedActivationsQuantiseTheRowsOfTheFp8Matrices) {
  LoadOptions fp8_weights;
  fp8_weights.weight_dtype = WeightDType::kFP8;
  auto baseline = Model::Load(TinyModelEnv::Get().dir(), fp8_weights);
  ASSERT_TRUE(baseline.ok()) << baseline.status();
  const int64_t T = 30, vocab = Tiny().config().vocab_size;
  const auto tokens = TestTokens(T, vocab, 23);
  const Tensor base = LogitsOf(**baseline, tokens);
  ASSERT_EQ(base.numel(), T * vocab);
  EXPECT_EQ((*baseline)->load_report().matrices_reduced_activations, 0);
  for (ActivationPrecision precision : {ActivationPrecision::kBf16, ActivationPrecision::kFp8}) {
    const char* name = ActivationPrecisionName(precision);
    LoadOptions options = fp8_weights;
    options.activations = precision;
    auto loaded = Model::Load(TinyModelEnv::Get().dir(), options);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    const Model& model = **loaded;
    EXPECT_EQ(model.activation_precision(), precision);
    EXPECT_GT(model.load_report().fp8_tensors_quantised, 0);
    EXPECT_EQ(model.load_report().matrices_reduced_activations, model.load_report().fp8_tensors_quantised) << name;
    for (const DecoderLayerWeights& layer : model.weights().layers) {
      EXPECT_EQ(layer.attn.q_a_proj.activations, precision) << name;
      EXPECT_NE(layer.attn.q_a_proj.fp8_line_flags, nullptr) << name;
      EXPECT_EQ(layer.attn.kv_b_proj.activations, ActivationPrecision::kF32) << name;
    }
    const Tensor out = LogitsOf(model, tokens);
    ASSERT_EQ(out.numel(), T * vocab) << name;
    EXPECT_GT(RelativeMaxDiff(out, base), 0.0) << name;
    for (int64_t i = 0; i < T * vocab; ++i) ASSERT_TRUE(std::isfinite(out.data<float>()[i])) << name;
  }
  // Model::SetActivationPrecision switches a loaded model: each precision gives the bits of a model
  // loaded with it, and back to f32 the bits of f32 rows.
  auto switched = Model::Load(TinyModelEnv::Get().dir(), fp8_weights);
  ASSERT_TRUE(switched.ok()) << switched.status();
  for (ActivationPrecision precision : {ActivationPrecision::kFp8, ActivationPrecision::kBf16, ActivationPrecision::kF32}) {
    EXPECT_EQ((*switched)->SetActivationPrecision(precision), (*baseline)->load_report().fp8_tensors_quantised);
    EXPECT_EQ((*switched)->activation_precision(), precision);
    LoadOptions options = fp8_weights;
    options.activations = precision;
    auto loaded = Model::Load(TinyModelEnv::Get().dir(), options);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(RelativeMaxDiff(LogitsOf(**switched, tokens), LogitsOf(**loaded, tokens)), 0.0)
        << ActivationPrecisionName(precision);
  }
  // f32 matrices take f32 rows whatever the option says.
  LoadOptions as_stored;
  as_stored.activations = ActivationPrecision::kFp8;
  auto stored = Model::Load(TinyModelEnv::Get().dir(), as_stored);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ((*stored)->load_report().matrices_reduced_activations, 0);
  EXPECT_THAT((*stored)->load_report().activations_note, testing::HasSubstr("activations fp8 change nothing"));
  EXPECT_THAT((*stored)->load_report().activations_note, testing::HasSubstr("weights fp8"));
  EXPECT_EQ((*baseline)->load_report().activations_note, "");
  EXPECT_EQ(RelativeMaxDiff(LogitsOf(**stored, tokens), LogitsOf(Tiny(), tokens)), 0.0);
  as_stored.activations = ActivationPrecision::kBf16;
  auto stored_bf16 = Model::Load(TinyModelEnv::Get().dir(), as_stored);
  ASSERT_TRUE(stored_bf16.ok()) << stored_bf16.status();
  EXPECT_THAT((*stored_bf16)->load_report().activations_note, testing::HasSubstr("is FP8 or bf16"));
}

// bf16 matrices take bf16 rows under activations bf16 (the pair GEMM in a prefill, f32 products of
// the rounded rows below it) and f32 rows under fp8, which is an FP8 GEMM's numerics: against the
// same weights with f32 rows, bf16 rows change the logits, fp8 rows change nothing (how far bf16 rows
// move a trained model's distributions: tests/mtp/reduced_activations_test.cc).
TEST(ModelForwardTest, Bf16MatricesTakeBf16RowsUnderActivationsBf16) {
  LoadOptions bf16_weights;
  bf16_weights.weight_dtype = WeightDType::kBF16;
  auto baseline = Model::Load(TinyModelEnv::Get().dir(), bf16_weights);
  ASSERT_TRUE(baseline.ok()) << baseline.status();
  const int64_t T = 30, vocab = Tiny().config().vocab_size;
  const auto tokens = TestTokens(T, vocab, 29);
  const Tensor base = LogitsOf(**baseline, tokens);
  ASSERT_EQ(base.numel(), T * vocab);
  for (ActivationPrecision precision : {ActivationPrecision::kBf16, ActivationPrecision::kFp8}) {
    const char* name = ActivationPrecisionName(precision);
    LoadOptions options = bf16_weights;
    options.activations = precision;
    auto loaded = Model::Load(TinyModelEnv::Get().dir(), options);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    const LoadReport& report = (*loaded)->load_report();
    const Tensor out = LogitsOf(**loaded, tokens);
    ASSERT_EQ(out.numel(), T * vocab) << name;
    const double diff = RelativeMaxDiff(out, base);
    if (precision == ActivationPrecision::kFp8) {
      EXPECT_EQ(report.matrices_reduced_activations, 0);
      EXPECT_THAT(report.activations_note, testing::HasSubstr("activations bf16"));
      EXPECT_EQ(diff, 0.0);
      continue;
    }
    EXPECT_GT(report.matrices_reduced_activations, 0);
    EXPECT_EQ(report.activations_note, "");
    for (const DecoderLayerWeights& layer : (*loaded)->weights().layers) {
      EXPECT_EQ(layer.attn.q_a_proj.activations, ActivationPrecision::kBf16);
    }
    EXPECT_GT(diff, 0.0) << name;
    for (int64_t i = 0; i < T * vocab; ++i) ASSERT_TRUE(std::isfinite(out.data<float>()[i])) << name;
  }
}

}  // namespace
}  // namespace mtpspec

namespace mtpspec {
namespace {

// The optional profile does not change results and accounts every component it covers.
TEST(ForwardProfileTest, ProfilingIsTransparentAndCoversTheComponents) {
  const Model& model = TinyModelEnv::Get().model();
  const auto tokens = testing_util::TestTokens(24, model.config().vocab_size, 4);
  auto plain_cache = *model.NewCache(32), profiled_cache = *model.NewCache(32);
  ForwardProfile profile;
  ForwardOptions options;
  options.attention.profile = &profile;
  auto plain = model.Forward(*plain_cache, tokens, testing_util::Range(0, 24));
  auto profiled = model.Forward(*profiled_cache, tokens, testing_util::Range(0, 24), options);
  ASSERT_TRUE(plain.ok() && profiled.ok());
  EXPECT_EQ(testing_util::RelativeMaxDiff(profiled->logits, plain->logits), 0.0);
  for (Component c : {Component::kEmbed, Component::kAttentionProjections, Component::kIndexerScores,
                      Component::kTopK, Component::kAttention, Component::kFeedForward, Component::kNorms,
                      Component::kHead}) {
    EXPECT_GT(profile[c], 0.0) << ComponentName(c);
  }
}

}  // namespace
}  // namespace mtpspec

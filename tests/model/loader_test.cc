// Strict loading: every missing, unexpected or misshapen tensor is reported by name; fp8 block
// dequantisation; sharded checkpoints; MTP weights absent.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/fp8_quantise.h"
#include "io/safetensors.h"
#include "kernels/linear.h"
#include "io/safetensors_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "tests/model/model_test_util.h"
#include "testing/tiny_configs.h"

namespace mtpspec {
namespace {

using ::testing::HasSubstr;
using testing_util::Range;
using testing_util::RelativeMaxDiff;
using testing_util::ScopedTempDir;
using testing_util::TestTokens;
using testing_util::TinyModelEnv;

using Edit = std::function<void(std::vector<std::pair<std::string, TensorView>>&, std::deque<Tensor>&)>;

// Copies the tiny checkpoint into `dir` with `edit` applied to its tensor list.
void WriteEdited(const std::string& dir, const Edit& edit) {
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(TinyModelEnv::Get().dir() + "/config.json", dir + "/config.json");
  auto file = SafetensorsFile::Open(TinyModelEnv::Get().dir() + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<std::pair<std::string, TensorView>> tensors;
  for (const std::string& name : (*file)->names()) tensors.push_back({name, *(*file)->Get(name)});
  std::deque<Tensor> storage;
  edit(tensors, storage);
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", tensors).ok());
}

absl::Status LoadError(const Edit& edit) {
  ScopedTempDir tmp;
  WriteEdited(tmp.File("m"), edit);
  auto model = Model::Load(tmp.File("m"));
  return model.ok() ? absl::OkStatus() : model.status();
}

TEST(LoaderTest, MissingTensorIsNamed) {
  auto st = LoadError([](auto& tensors, auto&) {
    std::erase_if(tensors, [](auto& t) { return t.first == "model.layers.1.self_attn.kv_b_proj.weight"; });
  });
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("1 missing tensor(s): model.layers.1.self_attn.kv_b_proj.weight"));
}

TEST(LoaderTest, UnexpectedTensorIsNamed) {
  // An indexer on a shared layer (layer 2) is not in the table.
  auto st = LoadError([](auto& tensors, auto& storage) {
    storage.push_back(Tensor::Zeros(DType::kF32, {16}));
    tensors.push_back({"model.layers.2.self_attn.indexer.k_norm.bias", storage.back().view()});
  });
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("unexpected tensor(s): model.layers.2.self_attn.indexer.k_norm.bias"));
}

TEST(LoaderTest, ShapeDisagreeingWithConfigIsNamed) {
  auto st = LoadError([](auto& tensors, auto& storage) {
    for (auto& [name, view] : tensors) {
      if (name == "model.layers.0.self_attn.o_proj.weight") {
        storage.push_back(Tensor::Zeros(DType::kF32, {64, 32}));
        view = storage.back().view();
      }
    }
  });
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("model.layers.0.self_attn.o_proj.weight"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("has shape [64, 32], the config implies [64, 64]"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("model.safetensors"));
}

TEST(LoaderTest, IntegerDTypeForAWeightIsRejected) {
  auto st = LoadError([](auto& tensors, auto& storage) {
    for (auto& [name, view] : tensors) {
      if (name == "model.norm.weight") {
        storage.push_back(Tensor::Zeros(DType::kI32, {64}));
        view = storage.back().view();
      }
    }
  });
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("model.norm.weight has dtype I32"));
}

TEST(LoaderTest, WithoutMtpWeightsTheModelLoadsWithoutMtp) {
  ScopedTempDir tmp;
  WriteEdited(tmp.File("m"), [](auto& tensors, auto&) {
    std::erase_if(tensors, [](auto& t) { return absl::StartsWith(t.first, "model.layers.4."); });
  });
  auto model = Model::Load(tmp.File("m"));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_FALSE((*model)->has_mtp());
  EXPECT_THAT((*model)->load_report().mtp_note, HasSubstr("no tensors for MTP layer 4"));
  EXPECT_TRUE(TinyModelEnv::Get().model().has_mtp());
}

TEST(LoaderTest, PartialMtpLayerIsAnError) {
  auto st = LoadError([](auto& tensors, auto&) {
    std::erase_if(tensors, [](auto& t) { return t.first == "model.layers.4.eh_proj.weight"; });
  });
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("model.layers.4.eh_proj.weight"));
}

TEST(LoaderTest, MissingDirectoryIsNotFound) {
  auto model = Model::Load("/nonexistent/model/dir");
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(std::string(model.status().message()), HasSubstr("/nonexistent/model/dir"));
}

std::vector<float> PrefillLogits(const Model& model, int64_t n) {
  auto cache = *model.NewCache(64);
  const auto tokens = TestTokens(n, model.config().vocab_size, 21);
  auto out = model.Forward(*cache, tokens, Range(0, n));
  EXPECT_TRUE(out.ok()) << out.status();
  return std::vector<float>(out->logits.data<float>(), out->logits.data<float>() + out->logits.numel());
}

// fp8 e4m3 weights with 128x128 block scales stand for code · scale: the model computes what the
// checkpoint holding those values in f32 computes, to f32 rounding (the FP8 tile scales a block's
// sum, the f32 kernel each weight).
TEST(LoaderTest, Fp8BlockScaledWeightsDequantise) {
  ScopedTempDir tmp;
  const std::string target = "model.layers.1.mlp.shared_experts.up_proj.weight";  // [32, 64]
  std::vector<float> dequantised(32 * 64);
  // Checkpoint A: fp8 codes + scales. Checkpoint B: the same values in f32.
  WriteEdited(tmp.File("fp8"), [&](auto& tensors, auto& storage) {
    Tensor codes = Tensor::Empty(DType::kF8E4M3, {32, 64});
    Tensor scale = Tensor::Empty(DType::kF32, {1, 1});
    scale.data<float>()[0] = 0.0123f;
    for (int64_t i = 0; i < 32 * 64; ++i) {
      uint8_t code = static_cast<uint8_t>((i * 37) % 256);
      if ((code & 0x7f) == 0x7f) code = 0x10;  // avoid NaN codes
      codes.data<uint8_t>()[i] = code;
      dequantised[i] = F8E4M3ToF32(code) * 0.0123f;
    }
    for (auto& [name, view] : tensors) {
      if (name == target) {
        storage.push_back(std::move(codes));
        view = storage.back().view();
      }
    }
    storage.push_back(std::move(scale));
    tensors.push_back({"model.layers.1.mlp.shared_experts.up_proj.weight_scale_inv", storage.back().view()});
  });
  WriteEdited(tmp.File("f32"), [&](auto& tensors, auto& storage) {
    Tensor values = Tensor::Empty(DType::kF32, {32, 64});
    std::copy(dequantised.begin(), dequantised.end(), values.data<float>());
    for (auto& [name, view] : tensors) {
      if (name == target) {
        storage.push_back(std::move(values));
        view = storage.back().view();
      }
    }
  });
  LoadReport report;
  auto fp8 = Model::Load(tmp.File("fp8"));
  auto f32 = Model::Load(tmp.File("f32"));
  ASSERT_TRUE(fp8.ok()) << fp8.status();
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_EQ((*fp8)->load_report().fp8_tensors_in_place, 1);
  EXPECT_EQ((*fp8)->load_report().fp8_tensors_dequantised, 0);
  const auto a = PrefillLogits(**fp8, 12), b = PrefillLogits(**f32, 12);
  EXPECT_LT(RelativeMaxDiff(a.data(), b.data(), a.size()), 1e-5);
}

// The loader reads an FP8 matrix's bytes to learn whether the kernels may skip their NaN check: a
// matrix holding a NaN encoding (0x7f) keeps the check, so the model gives NaN rather than the
// finite value the unchecked widening would read from those bits.
TEST(LoaderTest, Fp8NanCodeGivesNanLogits) {
  ScopedTempDir tmp;
  const std::string target = "model.layers.1.mlp.shared_experts.down_proj.weight";
  for (bool with_nan : {false, true}) {
    const std::string dir = tmp.File(with_nan ? "nan" : "clean");
    WriteEdited(dir, [&](auto& tensors, auto& storage) {
      for (auto& [name, view] : tensors) {
        if (name != target) continue;
        Tensor codes = Tensor::Empty(DType::kF8E4M3, view.shape_vector());
        for (int64_t i = 0; i < codes.numel(); ++i) codes.data<uint8_t>()[i] = static_cast<uint8_t>(0x30 + i % 8);
        if (with_nan) codes.data<uint8_t>()[codes.numel() / 2] = 0x7F;
        storage.push_back(std::move(codes));
        view = storage.back().view();
      }
      Tensor scale = Tensor::Empty(DType::kF32, {1, 1});
      scale.data<float>()[0] = 0.01f;
      storage.push_back(std::move(scale));
      tensors.push_back({target + "_scale_inv", storage.back().view()});
    });
    auto model = Model::Load(dir);
    ASSERT_TRUE(model.ok()) << model.status();
    const auto logits = PrefillLogits(**model, 12);
    const bool any_nan = std::any_of(logits.begin(), logits.end(), [](float v) { return std::isnan(v); });
    EXPECT_EQ(any_nan, with_nan);
  }
}

// WeightDType::kFP8 quantises every Linear matrix but the router and kv_b_proj at load: the model
// equals, bit for bit, the one whose checkpoint stores those matrices as the same FP8 codes and
// scales, and the router and kv_b_proj stay as stored.
TEST(LoaderTest, Fp8AtLoadEqualsTheCheckpointQuantisedOnDisk) {
  ScopedTempDir tmp;
  const auto quantisable = [](const std::string& name) {
    return absl::EndsWith(name, ".weight") && !absl::StrContains(name, "norm") &&
           !absl::StrContains(name, "embed_tokens") && !absl::EndsWith(name, "mlp.gate.weight") &&
           !absl::StrContains(name, "kv_b_proj");
  };
  int64_t quantised = 0;
  WriteEdited(tmp.File("fp8"), [&](auto& tensors, auto& storage) {
    const size_t n = tensors.size();
    for (size_t t = 0; t < n; ++t) {
      auto& [name, view] = tensors[t];
      if (!quantisable(name) || view.ndim != 2) continue;
      Fp8Matrix q = QuantiseFp8(view, /*power_of_two_scales=*/false);
      storage.push_back(std::move(q.codes));
      view = storage.back().view();
      storage.push_back(std::move(q.scales));
      tensors.push_back({name + "_scale_inv", storage.back().view()});
      ++quantised;
    }
  });
  ASSERT_GT(quantised, 10);
  LoadOptions fp8_at_load;
  fp8_at_load.weight_dtype = WeightDType::kFP8;
  auto at_load = Model::Load(TinyModelEnv::Get().dir(), fp8_at_load);
  auto on_disk = Model::Load(tmp.File("fp8"));
  ASSERT_TRUE(at_load.ok()) << at_load.status();
  ASSERT_TRUE(on_disk.ok()) << on_disk.status();
  EXPECT_EQ((*at_load)->load_report().fp8_tensors_quantised, quantised);
  EXPECT_EQ((*on_disk)->load_report().fp8_tensors_in_place, quantised);
  const DecoderLayerWeights& moe_layer = (*at_load)->weights().layers.back();
  ASSERT_FALSE(moe_layer.dense_mlp);
  EXPECT_NE(moe_layer.moe.router.dtype, DType::kF8E4M3) << "the router keeps its stored dtype";
  EXPECT_NE(moe_layer.attn.kv_b_proj.dtype, DType::kF8E4M3) << "kv_b_proj feeds the row kernels";
  EXPECT_EQ((*at_load)->weights().lm_head.dtype, DType::kF8E4M3);
  const auto a = PrefillLogits(**at_load, 12), b = PrefillLogits(**on_disk, 12);
  EXPECT_EQ(RelativeMaxDiff(a.data(), b.data(), a.size()), 0.0);
  // And a quantisation, not a copy: the head's weights moved, each by at most half a step of e4m3
  // (3 mantissa bits; subnormal steps of 2^-9 · scale below 2^-6 · scale).
  auto stored = Model::Load(TinyModelEnv::Get().dir());
  ASSERT_TRUE(stored.ok());
  const TensorView& head8 = (*at_load)->weights().lm_head;
  absl::StatusOr<Tensor> head = ToF32((*stored)->weights().lm_head);
  ASSERT_TRUE(head.ok());
  const int64_t in = head8.shape[1];
  std::vector<float> row(in);
  int64_t moved = 0;
  for (int64_t o = 0; o < head8.shape[0]; ++o) {
    const float* scales = head8.block_scale + (o / kFp8Block) * head8.scale_stride;
    WidenFp8Row(head8.as<uint8_t>() + o * head8.stride[0], scales, in, row.data());
    for (int64_t i = 0; i < in; ++i) {
      const float w = head->data<float>()[o * in + i], scale = scales[i / kFp8Block];
      ASSERT_LE(std::fabs(row[i] - w), std::fabs(w) / 16 + scale / 1024 + 1e-12) << "lm_head (" << o << ", " << i << ")";
      moved += row[i] != w;
    }
  }
  EXPECT_GT(moved, head8.shape[0] * in / 2);
}

// The process's anonymous resident memory in bytes (RssAnon in /proc/self/status), or -1.
int64_t AnonymousResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (absl::StartsWith(line, "RssAnon:")) return std::stoll(line.substr(8)) * 1024;
  }
  return -1;
}

// A load that converts reads each converted matrix once, so the default huge-page file memory must
// not also keep the whole checkpoint resident: a bf16 checkpoint loaded as FP8 grows the process by
// less than the bf16 files, not by the files plus the FP8 weights. The model equals the one loaded
// from mapped files, bit for bit, and the matrices kept as stored (router, kv_b_proj) are copies
// the model owns.
TEST(LoaderTest, ConvertingLoadDoesNotHoldTheFilesInMemory) {
  ScopedTempDir tmp;
  nlohmann::json config = TinyGlmConfig();
  config["vocab_size"] = 65536;  // a 64K x 144 embedding and head dominate the files
  RandomCheckpointOptions write;
  write.dtype = DType::kBF16;
  ASSERT_TRUE(WriteRandomCheckpoint(tmp.File("m"), config, write).ok());
  const int64_t file_bytes = std::filesystem::file_size(tmp.File("m") + "/model.safetensors");
  LoadOptions huge;
  huge.weight_dtype = WeightDType::kFP8;
  huge.file_memory = FileMemory::kHugePages;
  LoadOptions mapped = huge;
  mapped.file_memory = FileMemory::kMapped;
  const int64_t before = AnonymousResidentBytes();
  ASSERT_GT(before, 0);
  auto from_huge = Model::Load(tmp.File("m"), huge);
  const int64_t grown = AnonymousResidentBytes() - before;
  ASSERT_TRUE(from_huge.ok()) << from_huge.status();
  // Holding the files costs at least their size on top of the FP8 weights; without it the growth is
  // the FP8 head and the quantiser's buffers (the embedding is read in place from the mapping): about
  // a quarter of the files, and under AddressSanitizer, which does not reuse freed memory at once,
  // about three quarters.
  EXPECT_LT(grown, file_bytes) << "loading " << file_bytes << " bytes of bf16 as FP8";
  auto from_mapped = Model::Load(tmp.File("m"), mapped);
  ASSERT_TRUE(from_mapped.ok()) << from_mapped.status();
  const auto a = PrefillLogits(**from_huge, 12), b = PrefillLogits(**from_mapped, 12);
  EXPECT_EQ(RelativeMaxDiff(a.data(), b.data(), a.size()), 0.0);
  const ModelWeights& w = (*from_huge)->weights();
  const auto owned = [&](const TensorView& v) {
    return std::any_of(w.owned.begin(), w.owned.end(), [&](const Tensor& t) { return t.view().data == v.data; });
  };
  const DecoderLayerWeights& moe_layer = w.layers.back();
  ASSERT_FALSE(moe_layer.dense_mlp);
  EXPECT_EQ(moe_layer.moe.router.dtype, DType::kBF16);
  EXPECT_TRUE(owned(moe_layer.moe.router)) << "the router kept as stored is an owned copy";
  EXPECT_TRUE(owned(moe_layer.attn.kv_b_proj)) << "kv_b_proj kept as stored is an owned copy";
}

// An infinite weight cannot be quantised: the error names the tensor.
TEST(LoaderTest, Fp8AtLoadRefusesAnInfiniteWeight) {
  ScopedTempDir tmp;
  const std::string target = "model.layers.0.self_attn.o_proj.weight";
  WriteEdited(tmp.File("m"), [&](auto& tensors, auto& storage) {
    for (auto& [name, view] : tensors) {
      if (name != target) continue;
      absl::StatusOr<Tensor> copy = ToF32(view);
      ASSERT_TRUE(copy.ok());
      copy->data<float>()[5] = std::numeric_limits<float>::infinity();
      storage.push_back(std::move(*copy));
      view = storage.back().view();
    }
  });
  LoadOptions options;
  options.weight_dtype = WeightDType::kFP8;
  auto model = Model::Load(tmp.File("m"), options);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(std::string(model.status().message()), HasSubstr(target));
  EXPECT_THAT(std::string(model.status().message()), HasSubstr("cannot be quantised to FP8"));
}

// A checkpoint in the FP8 releases' layout, used in place, gives the logits of the same checkpoint
// widened to f32 at load (W8 · scale in f32) to f32 rounding: the widened model runs the f32
// kernels, while the FP8 tiles widen in registers and scale each 128-wide block's sum once (so the
// two round differently; the float64 reference in tests/kernels bounds the FP8 kernel itself).
// Dimensions that are not multiples of 128 leave partial scale blocks.
TEST(LoaderTest, Fp8InPlaceMatchesDequantisedToF32) {
  ScopedTempDir tmp;
  RandomCheckpointOptions options;
  options.dtype = DType::kF8E4M3;
  ASSERT_TRUE(WriteRandomCheckpoint(tmp.File("fp8"), TinyGlmConfigWithPartialFp8Blocks(), options).ok());
  auto in_place = Model::Load(tmp.File("fp8"));
  LoadOptions widen;
  widen.weight_dtype = WeightDType::kF32;
  auto widened = Model::Load(tmp.File("fp8"), widen);
  ASSERT_TRUE(in_place.ok()) << in_place.status();
  ASSERT_TRUE(widened.ok()) << widened.status();
  EXPECT_GT((*in_place)->load_report().fp8_tensors_in_place, 30);
  EXPECT_EQ((*widened)->load_report().fp8_tensors_in_place, 0);
  // FP8 bytes: the in-place model holds about a quarter of the widened one's weight bytes.
  EXPECT_LT((*in_place)->weights().weight_bytes, (*widened)->weights().weight_bytes / 2);
  const auto a = PrefillLogits(**in_place, 40), b = PrefillLogits(**widened, 40);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_LT(RelativeMaxDiff(a.data(), b.data(), a.size()), 1e-5);
}

// Under scale_fmt ue8m0 (DeepSeek-V3.2's quantization_config) the generator writes power-of-two
// scales, which the loader then accepts.
TEST(LoaderTest, Ue8m0CheckpointsGetPowerOfTwoScales) {
  ScopedTempDir tmp;
  nlohmann::json config = TinyGlmConfigWithPartialFp8Blocks();
  config["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                                   {"weight_block_size", {128, 128}}, {"scale_fmt", "ue8m0"}};
  RandomCheckpointOptions options;
  options.dtype = DType::kF8E4M3;
  ASSERT_TRUE(WriteRandomCheckpoint(tmp.File("m"), config, options).ok());
  auto model = Model::Load(tmp.File("m"));
  ASSERT_TRUE(model.ok()) << model.status();
  auto store = SafetensorsStore::Open(tmp.File("m"));
  ASSERT_TRUE(store.ok());
  int64_t scales = 0;
  for (const std::string& name : (*store)->names()) {
    if (!absl::EndsWith(name, "_scale_inv")) continue;
    const TensorView view = *(*store)->Get(name);
    for (int64_t i = 0; i < view.numel(); ++i) {
      int exponent = 0;
      ASSERT_EQ(std::frexp(view.as<float>()[i], &exponent), 0.5f) << name << " [" << i << "]";
      ++scales;
    }
  }
  EXPECT_GT(scales, 30);
}

// Bad block scales are errors that name the tensor: NaN, infinite, zero, negative, beyond any finite
// block's need, misshapen.
TEST(LoaderTest, BadFp8ScalesAreNamed) {
  const std::string target = "model.layers.1.mlp.shared_experts.up_proj.weight";  // [32, 64]
  const std::string scale_name = target + "_scale_inv";
  struct Case {
    const char* label;
    std::vector<int64_t> shape;
    float value;
    const char* message;
  };
  const Case cases[] = {
      {"nan", {1, 1}, std::nanf(""), "FP8 block scales must be finite, > 0 and at most"},
      {"inf", {1, 1}, std::numeric_limits<float>::infinity(), "FP8 block scales must be finite, > 0 and at most"},
      {"zero", {1, 1}, 0.0f, "FP8 block scales must be finite, > 0 and at most"},
      {"negative", {1, 1}, -0.5f, "FP8 block scales must be finite, > 0 and at most"},
      {"beyond f32", {1, 1}, 1e37f, "FP8 block scales must be finite, > 0 and at most"},
      {"misshapen", {2, 1}, 0.5f, "has shape [2, 1]"},
  };
  for (const Case& c : cases) {
    auto st = LoadError([&](auto& tensors, auto& storage) {
      for (auto& [name, view] : tensors) {
        if (name == target) {
          storage.push_back(Tensor::Zeros(DType::kF8E4M3, {32, 64}));
          view = storage.back().view();
        }
      }
      Tensor scale = Tensor::Empty(DType::kF32, c.shape);
      for (int64_t i = 0; i < scale.numel(); ++i) scale.data<float>()[i] = c.value;
      storage.push_back(std::move(scale));
      tensors.push_back({scale_name, storage.back().view()});
    });
    ASSERT_FALSE(st.ok()) << c.label;
    EXPECT_THAT(std::string(st.message()), HasSubstr(scale_name)) << c.label;
    EXPECT_THAT(std::string(st.message()), HasSubstr(c.message)) << c.label;
  }
}

// quantization_config is checked against the tensors: an FP8 weight whose module the config lists as
// unconverted, and a non-power-of-two scale under scale_fmt ue8m0, are errors that name them.
TEST(LoaderTest, QuantizationConfigIsCheckedAgainstTheTensors) {
  const std::string target = "model.layers.1.mlp.shared_experts.up_proj.weight";  // [32, 64]
  auto with_fp8_target = [&](float scale_value) {
    return [&, scale_value](auto& tensors, auto& storage) {
      for (auto& [name, view] : tensors) {
        if (name == target) {
          storage.push_back(Tensor::Zeros(DType::kF8E4M3, {32, 64}));
          view = storage.back().view();
        }
      }
      Tensor scale = Tensor::Empty(DType::kF32, {1, 1});
      scale.data<float>()[0] = scale_value;
      storage.push_back(std::move(scale));
      tensors.push_back({target + "_scale_inv", storage.back().view()});
    };
  };
  auto load_with_quantization = [&](const nlohmann::json& quantization, float scale_value) {
    ScopedTempDir tmp;
    WriteEdited(tmp.File("m"), with_fp8_target(scale_value));
    nlohmann::json config = nlohmann::json::parse(testing_util::ReadBytes(tmp.File("m/config.json")));
    config["quantization_config"] = quantization;
    testing_util::WriteBytes(tmp.File("m/config.json"), config.dump());
    auto model = Model::Load(tmp.File("m"));
    return model.ok() ? absl::OkStatus() : model.status();
  };
  const nlohmann::json fp8 = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 128}}};
  EXPECT_TRUE(load_with_quantization(fp8, 0.3f).ok());
  nlohmann::json excluded = fp8;
  excluded["modules_to_not_convert"] = {"model.layers.1.mlp.shared_experts"};
  absl::Status st = load_with_quantization(excluded, 0.3f);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr(target + " is F8_E4M3, but quantization_config.modules_to_not_convert"));
  nlohmann::json ue8m0 = fp8;
  ue8m0["scale_fmt"] = "ue8m0";
  EXPECT_TRUE(load_with_quantization(ue8m0, 0.25f).ok());
  st = load_with_quantization(ue8m0, 0.3f);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("scale_fmt ue8m0 means powers of two"));
  EXPECT_THAT(std::string(st.message()), HasSubstr(target + "_scale_inv"));
}

// A NaN or infinite norm weight is an error that names the tensor, not a model that emits NaN.
TEST(LoaderTest, NonFiniteNormWeightIsNamed) {
  const std::string target = "model.layers.2.post_attention_layernorm.weight";
  auto st = LoadError([&](auto& tensors, auto& storage) {
    for (auto& [name, view] : tensors) {
      if (name == target) {
        Tensor t = Tensor::Empty(DType::kF32, view.shape_vector());
        for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = i == 5 ? std::nanf("") : 1.0f;
        storage.push_back(std::move(t));
        view = storage.back().view();
      }
    }
  });
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr(target));
  EXPECT_THAT(std::string(st.message()), HasSubstr("at element 5; every value must be finite"));
}

TEST(LoaderTest, Fp8WithoutScaleIsMissingTheScale) {
  auto st = LoadError([](auto& tensors, auto& storage) {
    for (auto& [name, view] : tensors) {
      if (name == "model.layers.0.self_attn.q_a_proj.weight") {
        storage.push_back(Tensor::Zeros(DType::kF8E4M3, {48, 64}));
        view = storage.back().view();
      }
    }
  });
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("model.layers.0.self_attn.q_a_proj.weight_scale_inv"));
}

TEST(LoaderTest, ShardedCheckpointEqualsSingleFile) {
  ScopedTempDir tmp;
  RandomCheckpointOptions options;
  options.seed = 7;
  options.scale = 2.0;
  options.max_shard_bytes = 64 * 1024;
  ASSERT_TRUE(WriteRandomCheckpoint(tmp.File("sharded"), TinyGlmConfig(), options).ok());
  ASSERT_TRUE(std::filesystem::exists(tmp.File("sharded/model.safetensors.index.json")));
  auto sharded = Model::Load(tmp.File("sharded"));
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  const auto a = PrefillLogits(**sharded, 10), b = PrefillLogits(TinyModelEnv::Get().model(), 10);
  EXPECT_EQ(RelativeMaxDiff(a.data(), b.data(), a.size()), 0.0);
}

// bf16 weights used in place give the same logits as the same values widened to f32 at load.
TEST(LoaderTest, Bf16InPlaceEqualsWidenedCopy) {
  ScopedTempDir tmp;
  RandomCheckpointOptions options;
  options.seed = 8;
  options.dtype = DType::kBF16;
  ASSERT_TRUE(WriteRandomCheckpoint(tmp.File("bf16"), TinyGlmConfig(), options).ok());
  LoadOptions in_place, widened;
  widened.weight_dtype = WeightDType::kF32;
  auto a = Model::Load(tmp.File("bf16"), in_place);
  auto b = Model::Load(tmp.File("bf16"), widened);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->weights().layers[1].attn.q_b_proj.dtype, DType::kBF16);
  EXPECT_EQ((*b)->weights().layers[1].attn.q_b_proj.dtype, DType::kF32);
  const auto la = PrefillLogits(**a, 12), lb = PrefillLogits(**b, 12);
  EXPECT_LT(RelativeMaxDiff(la.data(), lb.data(), la.size()), 1e-5);
}

}  // namespace
}  // namespace mtpspec

namespace mtpspec {
namespace {

// For T ≤ K every causal key is selected, so the indexer weights cannot matter: a model whose
// indexers are replaced by different random ones gives bit-identical logits (docs/models.md, "IndexShare").
TEST(DenseEquivalenceTest, IndexerWeightsDoNotMatterWhileTFitsTopK) {
  ScopedTempDir tmp;
  WriteEdited(tmp.File("other_indexers"), [](auto& tensors, auto& storage) {
    for (auto& [name, view] : tensors) {
      if (name.find(".indexer.") == std::string::npos) continue;
      Tensor t = Tensor::Empty(DType::kF32, view.shape_vector());
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 0.37f * static_cast<float>((i * 7919) % 13) - 2.0f;
      storage.push_back(std::move(t));
      view = storage.back().view();
    }
  });
  auto other = Model::Load(tmp.File("other_indexers"));
  ASSERT_TRUE(other.ok()) << other.status();
  const Model& base = TinyModelEnv::Get().model();
  const int64_t K = base.config().index_topk;
  const auto a = PrefillLogits(**other, K), b = PrefillLogits(base, K);
  EXPECT_EQ(RelativeMaxDiff(a.data(), b.data(), a.size()), 0.0);
  // Beyond K the indexer decides, so the outputs differ.
  const auto c = PrefillLogits(**other, K + 12), d = PrefillLogits(base, K + 12);
  EXPECT_GT(RelativeMaxDiff(c.data(), d.data(), c.size()), 1e-4);
}

}  // namespace
}  // namespace mtpspec

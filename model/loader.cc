#include "model/loader.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/fp8_quantise.h"
#include "kernels/linear.h"
#include "model/tensor_table.h"

namespace mtpspec {
namespace {

constexpr size_t kMaxListed = 12;

std::string ListNames(const std::vector<std::string>& names) {
  std::vector<std::string> shown(names.begin(), names.begin() + std::min(names.size(), kMaxListed));
  std::string text = absl::StrJoin(shown, ", ");
  if (names.size() > kMaxListed) absl::StrAppend(&text, ", … (", names.size() - kMaxListed, " more)");
  return text;
}

// Layer index of "model.layers.{l}.…", or -1.
int64_t LayerIndexOf(absl::string_view name) {
  constexpr absl::string_view kPrefix = "model.layers.";
  if (!absl::StartsWith(name, kPrefix)) return -1;
  name.remove_prefix(kPrefix.size());
  const size_t dot = name.find('.');
  int64_t layer = -1;
  if (dot == absl::string_view::npos || !absl::SimpleAtoi(name.substr(0, dot), &layer)) return -1;
  return layer;
}

class WeightBuilder {
 public:
  // copy_kept: the store is mapped only for this load's conversions, so the matrices the kernels
  // read as stored are copied into owned (huge-page) buffers.
  WeightBuilder(const ModelConfig& config, const SafetensorsStore& store, const LoadOptions& options,
                ModelWeights& weights, LoadReport& report, bool copy_kept)
      : config_(config), store_(store), options_(options), weights_(weights), report_(report), copy_kept_(copy_kept) {}

  // How the model reads a matmul weight.
  enum class Use {
    kLinear,     // the Linear kernels, which take f32, bf16 and FP8
    kRowKernel,  // the absorbed attention's row kernels (kv_b_proj): f32, bf16 or FP8, never quantised
    kRouter,     // the MoE router: read by Linear, but never quantised (its scores pick experts)
  };

  // A matmul weight. FP8 stays FP8 with its block scales attached (the kernels widen it in
  // registers) unless the options convert every matrix. With WeightDType::kFP8 the other Linear
  // matrices are quantised to FP8 here.
  absl::StatusOr<TensorView> Matrix(const std::string& name, Use use = Use::kLinear) {
    ASSIGN_OR_RETURN(TensorView view, Raw(name));
    ++report_.tensors_loaded;
    const bool in_place = options_.weight_dtype == WeightDType::kAsStored || options_.weight_dtype == WeightDType::kFP8;
    const DType target = options_.weight_dtype == WeightDType::kBF16 ? DType::kBF16 : DType::kF32;
    if (view.dtype == DType::kF8E4M3) {
      ASSIGN_OR_RETURN(TensorView scale, Scales(name, view));
      if (in_place) {
        ++report_.fp8_tensors_in_place;
        return Count(WithScales(Kept(view), Kept(scale)));
      }
      ++report_.fp8_tensors_dequantised;
      return Count(Dequantise(view, scale, target));
    }
    if (view.dtype != DType::kF32 && view.dtype != DType::kBF16 && view.dtype != DType::kF16) {
      return BadDType(name, view.dtype, "F32, BF16, F16 or F8_E4M3 with weight_scale_inv");
    }
    if (options_.weight_dtype == WeightDType::kFP8 && use == Use::kLinear && view.ndim == 2 && Aligned(view)) {
      Fp8Matrix q = QuantiseFp8(view, /*power_of_two_scales=*/false);
      const float* s = q.scales.data<float>();
      for (int64_t i = 0; i < q.scales.numel(); ++i) {
        if (!(s[i] <= kMaxFp8BlockScale)) {  // an infinite weight (NaN weights stay NaN, as stored FP8 ones do)
          return absl::InvalidArgumentError(absl::StrCat(store_.FileOf(name), ": tensor ", name, " holds an infinite weight in block [",
                                                         i / q.scales.dim(1), ", ", i % q.scales.dim(1),
                                                         "]; it cannot be quantised to FP8"));
        }
      }
      ++report_.fp8_tensors_quantised;
      const TensorView codes = Keep(std::move(q.codes));
      return Count(WithScales(codes, Keep(std::move(q.scales))));
    }
    const bool keep = (view.dtype == DType::kF32 || view.dtype == DType::kBF16) && (in_place || view.dtype == target) &&
                      Aligned(view);
    if (keep) return Count(Kept(view));
    return Count(Convert(view, in_place && view.dtype == DType::kBF16 ? DType::kBF16 : target));
  }

  // A norm weight, bias or other small tensor, widened to f32; every value must be finite.
  absl::StatusOr<Tensor> Vector(const std::string& name) {
    ASSIGN_OR_RETURN(TensorView view, Raw(name));
    ++report_.tensors_loaded;
    if (view.dtype == DType::kF8E4M3 || view.dtype == DType::kI8 || view.dtype == DType::kU8 ||
        view.dtype == DType::kI32 || view.dtype == DType::kI64 || view.dtype == DType::kBool) {
      return BadDType(name, view.dtype, "a floating type");
    }
    weights_.weight_bytes += view.numel() * 4;
    ASSIGN_OR_RETURN(Tensor values, ToF32(view));
    for (int64_t i = 0; i < values.numel(); ++i) {
      if (!std::isfinite(values.data<float>()[i])) {
        return absl::InvalidArgumentError(absl::StrCat(store_.FileOf(name), ": tensor ", name, " holds ",
                                                       values.data<float>()[i], " at element ", i,
                                                       "; every value must be finite"));
      }
    }
    return values;
  }

  absl::StatusOr<TensorView> Embedding(const std::string& name) {
    ASSIGN_OR_RETURN(TensorView view, Raw(name));
    ++report_.tensors_loaded;
    if ((view.dtype == DType::kF32 || view.dtype == DType::kBF16) && Aligned(view)) return view;
    if (view.dtype != DType::kF16 && view.dtype != DType::kF32 && view.dtype != DType::kBF16) {
      return BadDType(name, view.dtype, "F32, BF16 or F16");
    }
    return Convert(view, DType::kF32);
  }

 private:
  absl::StatusOr<TensorView> Raw(const std::string& name) {
    absl::StatusOr<TensorView> view = store_.Get(name);
    if (!view.ok()) return absl::NotFoundError(absl::StrCat(store_.dir(), ": tensor ", name, ": ", view.status().message()));
    return view;
  }
  // The f32 block scales of FP8 weight `name`: in place when the file holds them as aligned f32,
  // else widened. Every scale must be finite, positive (a NaN, infinite, zero or negative scale
  // would turn a block of weights into garbage) and at most kMaxFp8BlockScale.
  absl::StatusOr<TensorView> Scales(const std::string& name, const TensorView& weight) {
    const std::string scale_name = ScaleNameOf(name);
    ASSIGN_OR_RETURN(TensorView scale, Raw(scale_name));
    const std::vector<int64_t> expected = ScaleShapeOf(weight.shape_vector());
    if (scale.shape_vector() != expected) {
      return absl::InvalidArgumentError(absl::StrCat(store_.FileOf(scale_name), ": tensor ", scale_name, " has shape ",
                                                     ShapeString(scale), "; the 128 x 128 blocks of ", name, " ",
                                                     ShapeString(weight), " need ", ShapeString(expected)));
    }
    if (scale.dtype != DType::kF32 && scale.dtype != DType::kBF16 && scale.dtype != DType::kF16) {
      return BadDType(scale_name, scale.dtype, "F32, BF16 or F16");
    }
    if (!(scale.dtype == DType::kF32 && Aligned(scale) && scale.is_contiguous())) scale = Convert(scale, DType::kF32);
    const float* s = scale.as<float>();
    for (int64_t i = 0; i < scale.numel(); ++i) {
      if (!(std::isfinite(s[i]) && s[i] > 0.0f && s[i] <= kMaxFp8BlockScale)) {
        return absl::InvalidArgumentError(absl::StrCat(
            store_.FileOf(scale_name), ": tensor ", scale_name, " holds ", s[i], " for block [", i / scale.shape[1],
            ", ", i % scale.shape[1], "]; FP8 block scales must be finite, > 0 and at most ", kMaxFp8BlockScale,
            " (FLT_MAX / 448: the scale of a block whose largest weight is the largest float)"));
      }
      int exponent = 0;
      if (config_.quantization.scale_fmt == "ue8m0" && std::frexp(s[i], &exponent) != 0.5f) {
        return absl::InvalidArgumentError(absl::StrCat(
            store_.FileOf(scale_name), ": tensor ", scale_name, " holds ", s[i], " for block [", i / scale.shape[1],
            ", ", i % scale.shape[1], "], but quantization_config.scale_fmt ue8m0 means powers of two"));
      }
    }
    return scale;
  }
  static bool Aligned(const TensorView& v) {
    return reinterpret_cast<uintptr_t>(v.data) % DTypeSize(v.dtype) == 0;
  }
  TensorView Count(TensorView v) {
    weights_.weight_bytes += static_cast<int64_t>(v.nbytes());
    return v;
  }
  absl::Status BadDType(const std::string& name, DType dtype, const std::string& expected) {
    return absl::InvalidArgumentError(absl::StrCat(store_.FileOf(name), ": tensor ", name, " has dtype ",
                                                   DTypeName(dtype), "; expected ", expected));
  }
  // An FP8 matrix with its block scales attached; the scales' bytes count as weight bytes. Its bytes
  // are read once here to learn whether the kernels may skip their NaN check (TensorView::fp8_nan_free).
  TensorView WithScales(TensorView fp8, const TensorView& scale) {
    fp8.block_scale = scale.as<float>();
    fp8.scale_stride = scale.stride[0];
    fp8.fp8_nan_free = !Fp8HasNanCode(fp8);
    weights_.weight_bytes += static_cast<int64_t>(scale.nbytes());
    return fp8;
  }
  // A matrix the kernels read as stored: the store's view, or an owned copy (see copy_kept).
  TensorView Kept(const TensorView& view) {
    if (!copy_kept_ || !view.is_contiguous()) return view;
    Tensor copy = Tensor::Empty(view.dtype, view.shape_vector());
    std::memcpy(copy.data<uint8_t>(), view.data, view.nbytes());
    return Keep(std::move(copy));
  }
  TensorView Keep(Tensor t) {
    weights_.owned.push_back(std::move(t));
    return weights_.owned.back().view();
  }
  TensorView Convert(const TensorView& src, DType target) {
    absl::StatusOr<Tensor> f32 = ToF32(src);
    MTPSPEC_CHECK(f32.ok());
    if (target == DType::kF32) return Keep(std::move(*f32));
    Tensor bf16 = Tensor::Empty(DType::kBF16, src.shape_vector());
    const float* s = f32->data<float>();
    uint16_t* d = bf16.data<uint16_t>();
    for (int64_t i = 0; i < src.numel(); ++i) d[i] = F32ToBf16(s[i]);
    return Keep(std::move(bf16));
  }
  // W[i, j] = W8[i, j] · scale_inv[i / 128, j / 128] (a multiply, despite the name).
  TensorView Dequantise(const TensorView& w8, const TensorView& scale, DType target) {
    const int64_t rows = w8.shape[0], cols = w8.shape[1], scale_stride = scale.stride[0];
    Tensor out = Tensor::Empty(DType::kF32, {rows, cols});
    const uint8_t* src = w8.as<uint8_t>();
    const float* s = scale.as<float>();
    float* dst = out.data<float>();
    for (int64_t i = 0; i < rows; ++i) {
      WidenFp8Row(src + i * w8.stride[0], s + (i / kFp8Block) * scale_stride, cols, dst + i * cols);
    }
    if (target == DType::kF32) return Keep(std::move(out));
    return Convert(Keep(std::move(out)), DType::kBF16);
  }

  const ModelConfig& config_;
  const SafetensorsStore& store_;
  const LoadOptions& options_;
  ModelWeights& weights_;
  LoadReport& report_;
  const bool copy_kept_;
};

absl::Status CheckTables(const ModelConfig& c, const SafetensorsStore& store, bool* mtp_present, LoadReport& report) {
  std::map<std::string, const TensorSpec*> expected;
  std::vector<std::vector<TensorSpec>> tables;
  tables.push_back(GlobalTensorSpecs(c));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) tables.push_back(DecoderLayerTensorSpecs(c, l));
  // An MTP layer counts as present if any of its tensors is.
  *mtp_present = false;
  for (int64_t l = c.num_hidden_layers; l < c.num_hidden_layers + c.num_nextn_predict_layers; ++l) {
    bool any = false;
    for (const std::string& name : store.names()) any = any || LayerIndexOf(name) == l;
    if (any) {
      tables.push_back(MtpLayerTensorSpecs(c, l));
      *mtp_present = true;
    }
  }
  for (const auto& table : tables) {
    for (const TensorSpec& spec : table) expected[spec.name] = &spec;
  }

  std::vector<std::string> missing, unexpected, misshapen;
  for (const auto& [name, spec] : expected) {
    if (!store.Has(name)) {
      if (!spec->optional) missing.push_back(name);
      continue;
    }
    absl::StatusOr<TensorView> view = store.Get(name);
    if (!view.ok()) return view.status();
    const std::vector<int64_t> shape = view->shape_vector();
    if (shape != spec->shape) {
      misshapen.push_back(absl::StrCat(name, " (", store.FileOf(name), ") has shape ", ShapeString(shape),
                                       ", the config implies ", ShapeString(spec->shape)));
    }
    if (view->dtype == DType::kF8E4M3) {
      const std::string scale_name = ScaleNameOf(name);
      if (ModuleIsNotConverted(c, name)) {
        misshapen.push_back(absl::StrCat(name, " is F8_E4M3, but quantization_config.modules_to_not_convert lists "
                                         "its module as unquantised"));
      } else if (spec->kind != TensorKind::kMatrix) {
        misshapen.push_back(absl::StrCat(name, " is F8_E4M3, which is only supported for matmul weights"));
      } else if (!store.Has(scale_name)) {
        missing.push_back(scale_name);
      } else {
        absl::StatusOr<TensorView> scale = store.Get(scale_name);
        if (!scale.ok()) return scale.status();
        if (scale->shape_vector() != ScaleShapeOf(spec->shape)) {
          misshapen.push_back(absl::StrCat(scale_name, " has shape ", ShapeString(*scale), ", expected ",
                                           ShapeString(ScaleShapeOf(spec->shape))));
        }
      }
    }
  }
  for (const std::string& name : store.names()) {
    if (expected.count(name)) continue;
    if (absl::EndsWith(name, "weight_scale_inv")) {
      std::string weight = name.substr(0, name.size() - std::string("_scale_inv").size());
      if (expected.count(weight)) continue;
    }
    unexpected.push_back(name);
  }
  std::vector<std::string> problems;
  if (!missing.empty()) problems.push_back(absl::StrCat(missing.size(), " missing tensor(s): ", ListNames(missing)));
  if (!unexpected.empty()) {
    problems.push_back(absl::StrCat(unexpected.size(), " unexpected tensor(s): ", ListNames(unexpected)));
  }
  if (!misshapen.empty()) problems.push_back(absl::StrCat(misshapen.size(), " bad shape(s): ", ListNames(misshapen)));
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(store.dir(), ": checkpoint does not match config.json: ", absl::StrJoin(problems, "; ")));
  }
  return absl::OkStatus();
}

absl::Status BuildBlock(const ModelConfig& c, int64_t layer, bool dense_mlp, bool indexer, WeightBuilder& b,
                        DecoderLayerWeights& out) {
  const std::string p = absl::StrCat("model.layers.", layer, ".");
  ASSIGN_OR_RETURN(out.input_norm, b.Vector(p + "input_layernorm.weight"));
  ASSIGN_OR_RETURN(out.post_attention_norm, b.Vector(p + "post_attention_layernorm.weight"));
  const std::string a = p + "self_attn.";
  MlaWeights& attn = out.attn;
  ASSIGN_OR_RETURN(attn.q_a_proj, b.Matrix(a + "q_a_proj.weight"));
  ASSIGN_OR_RETURN(attn.q_a_norm, b.Vector(a + "q_a_layernorm.weight"));
  ASSIGN_OR_RETURN(attn.q_b_proj, b.Matrix(a + "q_b_proj.weight"));
  ASSIGN_OR_RETURN(attn.kv_a_proj, b.Matrix(a + "kv_a_proj_with_mqa.weight"));
  ASSIGN_OR_RETURN(attn.kv_a_norm, b.Vector(a + "kv_a_layernorm.weight"));
  // kv_b_proj feeds the absorbed attention's row kernels, which read an FP8 kv_b_proj in place
  // (each weight times its block scale, as widening it at load would give).
  ASSIGN_OR_RETURN(attn.kv_b_proj, b.Matrix(a + "kv_b_proj.weight", WeightBuilder::Use::kRowKernel));
  ASSIGN_OR_RETURN(attn.o_proj, b.Matrix(a + "o_proj.weight"));
  if (indexer) {
    IndexerWeights iw;
    const std::string i = a + "indexer.";
    ASSIGN_OR_RETURN(iw.wq_b, b.Matrix(i + "wq_b.weight"));
    ASSIGN_OR_RETURN(iw.wk, b.Matrix(i + "wk.weight"));
    ASSIGN_OR_RETURN(iw.k_norm_weight, b.Vector(i + "k_norm.weight"));
    ASSIGN_OR_RETURN(iw.k_norm_bias, b.Vector(i + "k_norm.bias"));
    ASSIGN_OR_RETURN(iw.weights_proj, b.Matrix(i + "weights_proj.weight"));
    attn.indexer = std::move(iw);
  }
  auto mlp = [&](const std::string& prefix, MlpWeights& m) -> absl::Status {
    ASSIGN_OR_RETURN(m.gate, b.Matrix(prefix + "gate_proj.weight"));
    ASSIGN_OR_RETURN(m.up, b.Matrix(prefix + "up_proj.weight"));
    ASSIGN_OR_RETURN(m.down, b.Matrix(prefix + "down_proj.weight"));
    return absl::OkStatus();
  };
  out.dense_mlp = dense_mlp;
  const std::string m = p + "mlp.";
  if (dense_mlp) return mlp(m, out.mlp);
  ASSIGN_OR_RETURN(out.moe.router, b.Matrix(m + "gate.weight", WeightBuilder::Use::kRouter));
  ASSIGN_OR_RETURN(out.moe.router_bias, b.Vector(m + "gate.e_score_correction_bias"));
  out.moe.experts.resize(c.n_routed_experts);
  for (int64_t e = 0; e < c.n_routed_experts; ++e) {
    RETURN_IF_ERROR(mlp(absl::StrCat(m, "experts.", e, "."), out.moe.experts[e]));
  }
  if (c.n_shared_experts > 0) {
    out.moe.shared.emplace();
    RETURN_IF_ERROR(mlp(m + "shared_experts.", *out.moe.shared));
  }
  return absl::OkStatus();
}

int64_t CountParameters(const std::vector<TensorSpec>& specs, const SafetensorsStore& store) {
  int64_t n = 0;
  for (const TensorSpec& s : specs) {
    if (s.optional && !store.Has(s.name)) continue;
    int64_t numel = 1;
    for (int64_t d : s.shape) numel *= d;
    n += numel;
  }
  return n;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadWeights(const ModelConfig& c, const std::string& dir,
                                                          const LoadOptions& options, LoadReport* report_out) {
  LoadReport local_report;
  LoadReport& report = report_out ? *report_out : local_report;
  auto weights = std::make_unique<ModelWeights>();
  // A load that converts reads each converted matrix once, so reading the files into anonymous huge
  // pages would hold a second, dead copy of those weights (a bf16 checkpoint loaded as FP8 would
  // need 1.5x its size). Such a load maps the files, whose pages the kernel may drop, and copies
  // what the kernels read as stored into owned huge-page buffers instead.
  const bool converting = options.weight_dtype != WeightDType::kAsStored;
  const bool copy_kept = converting && options.file_memory == FileMemory::kHugePages;
  ASSIGN_OR_RETURN(weights->store, SafetensorsStore::Open(dir, copy_kept ? FileMemory::kMapped : options.file_memory));
  const SafetensorsStore& store = *weights->store;
  bool mtp_present = false;
  RETURN_IF_ERROR(CheckTables(c, store, &mtp_present, report));
  report.mtp_present = mtp_present;
  if (c.num_nextn_predict_layers == 0) {
    report.mtp_note = "config.json has num_nextn_predict_layers = 0";
  } else if (!mtp_present) {
    report.mtp_note = absl::StrCat("the checkpoint has no tensors for MTP layer ", c.num_hidden_layers);
  } else if (!options.load_mtp) {
    report.mtp_note = "MTP loading was switched off";
  }

  WeightBuilder b(c, store, options, *weights, report, copy_kept);
  ASSIGN_OR_RETURN(weights->embed, b.Embedding("model.embed_tokens.weight"));
  ASSIGN_OR_RETURN(weights->final_norm, b.Vector("model.norm.weight"));
  if (c.tie_word_embeddings) {
    weights->lm_head = weights->embed;
  } else {
    ASSIGN_OR_RETURN(weights->lm_head, b.Matrix("lm_head.weight"));
  }
  weights->parameter_count = CountParameters(GlobalTensorSpecs(c), store);
  weights->layers.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    RETURN_IF_ERROR(BuildBlock(c, l, c.layer_is_dense[l], c.layer_has_indexer[l], b, weights->layers[l]));
    weights->parameter_count += CountParameters(DecoderLayerTensorSpecs(c, l), store);
  }
  if (mtp_present && options.load_mtp) {
    weights->mtp.resize(c.num_nextn_predict_layers);
    for (int64_t k = 0; k < c.num_nextn_predict_layers; ++k) {
      const int64_t l = c.num_hidden_layers + k;
      const std::string p = absl::StrCat("model.layers.", l, ".");
      MtpLayerWeights& mtp = weights->mtp[k];
      ASSIGN_OR_RETURN(mtp.enorm, b.Vector(p + "enorm.weight"));
      ASSIGN_OR_RETURN(mtp.hnorm, b.Vector(p + "hnorm.weight"));
      ASSIGN_OR_RETURN(mtp.eh_proj, b.Matrix(p + "eh_proj.weight"));
      ASSIGN_OR_RETURN(mtp.shared_head_norm, b.Vector(p + "shared_head.norm.weight"));
      mtp.own_embed = store.Has(p + "embed_tokens.weight");
      mtp.own_head = store.Has(p + "shared_head.head.weight");
      if (mtp.own_embed) {
        ASSIGN_OR_RETURN(mtp.embed, b.Embedding(p + "embed_tokens.weight"));
      } else {
        mtp.embed = weights->embed;
      }
      if (mtp.own_head) {
        ASSIGN_OR_RETURN(mtp.head, b.Matrix(p + "shared_head.head.weight"));
      } else {
        mtp.head = weights->lm_head;
      }
      RETURN_IF_ERROR(BuildBlock(c, l, /*dense_mlp=*/false, /*indexer=*/c.has_indexer, b, mtp.block));
      weights->mtp_parameter_count += CountParameters(MtpLayerTensorSpecs(c, l), store);
    }
  }
  if (options.activations != ActivationPrecision::kF32) {
    report.matrices_reduced_activations = SetActivations(*weights, options.activations);
    if (report.matrices_reduced_activations == 0) {
      const bool bf16 = options.activations == ActivationPrecision::kBf16;
      report.activations_note = absl::StrCat("activations ", ActivationPrecisionName(options.activations),
                                             " change nothing: no matrix of ", dir, " is FP8", bf16 ? " or bf16" : "",
                                             " (load it with weights fp8 to quantise them",
                                             bf16 ? "" : ", or take bf16 rows with activations bf16", ")");
    }
  }
  return weights;
}

}  // namespace mtpspec

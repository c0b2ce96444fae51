#include "kernels/linear_cuda.h"

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "kernels/linear_cuda_launch.h"

namespace mtpspec::cuda {
namespace {

bool IsBlockScaledFp8(const TensorView& w) {
  return w.dtype == DType::kF8E4M3 && w.block_scale != nullptr && w.ndim == 2;
}

// Appends w's rows and scale rows to `image` (which already holds image->out rows).
void AppendFp8Rows(const TensorView& w, Fp8HostImage* image) {
  const int64_t out = w.shape[0];
  const int64_t in = w.shape[1];
  for (int64_t o = 0; o < out; ++o) {
    const uint8_t* src = w.row<uint8_t>(o);  // [in]
    image->bytes.insert(image->bytes.end(), src, src + in);
  }
  for (int64_t b = 0; b < Fp8Blocks(out); ++b) {
    const float* src = w.block_scale + b * w.scale_stride;  // [ceil(in / 128)]
    image->scales.insert(image->scales.end(), src, src + image->scale_cols);
  }
  image->out += out;
}

}  // namespace

size_t DeviceMatrix::bytes() const {
  if (!is_fp8()) return static_cast<size_t>(out * in) * sizeof(__nv_bfloat16);
  const int64_t scale_rows = fp8.scale_split == 0 ? Fp8Blocks(out)
                                                  : Fp8Blocks(fp8.scale_split) + Fp8Blocks(out - fp8.scale_split);
  return static_cast<size_t>(out * in) + static_cast<size_t>(scale_rows * fp8.scale_cols) * sizeof(float);
}

absl::StatusOr<Fp8HostImage> Fp8ImageOf(const TensorView& w, const std::string& name) {
  if (!IsBlockScaledFp8(w)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": expected a 2-D FP8 matrix with block scales, got ",
                                                   DTypeName(w.dtype), w.block_scale ? "" : " without scales"));
  }
  Fp8HostImage image;
  image.in = w.shape[1];
  image.scale_cols = Fp8Blocks(image.in);
  AppendFp8Rows(w, &image);
  return image;
}

absl::StatusOr<Fp8HostImage> StackedFp8ImageOf(const TensorView& first, const TensorView& second,
                                               const std::string& name) {
  ASSIGN_OR_RETURN(Fp8HostImage image, Fp8ImageOf(first, name));
  if (!IsBlockScaledFp8(second) || second.shape[1] != image.in) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": the second matrix is not a 2-D FP8 matrix with block ",
                                                   "scales and input width ", image.in));
  }
  image.scale_split = image.out;
  AppendFp8Rows(second, &image);
  return image;
}

float Fp8ImageWeight(const Fp8HostImage& image, int64_t o, int64_t i) {
  const int64_t i0 = i - i % 8;
  uint64_t bits = 0;
  for (int64_t j = 0; j < 8 && i0 + j < image.in; ++j) {
    bits |= static_cast<uint64_t>(image.bytes[static_cast<size_t>(o * image.in + i0 + j)]) << (8 * j);
  }
  const float scale = image.scales[static_cast<size_t>(Fp8ScaleRow(o, image.scale_split) * image.scale_cols +
                                                       i / kDeviceFp8Block)];
  float widened[8];
  WidenFp8x8(bits, scale, widened);
  return widened[i - i0];
}

absl::StatusOr<const void*> WeightArena::UploadBytes(const void* data, size_t bytes, const std::string& name) {
  ASSIGN_OR_RETURN(DeviceArray<uint8_t> block, DeviceArray<uint8_t>::Create(static_cast<int64_t>(bytes), name));
  if (bytes > 0) {
    RETURN_IF_ERROR(FromCuda(cudaMemcpy(block.data(), data, bytes, cudaMemcpyHostToDevice),
                             absl::StrCat("upload of ", name)));
  }
  const void* device = block.data();
  bytes_ += bytes;
  blocks_.push_back(std::move(block));
  return device;
}

TensorView HostMatrixForUpload(const TensorView& w, Tensor& holder) {
  if (w.dtype != DType::kF8E4M3 || w.block_scale == nullptr || w.ndim != 2) return w;
  holder = Tensor::Empty(DType::kF32, {w.shape[0], w.shape[1]});
  for (int64_t o = 0; o < w.shape[0]; ++o) {
    const uint8_t* src = w.row<uint8_t>(o);
    const float* scale = w.block_scale + (o / kFp8Block) * w.scale_stride;
    float* dst = holder.data<float>() + o * w.shape[1];
    for (int64_t i = 0; i < w.shape[1]; ++i) dst[i] = F8E4M3ToF32(src[i]) * scale[i / kFp8Block];
  }
  return holder.view();
}

absl::StatusOr<DeviceMatrix> WeightArena::UploadMatrix(const TensorView& w, const std::string& name) {
  if (w.ndim != 2) return absl::InvalidArgumentError(absl::StrCat(name, ": expected a 2-D weight, got ", w.ndim, "-D"));
  if (w.dtype != DType::kF32 && w.dtype != DType::kBF16 && !(w.dtype == DType::kF8E4M3 && w.block_scale)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": GPU weights must be f32, bf16 or FP8 with block scales on ",
                                                   "the host (got ", DTypeName(w.dtype), ")"));
  }
  if (w.activations != ActivationPrecision::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": the CUDA kernels take f32 input rows, but this ",
                                                   DTypeName(w.dtype), " matrix was loaded for ",
                                                   ActivationPrecisionName(w.activations),
                                                   " activations; load it with activations f32 for the device"));
  }
  const int64_t out = w.shape[0];
  const int64_t in = w.shape[1];
  std::vector<uint16_t> packed(static_cast<size_t>(out * in));  // [out, in] bf16 bits, contiguous
  for (int64_t o = 0; o < out; ++o) {
    uint16_t* dst = packed.data() + o * in;
    if (w.dtype == DType::kBF16) {
      const uint16_t* src = w.row<uint16_t>(o);
      for (int64_t i = 0; i < in; ++i) dst[i] = src[i];
    } else if (w.dtype == DType::kF8E4M3) {  // dequantised: W8 · its block scale, rounded to bf16
      const uint8_t* src = w.row<uint8_t>(o);
      const float* scale = w.block_scale + (o / kFp8Block) * w.scale_stride;
      for (int64_t i = 0; i < in; ++i) dst[i] = F32ToBf16(F8E4M3ToF32(src[i]) * scale[i / kFp8Block]);
    } else {
      const float* src = w.row<float>(o);
      for (int64_t i = 0; i < in; ++i) dst[i] = F32ToBf16(src[i]);
    }
  }
  ASSIGN_OR_RETURN(const void* device, UploadBytes(packed.data(), packed.size() * sizeof(uint16_t), name));
  return DeviceMatrix{static_cast<const __nv_bfloat16*>(device), out, in, {}};
}

absl::StatusOr<DeviceMatrix> WeightArena::UploadFp8Image(const Fp8HostImage& image, const std::string& name) {
  if (image.out < 1 || image.in < 1 || static_cast<int64_t>(image.bytes.size()) != image.out * image.in ||
      image.scale_cols != Fp8Blocks(image.in)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": inconsistent FP8 image [", image.out, ", ", image.in, "]"));
  }
  ASSIGN_OR_RETURN(const void* bytes, UploadBytes(image.bytes.data(), image.bytes.size(), name));
  ASSIGN_OR_RETURN(const void* scales,
                   UploadBytes(image.scales.data(), image.scales.size() * sizeof(float), name + " (block scales)"));
  DeviceMatrix matrix;
  matrix.out = image.out;
  matrix.in = image.in;
  matrix.fp8 = Fp8Weights{static_cast<const uint8_t*>(bytes), static_cast<const float*>(scales), image.scale_cols,
                          image.scale_split};
  return matrix;
}

bool WeightArena::KeepsFp8(const TensorView& w) const {
  return format_ == DeviceWeightFormat::kFp8 && IsBlockScaledFp8(w) && w.activations == ActivationPrecision::kF32;
}

absl::StatusOr<DeviceMatrix> WeightArena::UploadLinearMatrix(const TensorView& w, const std::string& name) {
  // UploadMatrix also states the error for a matrix loaded for bf16 or fp8 input rows.
  if (!KeepsFp8(w)) return UploadMatrix(w, name);
  ASSIGN_OR_RETURN(const Fp8HostImage image, Fp8ImageOf(w, name));
  return UploadFp8Image(image, name);
}

absl::StatusOr<const float*> WeightArena::UploadF32(const TensorView& t, const std::string& name) {
  ASSIGN_OR_RETURN(Tensor widened, ToF32(t));  // contiguous f32 copy
  ASSIGN_OR_RETURN(const void* device, UploadBytes(widened.data<float>(), widened.view().nbytes(), name));
  return static_cast<const float*>(device);
}

absl::Status LinearRows(Context& ctx, const float* x, int64_t rows, const DeviceMatrix& w, int64_t out_begin,
                        int64_t out_end, float* y) {
  if (w.empty() || rows < 0 || out_begin < 0 || out_end > w.out || out_begin > out_end) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::Linear: bad arguments (rows ", rows, ", outputs [",
                                                   out_begin, ", ", out_end, ") of ", w.out, ")"));
  }
  const int64_t out = out_end - out_begin;
  if (rows == 0 || out == 0) return absl::OkStatus();
  if (rows <= kMaxGemvRows) {
    if (w.is_fp8()) {
      return FromCuda(launch::GemvFp8(x, rows, w.fp8, out_begin, out, w.in, y, ctx.stream()), "GemvFp8");
    }
    return FromCuda(launch::GemvBf16(x, rows, w.data + out_begin * w.in, out, w.in, y, ctx.stream()), "GemvBf16");
  }
  // Workspace: x in bf16 [rows, in], then (FP8) the weight rows widened to bf16 [out, in].
  const size_t x_bytes = static_cast<size_t>(rows * w.in) * sizeof(__nv_bfloat16);
  const size_t x_span = (x_bytes + 255) / 256 * 256;  // the widened rows start 256-byte aligned
  const size_t w_bytes = w.is_fp8() ? static_cast<size_t>(out * w.in) * sizeof(__nv_bfloat16) : 0;
  ASSIGN_OR_RETURN(void* scratch, ctx.Workspace(x_span + w_bytes));
  auto* x_bf16 = static_cast<__nv_bfloat16*>(scratch);  // [rows, in]
  RETURN_IF_ERROR(FromCuda(launch::F32ToBf16(x, rows * w.in, x_bf16, ctx.stream()), "F32ToBf16"));
  const __nv_bfloat16* w_rows = w.is_fp8() ? nullptr : w.data + out_begin * w.in;  // [out, in]
  if (w.is_fp8()) {
    auto* widened = reinterpret_cast<__nv_bfloat16*>(static_cast<uint8_t*>(scratch) + x_span);  // [out, in]
    RETURN_IF_ERROR(FromCuda(launch::WidenFp8ToBf16(w.fp8, out_begin, out, w.in, widened, ctx.stream()),
                             "WidenFp8ToBf16"));
    w_rows = widened;
  }
  // Column-major view: yᵀ[out, rows] = W[out, in] (stored as Wᵀ col-major, ld in) · xᵀ[in, rows].
  const float alpha = 1.0f;
  const float beta = 0.0f;
  return FromCublas(cublasGemmEx(ctx.blas(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(rows),
                                 static_cast<int>(w.in), &alpha, w_rows, CUDA_R_16BF, static_cast<int>(w.in), x_bf16,
                                 CUDA_R_16BF, static_cast<int>(w.in), &beta, y, CUDA_R_32F, static_cast<int>(out),
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    "cublasGemmEx (Linear)");
}

absl::Status Linear(Context& ctx, const float* x, int64_t rows, const DeviceMatrix& w, float* y) {
  return LinearRows(ctx, x, rows, w, 0, w.out, y);
}

}  // namespace mtpspec::cuda

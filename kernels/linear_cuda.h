// Dense matrix products on the GPU, the CUDA twin of kernels/linear.h.
//
// Weights live on the device row-major [out, in] (PyTorch nn.Linear layout), uploaded once by a
// WeightArena: in bf16, or (DeviceWeightFormat::kFp8) an FP8 checkpoint matrix as stored, e4m3
// bytes with f32 128 × 128 block scales (kernels/fp8_device.h). Linear computes
// y[r, o] = Σ_i x[r, i] · W[o, i] with fp32 accumulation:
//   * rows ≤ kMaxGemvRows (decode, verify blocks): our own GEMV kernel reads each weight once for
//     all rows (an FP8 weight is widened and multiplied by its block scale in registers), keeps x in
//     fp32, and computes every (row, output) in one fixed order that does not depend on how many
//     rows the call has. That is what makes speculative decoding on the GPU bit-identical to plain
//     decoding (the same property kernels/linear.cc has below 24 rows).
//   * more rows (prefill chunks): cuBLAS GemmEx, x rounded to bf16, bf16 × bf16 → fp32 output,
//     CUBLAS_COMPUTE_32F. An FP8 matrix is first widened to bf16 in the workspace, to the very
//     values its bf16 upload would hold, so both formats give the same prefill bits.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cuda_context.h"
#include "core/device.h"
#include "core/limits.h"
#include "core/tensor.h"
#include "kernels/fp8_device.h"

namespace mtpspec::cuda {

inline constexpr int64_t kMaxGemvRows = kMaxVerifyRows;  // core/limits.h

// A weight matrix on the device, bf16 or FP8. Non-owning (the WeightArena owns the memory).
struct DeviceMatrix {
  const __nv_bfloat16* data = nullptr;  // bf16 form: [out, in] row-major, rows contiguous
  int64_t out = 0;
  int64_t in = 0;
  Fp8Weights fp8;  // FP8 form (set instead of `data`): bytes [out, in], scales [scale rows, ceil(in / 128)]
  bool is_fp8() const { return fp8.bytes != nullptr; }
  bool empty() const { return data == nullptr && fp8.bytes == nullptr; }
  // The device bytes a product reads: 2 per weight in bf16; 1 per weight plus the scales in FP8.
  size_t bytes() const;
};

// An FP8 matrix laid out for the device, on the host: what UploadLinearMatrix copies over.
struct Fp8HostImage {
  std::vector<uint8_t> bytes;  // [out, in] e4m3, rows contiguous
  std::vector<float> scales;   // [scale rows, scale_cols]
  int64_t out = 0;
  int64_t in = 0;
  int64_t scale_cols = 0;   // ceil(in / 128)
  int64_t scale_split = 0;  // as Fp8Weights::scale_split
};

// The image of one FP8 matrix with block scales (w.block_scale set), or of two stacked ones
// (`first`'s rows, then `second`'s, each with its own scale grid; scale_split = first's rows).
// InvalidArgument (naming `name`) for anything else or for differing input widths.
absl::StatusOr<Fp8HostImage> Fp8ImageOf(const TensorView& w, const std::string& name);
absl::StatusOr<Fp8HostImage> StackedFp8ImageOf(const TensorView& first, const TensorView& second,
                                               const std::string& name);
// Weight (o, i) of an image as the kernels see it: e4m3 widened, times its block scale.
float Fp8ImageWeight(const Fp8HostImage& image, int64_t o, int64_t i);

// A host matrix that upload code reads as f32 or bf16: `w` itself, or (FP8 with block scales) its
// dequantised values widened to f32 into `holder`.
TensorView HostMatrixForUpload(const TensorView& w, Tensor& holder);

// Owns every weight uploaded for one model. Uploads are synchronous (load time only).
class WeightArena {
 public:
  // `format` decides what UploadLinearMatrix does with FP8 matrices.
  explicit WeightArena(DeviceWeightFormat format = DeviceWeightFormat::kBf16) : format_(format) {}
  DeviceWeightFormat format() const { return format_; }
  // True when this arena keeps `w` FP8 on the device: format() is kFp8 and w is a 2-D FP8 matrix
  // with block scales loaded for f32 input rows (the only rows the device kernels take).
  bool KeepsFp8(const TensorView& w) const;

  // A 2-D f32, bf16 or FP8 (with block scales) host matrix → bf16 on the device (f32 and dequantised
  // FP8 rounded to nearest even), whatever format() says: for kernels that read bf16 rows
  // themselves. `name` appears in errors (the tensor's checkpoint name).
  absl::StatusOr<DeviceMatrix> UploadMatrix(const TensorView& w, const std::string& name);
  // For matrices that only Linear reads: a matrix KeepsFp8 accepts stays FP8 (its bytes and scales
  // as stored); anything else goes as UploadMatrix.
  absl::StatusOr<DeviceMatrix> UploadLinearMatrix(const TensorView& w, const std::string& name);
  // An image from Fp8ImageOf / StackedFp8ImageOf → an FP8 DeviceMatrix.
  absl::StatusOr<DeviceMatrix> UploadFp8Image(const Fp8HostImage& image, const std::string& name);
  // Any floating host tensor (1-D or more) → f32 on the device, contiguous.
  absl::StatusOr<const float*> UploadF32(const TensorView& t, const std::string& name);
  // Raw host bytes (already in device layout) → device.
  absl::StatusOr<const void*> UploadBytes(const void* data, size_t bytes, const std::string& name);
  size_t bytes() const { return bytes_; }

 private:
  DeviceWeightFormat format_;
  std::vector<DeviceArray<uint8_t>> blocks_;
  size_t bytes_ = 0;
};

// y[rows, out] = x[rows, in] · wᵀ. x and y are device pointers, contiguous; y must not alias x.
absl::Status Linear(Context& ctx, const float* x, int64_t rows, const DeviceMatrix& w, float* y);

// The same for weight rows [out_begin, out_end) only; y has out_end − out_begin columns.
absl::Status LinearRows(Context& ctx, const float* x, int64_t rows, const DeviceMatrix& w, int64_t out_begin,
                        int64_t out_end, float* y);

}  // namespace mtpspec::cuda

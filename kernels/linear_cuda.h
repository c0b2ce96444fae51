// Dense matrix products on the GPU, the CUDA twin of kernels/linear.h.
//
// Weights live on the device in bf16, row-major [out, in] (PyTorch nn.Linear layout), and are
// uploaded once by a WeightArena. Linear computes y[r, o] = Σ_i x[r, i] · W[o, i] with fp32
// accumulation:
//   * rows ≤ kMaxGemvRows (decode, verify blocks): our own GEMV kernel reads each weight once for
//     all rows, keeps x in fp32, and computes every (row, output) in one fixed order that does not
//     depend on how many rows the call has. That is what makes speculative decoding on the GPU
//     bit-identical to plain decoding (the same property kernels/linear.cc has below 24 rows).
//   * more rows (prefill chunks): cuBLAS GemmEx, x rounded to bf16, bf16 × bf16 → fp32 output,
//     CUBLAS_COMPUTE_32F.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cuda_context.h"
#include "core/limits.h"
#include "core/tensor.h"

namespace mtpspec::cuda {

inline constexpr int64_t kMaxGemvRows = kMaxVerifyRows;  // core/limits.h

// A bf16 weight matrix on the device. Non-owning (the WeightArena owns the memory).
struct DeviceMatrix {
  const __nv_bfloat16* data = nullptr;  // [out, in] row-major, rows contiguous
  int64_t out = 0;
  int64_t in = 0;
  bool empty() const { return data == nullptr; }
  size_t bytes() const { return static_cast<size_t>(out * in) * sizeof(__nv_bfloat16); }
};

// A host matrix that upload code reads as f32 or bf16: `w` itself, or (FP8 with block scales) its
// dequantised values widened to f32 into `holder`.
TensorView HostMatrixForUpload(const TensorView& w, Tensor& holder);

// Owns every weight uploaded for one model. Uploads are synchronous (load time only).
class WeightArena {
 public:
  // A 2-D f32, bf16 or FP8 (with block scales) host matrix → bf16 on the device (f32 and dequantised
  // FP8 rounded to nearest even). `name`
  // appears in errors (the tensor's checkpoint name).
  absl::StatusOr<DeviceMatrix> UploadMatrix(const TensorView& w, const std::string& name);
  // Any floating host tensor (1-D or more) → f32 on the device, contiguous.
  absl::StatusOr<const float*> UploadF32(const TensorView& t, const std::string& name);
  // Raw host bytes (already in device layout) → device.
  absl::StatusOr<const void*> UploadBytes(const void* data, size_t bytes, const std::string& name);
  size_t bytes() const { return bytes_; }

 private:
  std::vector<DeviceArray<uint8_t>> blocks_;
  size_t bytes_ = 0;
};

// y[rows, out] = x[rows, in] · wᵀ. x and y are device pointers, contiguous; y must not alias x.
absl::Status Linear(Context& ctx, const float* x, int64_t rows, const DeviceMatrix& w, float* y);

// The same for weight rows [out_begin, out_end) only; y has out_end − out_begin columns.
absl::Status LinearRows(Context& ctx, const float* x, int64_t rows, const DeviceMatrix& w, int64_t out_begin,
                        int64_t out_end, float* y);

}  // namespace mtpspec::cuda

// Tensor view and owner.
//
// Dimension-order convention (stated once, used everywhere): shapes list the outermost dimension
// first, row-major, exactly as PyTorch, numpy and safetensors do. The last dimension is the
// contiguous one; strides count elements, not bytes. A linear weight has shape [out, in], so each
// output row is contiguous and y = W·x streams W row by row. Shape comments in the code use the
// same order, e.g. `// [rows, hidden]`.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace mtpspec {

inline constexpr int kMaxDims = 4;
// Rows and columns of one FP8 scale block (`weight_scale_inv`, docs/models.md, "FP8 checkpoints").
inline constexpr int64_t kFp8Block = 128;
// The largest FP8 block scale a checkpoint may hold: FLT_MAX / 448, the scale of a block whose largest
// weight is the largest float (448 is the largest e4m3 value). Larger scales only describe weights
// beyond f32's range, and the kernels, which scale by 2^8 on the way, rely on the bound.
inline constexpr float kMaxFp8BlockScale = 3.40282347e38f / 448.0f;

// The precision in which a Linear takes its input rows (LoadOptions::activations). kF32: as given;
// each weight is widened to f32 in registers and every product is exact. kBf16: each row rounded to
// bf16, for FP8 and bf16 matrices; kFp8: for FP8 matrices, each row quantised to float8_e4m3fn in
// groups of 128 with power-of-two scales, as DeepSeek-V3.2's reference code quantises activations
// before its FP8 GEMM (other matrices keep f32 rows). The reduced settings multiply bf16 pairs
// (kernels/fp8_pairs.h), which takes fewer operations per weight than widening each weight to f32:
// for FP8 matrices the small-row tiles for decode and verify, and from kLinearGemmRows rows, for FP8
// and bf16 matrices, the pair GEMM for prefill (kernels/pair_gemm.h). kF32 is the exact reference.
enum class ActivationPrecision { kF32, kBf16, kFp8 };
absl::StatusOr<ActivationPrecision> ParseActivationPrecision(const std::string& text, const std::string& what);
const char* ActivationPrecisionName(ActivationPrecision precision);

// Non-owning view of an element array. Copying a view never copies data. The memory belongs to a
// Tensor, an mmap'd file or a caller; the view must not outlive it.
struct TensorView {
  DType dtype = DType::kF32;
  void* data = nullptr;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> stride{};  // in elements
  // F8_E4M3 matrices only: the f32 block scales, [⌈rows/128⌉, ⌈cols/128⌉] with row stride
  // `scale_stride`. Element (i, j) stands for data[i, j] · block_scale[(i/128)·scale_stride + j/128].
  const float* block_scale = nullptr;
  int64_t scale_stride = 0;
  // F8_E4M3 only: set when no byte of the matrix is a NaN encoding (0x7f, 0xff), as the loader finds
  // by reading them (Fp8HasNanCode, kernels/linear.h). The kernels then skip their NaN check; when
  // unset they check, so a NaN weight gives NaN.
  bool fp8_nan_free = false;
  // F8_E4M3 and BF16 only: how Linear takes its input rows with this matrix (set by the loader;
  // kFp8 for F8_E4M3 only).
  ActivationPrecision activations = ActivationPrecision::kF32;
  // F8_E4M3 with bf16 or fp8 activations, optional: which 64-byte lines of each row hold a byte the
  // pair kernels must widen by table (Fp8PairLinesToFix, kernels/fp8_pairs.h), [rows, line_flag_stride]
  // bits. Without them the kernels check every line.
  const uint64_t* fp8_line_flags = nullptr;
  int64_t line_flag_stride = 0;  // 64-bit words per row

  static TensorView Contiguous(DType dtype, void* data, std::initializer_list<int64_t> shape);
  static TensorView Contiguous(DType dtype, void* data, const std::vector<int64_t>& shape);

  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype); }
  bool is_contiguous() const;
  int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }
  std::vector<int64_t> shape_vector() const { return {shape.begin(), shape.begin() + ndim}; }
  bool empty() const { return data == nullptr; }

  template <typename T>
  T* as() const { return static_cast<T*>(data); }
  // Pointer to row r of a 2-D (or flattened leading dims) contiguous tensor.
  template <typename T>
  T* row(int64_t r) const { return static_cast<T*>(data) + r * stride[ndim - 2]; }
};

// "[a, b, c]"
std::string ShapeString(const std::vector<int64_t>& shape);
std::string ShapeString(const TensorView& view);

// Owner of a 64-byte aligned, contiguous buffer. Move-only; copies are explicit (Clone).
class Tensor {
 public:
  Tensor() = default;
  static Tensor Empty(DType dtype, const std::vector<int64_t>& shape);
  static Tensor Zeros(DType dtype, const std::vector<int64_t>& shape);
  Tensor Clone() const;

  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  const TensorView& view() const { return view_; }
  TensorView& view() { return view_; }
  DType dtype() const { return view_.dtype; }
  int64_t numel() const { return view_.numel(); }
  int64_t dim(int i) const { return view_.dim(i); }
  bool empty() const { return view_.data == nullptr; }
  template <typename T>
  T* data() const { return view_.as<T>(); }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> buffer_;
  TensorView view_;
};

// Converts any floating view (f32, bf16, f16, f8e4m3) to a new contiguous f32 tensor.
absl::StatusOr<Tensor> ToF32(const TensorView& src);

}  // namespace mtpspec

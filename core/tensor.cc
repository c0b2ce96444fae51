#include "core/tensor.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mtpspec {

TensorView TensorView::Contiguous(DType dtype, void* data, const std::vector<int64_t>& shape) {
  MTPSPEC_CHECK(shape.size() <= kMaxDims);
  TensorView v;
  v.dtype = dtype;
  v.data = data;
  v.ndim = static_cast<int>(shape.size());
  int64_t s = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.shape[i] = shape[i];
    v.stride[i] = s;
    s *= shape[i];
  }
  return v;
}

TensorView TensorView::Contiguous(DType dtype, void* data, std::initializer_list<int64_t> shape) {
  return Contiguous(dtype, data, std::vector<int64_t>(shape));
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && stride[i] != s) return false;
    s *= shape[i];
  }
  return true;
}

absl::StatusOr<ActivationPrecision> ParseActivationPrecision(const std::string& text, const std::string& what) {
  if (text == "f32") return ActivationPrecision::kF32;
  if (text == "bf16") return ActivationPrecision::kBf16;
  if (text == "fp8") return ActivationPrecision::kFp8;
  return absl::InvalidArgumentError(absl::StrCat(what, " must be f32, bf16 or fp8, got \"", text, "\""));
}

const char* ActivationPrecisionName(ActivationPrecision precision) {
  switch (precision) {
    case ActivationPrecision::kBf16: return "bf16";
    case ActivationPrecision::kFp8: return "fp8";
    default: return "f32";
  }
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}
std::string ShapeString(const TensorView& view) { return ShapeString(view.shape_vector()); }

void Tensor::Free::operator()(void* p) const { std::free(p); }

Tensor Tensor::Empty(DType dtype, const std::vector<int64_t>& shape) {
  Tensor t;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  size_t bytes = static_cast<size_t>(n) * DTypeSize(dtype);
  // Large buffers (KV caches above all) are read at scattered rows: the gather path touches K
  // random latent rows per layer, one 4 KiB page each, so with small pages every row costs a TLB
  // walk. Ask for transparent huge pages there (a hint: the kernel may ignore it).
  constexpr size_t kHugePage = size_t{2} << 20;
  const bool huge = bytes >= 2 * kHugePage;
  const size_t alignment = huge ? kHugePage : 64;
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded == 0 ? 64 : rounded);
  MTPSPEC_CHECK(p != nullptr);
#if defined(__linux__)
  if (huge) madvise(p, rounded, MADV_HUGEPAGE);
#endif
  t.buffer_.reset(p);
  t.view_ = TensorView::Contiguous(dtype, p, shape);
  return t;
}

Tensor Tensor::Zeros(DType dtype, const std::vector<int64_t>& shape) {
  Tensor t = Empty(dtype, shape);
  std::memset(t.view_.data, 0, t.view_.nbytes());
  return t;
}

Tensor Tensor::Clone() const {
  Tensor t = Empty(view_.dtype, view_.shape_vector());
  MTPSPEC_CHECK(view_.is_contiguous());
  if (view_.data) std::memcpy(t.view_.data, view_.data, view_.nbytes());
  return t;
}

absl::StatusOr<Tensor> ToF32(const TensorView& src) {
  if (!src.is_contiguous()) return absl::InvalidArgumentError("ToF32: view is not contiguous");
  Tensor out = Tensor::Empty(DType::kF32, src.shape_vector());
  float* dst = out.data<float>();
  const int64_t n = src.numel();
  switch (src.dtype) {
    case DType::kF32:
      std::memcpy(dst, src.data, n * sizeof(float));
      break;
    case DType::kBF16: {
      const uint16_t* s = src.as<uint16_t>();
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(s[i]);
      break;
    }
    case DType::kF16: {
      const uint16_t* s = src.as<uint16_t>();
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(s[i]);
      break;
    }
    case DType::kF8E4M3: {
      const uint8_t* s = src.as<uint8_t>();
      for (int64_t i = 0; i < n; ++i) dst[i] = F8E4M3ToF32(s[i]);
      break;
    }
    case DType::kF64: {
      const double* s = src.as<double>();
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      break;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("ToF32: dtype ", std::string(DTypeName(src.dtype)), " is not a floating type"));
  }
  return out;
}

}  // namespace mtpspec

#include "model/weight_check.h"

#include <algorithm>
#include <cstring>

#include "core/parallel.h"

namespace mtpspec {
namespace {

// Whether the element with these bits is NaN or ±Inf: all exponent bits set (for e4m3fn, the
// exponent and mantissa both all ones, since it has no infinities).
template <typename Bits>
bool NonFiniteBits(Bits bits, Bits mask, Bits pattern) {
  return (bits & mask) == pattern;
}

struct Scan {
  int64_t count = 0;
  int64_t first = -1;
};

template <typename Bits>
Scan ScanBits(const void* data, int64_t n, Bits mask, Bits pattern) {
  // Chunks scanned in parallel; each chunk's count and first hit are merged in order.
  constexpr int64_t kChunk = int64_t{1} << 20;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<Scan> per_chunk(static_cast<size_t>(chunks));
  const auto* bytes = static_cast<const unsigned char*>(data);
  DefaultThreadPool().ParallelFor(chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      Scan& s = per_chunk[static_cast<size_t>(c)];
      const int64_t hi = std::min(n, (c + 1) * kChunk);
      for (int64_t i = c * kChunk; i < hi; ++i) {
        Bits bits;
        std::memcpy(&bits, bytes + i * sizeof(Bits), sizeof(Bits));
        if (NonFiniteBits<Bits>(bits, mask, pattern)) {
          if (s.first < 0) s.first = i;
          ++s.count;
        }
      }
    }
  });
  Scan total;
  for (const Scan& s : per_chunk) {
    if (total.first < 0) total.first = s.first;
    total.count += s.count;
  }
  return total;
}

}  // namespace

std::vector<NonFiniteTensor> FindNonFiniteTensors(const SafetensorsStore& store) {
  std::vector<NonFiniteTensor> found;
  for (const auto& file : store.files()) {
    for (const std::string& name : file->names()) {
      absl::StatusOr<TensorView> view = file->Get(name);
      if (!view.ok()) continue;  // Open already validated every entry
      const int64_t n = view->numel();
      Scan scan;
      switch (view->dtype) {
        case DType::kF32:
          scan = ScanBits<uint32_t>(view->data, n, 0x7f800000u, 0x7f800000u);
          break;
        case DType::kBF16:
          scan = ScanBits<uint16_t>(view->data, n, 0x7f80, 0x7f80);
          break;
        case DType::kF16:
          scan = ScanBits<uint16_t>(view->data, n, 0x7c00, 0x7c00);
          break;
        case DType::kF8E4M3:
          scan = ScanBits<uint8_t>(view->data, n, 0x7f, 0x7f);
          break;
        default:
          continue;
      }
      if (scan.count > 0) found.push_back({name, file->path(), scan.count, scan.first});
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return found;
}

}  // namespace mtpspec

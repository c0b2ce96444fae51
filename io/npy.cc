#include "io/npy.h"

#include <cctype>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/file_util.h"

namespace mtpspec {
namespace {

constexpr char kMagic[] = "\x93NUMPY";  // 6 bytes, followed by major and minor version bytes
constexpr size_t kMagicSize = 6;
constexpr size_t kHeaderAlignment = 64;  // numpy pads magic + length + header to a multiple of 64

std::optional<std::string_view> NumpyDescr(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "<f4";
    case DType::kI32:
      return "<i4";
    case DType::kI64:
      return "<i8";
    default:
      return std::nullopt;
  }
}

std::optional<DType> DTypeOfDescr(std::string_view descr) {
  for (DType dtype : {DType::kF32, DType::kI32, DType::kI64}) {
    if (NumpyDescr(dtype) == descr) return dtype;
  }
  return std::nullopt;
}

// A cursor over the header, which is a Python dict literal such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : text_(text) {}

  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool ConsumeWord(std::string_view word) {
    SkipSpace();
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  // A '...' or "..." literal without escapes (numpy never writes any).
  std::optional<std::string> String() {
    SkipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) return std::nullopt;
    const char quote = text_[pos_];
    const size_t close = text_.find(quote, pos_ + 1);
    if (close == std::string_view::npos) return std::nullopt;
    std::string value(text_.substr(pos_ + 1, close - pos_ - 1));
    pos_ = close + 1;
    return value;
  }
  // A non-negative decimal integer that fits in int64.
  std::optional<int64_t> Integer() {
    SkipSpace();
    const size_t start = pos_;
    int64_t value = 0;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      if (__builtin_mul_overflow(value, 10, &value) ||
          __builtin_add_overflow(value, text_[pos_] - '0', &value)) {
        return std::nullopt;
      }
      ++pos_;
    }
    if (pos_ == start) return std::nullopt;
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2 long suffix
    return value;
  }
  // "(d0, d1, ...)" with an optional trailing comma; "()" for a 0-d array.
  std::optional<std::vector<int64_t>> Tuple() {
    if (!Consume('(')) return std::nullopt;
    std::vector<int64_t> values;
    if (Consume(')')) return values;
    while (true) {
      std::optional<int64_t> value = Integer();
      if (!value || values.size() == 64) return std::nullopt;
      values.push_back(*value);
      if (Consume(')')) return values;
      if (!Consume(',')) return std::nullopt;
      if (Consume(')')) return values;
    }
  }
  bool AtEnd() {
    SkipSpace();
    return pos_ == text_.size();
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

struct NpyHeader {
  std::string descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<int64_t>> shape;
};

absl::StatusOr<NpyHeader> ParseHeaderDict(std::string_view name, std::string_view text) {
  const auto malformed = [&](std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(name), ": malformed .npy header (",
                                                   std::string(what),
                                                   "): ", std::string(text.substr(0, 200))));
  };
  HeaderParser parser(text);
  NpyHeader header;
  if (!parser.Consume('{')) return malformed("expected '{'");
  while (!parser.Consume('}')) {
    std::optional<std::string> key = parser.String();
    if (!key || !parser.Consume(':')) return malformed("expected 'key':");
    if (*key == "descr") {
      std::optional<std::string> descr = parser.String();
      if (!descr) return malformed("descr is not a string");
      header.descr = *descr;
    } else if (*key == "fortran_order") {
      if (parser.ConsumeWord("True")) {
        header.fortran_order = true;
      } else if (parser.ConsumeWord("False")) {
        header.fortran_order = false;
      } else {
        return malformed("fortran_order is not True or False");
      }
    } else if (*key == "shape") {
      header.shape = parser.Tuple();
      if (!header.shape) return malformed("shape is not a tuple of non-negative integers");
    } else {
      return malformed(absl::StrCat("unexpected key '", *key, "'"));
    }
    if (!parser.Consume(',')) {
      if (!parser.Consume('}')) return malformed("expected ',' or '}'");
      break;
    }
  }
  if (!parser.AtEnd()) return malformed("trailing characters after '}'");
  if (header.descr.empty() || !header.fortran_order || !header.shape) {
    return malformed("needs descr, fortran_order and shape");
  }
  return header;
}

}  // namespace

absl::Status WriteNpy(const std::string& path, const TensorView& view) {
  const std::optional<std::string_view> descr = NumpyDescr(view.dtype);
  if (!descr) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": WriteNpy supports F32, I32 and I64, not ", std::string(DTypeName(view.dtype))));
  }
  if (view.ndim < 0 || view.ndim > kMaxDims || !view.is_contiguous() ||
      (view.data == nullptr && view.nbytes() > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(path,
                                                   ": WriteNpy needs a contiguous view with "
                                                   "data and at most ",
                                                   kMaxDims, " dims"));
  }
  const std::vector<int64_t> shape = view.shape_vector();
  const std::string shape_text = shape.size() == 1
                                     ? absl::StrCat("(", shape[0], ",)")
                                     : absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
  std::string header = absl::StrCat("{'descr': '", std::string(*descr),
                                    "', 'fortran_order': False, 'shape': ", shape_text, ", }");
  // Pad with spaces and end with '\n' so the data starts on a 64-byte boundary.
  const size_t unpadded = kMagicSize + 2 + 2 + header.size() + 1;
  header.append((kHeaderAlignment - unpadded % kHeaderAlignment) % kHeaderAlignment, ' ');
  header.push_back('\n');

  std::string prefix(kMagic, kMagicSize);
  prefix.push_back(1);  // version 1.0
  prefix.push_back(0);
  prefix.push_back(static_cast<char>(header.size() & 0xff));
  prefix.push_back(static_cast<char>(header.size() >> 8));

  ASSIGN_OR_RETURN(AtomicFileWriter out, AtomicFileWriter::Create(path));
  RETURN_IF_ERROR(out.Append(prefix.data(), prefix.size()));
  RETURN_IF_ERROR(out.Append(header.data(), header.size()));
  RETURN_IF_ERROR(out.Append(view.data, view.nbytes()));
  return out.Commit();
}

absl::StatusOr<Tensor> ParseNpy(std::string_view name, std::string_view bytes) {
  const auto error = [&](std::string_view message) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(name), ": ", std::string(message)));
  };
  if (bytes.size() < kMagicSize + 4 || bytes.substr(0, kMagicSize) != std::string_view(kMagic, 6)) {
    return error("not a .npy file (bad magic)");
  }
  const auto byte_at = [&](size_t i) { return static_cast<uint8_t>(bytes[i]); };
  const int major = byte_at(6);
  size_t header_start = 0;
  uint64_t header_size = 0;
  if (major == 1) {
    header_start = 10;
    header_size = byte_at(8) | (byte_at(9) << 8);
  } else if (major == 2 || major == 3) {
    header_start = 12;
    if (bytes.size() < header_start) return error("truncated header length");
    for (int i = 3; i >= 0; --i) header_size = (header_size << 8) | byte_at(8 + i);
  } else {
    return error(absl::StrCat("unsupported .npy format version ", major));
  }
  if (header_size > bytes.size() - header_start) return error("header runs past the end of file");
  ASSIGN_OR_RETURN(NpyHeader header,
                   ParseHeaderDict(name, bytes.substr(header_start, header_size)));

  const std::optional<DType> dtype = DTypeOfDescr(header.descr);
  if (!dtype) {
    return error(absl::StrCat("unsupported dtype '", header.descr,
                              "' (need little-endian <f4, <i4 or <i8)"));
  }
  if (*header.fortran_order) return error("Fortran-order arrays are not supported");
  const std::vector<int64_t>& shape = *header.shape;
  if (shape.size() > static_cast<size_t>(kMaxDims)) {
    return error(absl::StrCat("shape ", ShapeString(shape), " has more than ", kMaxDims, " dims"));
  }
  // As for safetensors: the product of the non-zero dims must fit, so that strides computed in
  // any order cannot overflow.
  int64_t nonzero_product = 1;
  bool has_zero_dim = false;
  for (int64_t dim : shape) {
    if (dim == 0) {
      has_zero_dim = true;
    } else if (__builtin_mul_overflow(nonzero_product, dim, &nonzero_product)) {
      return error(absl::StrCat("shape ", ShapeString(shape), " overflows"));
    }
  }
  const uint64_t numel = has_zero_dim ? 0 : static_cast<uint64_t>(nonzero_product);
  const uint64_t element_size = DTypeSize(*dtype);
  const uint64_t data_size = bytes.size() - header_start - header_size;
  if (numel > data_size / element_size || numel * element_size != data_size) {
    return error(absl::StrCat("shape ", ShapeString(shape), " of ", header.descr, " needs ", numel,
                              " elements of ", element_size, " bytes but the file has ", data_size,
                              " data bytes"));
  }
  Tensor tensor = Tensor::Empty(*dtype, shape);
  if (data_size > 0) {
    std::memcpy(tensor.data<char>(), bytes.data() + header_start + header_size, data_size);
  }
  return tensor;
}

namespace {
constexpr int64_t kMaxNpyFileBytes = int64_t{16} << 30;  // read whole into memory
}  // namespace

absl::StatusOr<Tensor> ReadNpy(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string bytes, ReadFileToString(path, kMaxNpyFileBytes));
  return ParseNpy(path, bytes);
}

}  // namespace mtpspec

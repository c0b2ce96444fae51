#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/json_util.h"

namespace mtpspec {
namespace {

using Json = nlohmann::json;

absl::Status FileError(absl::string_view path, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", message));
}

absl::Status TensorError(absl::string_view path, absl::string_view tensor,
                         absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": tensor \"", tensor, "\": ", message));
}

uint64_t ReadLittleEndianU64(const uint8_t* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

// Reads `field` of a tensor entry as a non-negative integer that fits in int64.
absl::StatusOr<uint64_t> NonNegativeInteger(const Json& value, absl::string_view path,
                                            absl::string_view tensor, absl::string_view field) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return TensorError(path, tensor, absl::StrCat(field, " value ", v, " is too large"));
    }
    return v;
  }
  if (value.is_number_integer()) {  // signed, so negative
    return TensorError(path, tensor,
                       absl::StrCat(field, " value ", value.get<int64_t>(), " is negative"));
  }
  return TensorError(path, tensor,
                     absl::StrCat(field, " holds a ", value.type_name(), ", not an integer"));
}

struct ParsedTensorEntry {
  DType dtype;
  std::vector<int64_t> shape;  // outermost first
  uint64_t begin;
  uint64_t end;
};

// Validates one `"name": {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}` entry on its
// own; the caller checks the offsets against the data section and the other tensors.
absl::StatusOr<ParsedTensorEntry> ParseTensorEntry(const Json& value, absl::string_view path,
                                                   absl::string_view tensor) {
  if (!value.is_object()) {
    return TensorError(path, tensor,
                       absl::StrCat("entry is a JSON ", value.type_name(), ", not an object"));
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(field)) {
      return TensorError(path, tensor, absl::StrCat("missing \"", field, "\""));
    }
  }
  ParsedTensorEntry entry;

  const Json& dtype = value["dtype"];
  if (!dtype.is_string()) {
    return TensorError(path, tensor,
                       absl::StrCat("dtype is a JSON ", dtype.type_name(), ", not a string"));
  }
  absl::StatusOr<DType> parsed_dtype = ParseSafetensorsDType(dtype.get<std::string>());
  if (!parsed_dtype.ok()) return TensorError(path, tensor, parsed_dtype.status().message());
  entry.dtype = *parsed_dtype;

  const Json& shape = value["shape"];
  if (!shape.is_array()) {
    return TensorError(path, tensor,
                       absl::StrCat("shape is a JSON ", shape.type_name(), ", not an array"));
  }
  if (shape.size() > static_cast<size_t>(kMaxDims)) {
    return TensorError(path, tensor,
                       absl::StrCat("shape has ", shape.size(), " dimensions; at most ", kMaxDims,
                                    " are supported"));
  }
  for (const Json& dim_value : shape) {
    ASSIGN_OR_RETURN(const uint64_t dim, NonNegativeInteger(dim_value, path, tensor, "shape"));
    entry.shape.push_back(static_cast<int64_t>(dim));
  }
  // Every partial product of the non-zero dims must fit in int64 so that strides computed in any
  // order cannot overflow; the tensor's element count is 0 if any dim is 0.
  int64_t nonzero_product = 1;
  bool has_zero_dim = false;
  for (const int64_t dim : entry.shape) {
    if (dim == 0) {
      has_zero_dim = true;
    } else if (__builtin_mul_overflow(nonzero_product, dim, &nonzero_product)) {
      return TensorError(
          path, tensor,
          absl::StrCat("shape ", ShapeString(entry.shape), " overflows the element count"));
    }
  }
  int64_t max_bytes = 0;
  if (__builtin_mul_overflow(nonzero_product, static_cast<int64_t>(DTypeSize(entry.dtype)),
                             &max_bytes)) {
    return TensorError(
        path, tensor,
        absl::StrCat("shape ", ShapeString(entry.shape), " overflows the byte count"));
  }
  const uint64_t expected_bytes = has_zero_dim ? 0 : static_cast<uint64_t>(max_bytes);

  const Json& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) {
    return TensorError(path, tensor, "data_offsets must be an array [begin, end]");
  }
  ASSIGN_OR_RETURN(entry.begin, NonNegativeInteger(offsets[0], path, tensor, "data_offsets"));
  ASSIGN_OR_RETURN(entry.end, NonNegativeInteger(offsets[1], path, tensor, "data_offsets"));
  if (entry.begin > entry.end) {
    return TensorError(
        path, tensor,
        absl::StrCat("data_offsets [", entry.begin, ", ", entry.end, "] has begin > end"));
  }
  if (entry.end - entry.begin != expected_bytes) {
    return TensorError(
        path, tensor,
        absl::StrCat("data_offsets [", entry.begin, ", ", entry.end, "] span ",
                     entry.end - entry.begin, " bytes but ", std::string(DTypeName(entry.dtype)),
                     " ", ShapeString(entry.shape), " needs ", expected_bytes));
  }
  return entry;
}

}  // namespace

class SafetensorsFile::Mapping {
 public:
  Mapping(void* address, size_t size) : address_(address), size_(size) {}
  ~Mapping() { munmap(address_, size_); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const uint8_t* bytes() const { return static_cast<const uint8_t*>(address_); }

 private:
  void* address_;
  size_t size_;
};

SafetensorsFile::~SafetensorsFile() = default;

namespace {

// Reads the whole file behind `fd` into fresh anonymous memory aligned to 2 MiB and advised for
// transparent huge pages, then makes it read-only. *address / *length describe the mapping to
// munmap (it starts up to 2 MiB before *data).
absl::Status ReadIntoHugePages(const std::string& path, int fd, size_t size, void** address, size_t* length,
                               const uint8_t** data) {
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t rounded = (size + kHugePage - 1) / kHugePage * kHugePage;
  *length = rounded + kHugePage;
  *address = ::mmap(nullptr, *length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (*address == MAP_FAILED) {
    const int error = errno;
    *address = nullptr;
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": cannot allocate ", size, " bytes to read the file into: ", std::strerror(error)));
  }
  const uintptr_t base = reinterpret_cast<uintptr_t>(*address);
  uint8_t* aligned = reinterpret_cast<uint8_t*>((base + kHugePage - 1) / kHugePage * kHugePage);
  ::madvise(aligned, rounded, MADV_HUGEPAGE);  // a hint: the kernel may give 4 KiB pages anyway
  size_t done = 0;
  while (done < size) {
    const ssize_t got = ::pread(fd, aligned + done, std::min<size_t>(size - done, size_t{1} << 30),
                                static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return absl::DataLossError(
          absl::StrCat(path, ": read failed after ", done, " of ", size, " bytes: ", std::strerror(errno)));
    }
    if (got == 0) {
      return absl::DataLossError(
          absl::StrCat(path, ": read stopped after ", done, " of ", size, " bytes (the file shrank while it was read)"));
    }
    done += static_cast<size_t>(got);
  }
  ::mprotect(aligned, rounded, PROT_READ);
  *data = aligned;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path, FileMemory memory) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (fstat below then refuses it).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int error = errno;
    const std::string message = absl::StrCat(path, ": cannot open: ", std::strerror(error));
    return error == ENOENT ? absl::NotFoundError(message) : absl::PermissionDeniedError(message);
  }
  struct stat info;
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return FileError(path, "not a regular file");
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->size_ = static_cast<uint64_t>(info.st_size);
  // Files too short to hold the length prefix are reported by ParseHeader; mmap rejects length 0.
  if (file->size_ >= 8 && memory == FileMemory::kHugePages) {
    void* address = nullptr;
    size_t length = 0;
    const absl::Status read = ReadIntoHugePages(path, fd, file->size_, &address, &length, &file->bytes_);
    if (address != nullptr) file->mapping_ = std::make_unique<Mapping>(address, length);
    if (!read.ok()) {
      ::close(fd);
      return read;
    }
  } else if (file->size_ >= 8) {
    void* address = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (address == MAP_FAILED) {
      const int error = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": mmap failed: ", std::strerror(error)));
    }
    file->mapping_ = std::make_unique<Mapping>(address, file->size_);
    file->bytes_ = file->mapping_->bytes();
  }
  ::close(fd);  // the mapping keeps the file contents reachable
  RETURN_IF_ERROR(file->ParseHeader());
  return file;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBuffer(std::string name,
                                                                             std::string bytes) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = std::move(name);
  file->buffer_ = std::move(bytes);
  file->bytes_ = reinterpret_cast<const uint8_t*>(file->buffer_.data());
  file->size_ = file->buffer_.size();
  RETURN_IF_ERROR(file->ParseHeader());
  return file;
}

absl::Status SafetensorsFile::ParseHeader() {
  if (size_ < 8) {
    return FileError(path_, absl::StrCat("truncated: the file has ", size_,
                                         " bytes, fewer than the 8-byte header length"));
  }
  const uint64_t header_size = ReadLittleEndianU64(bytes_);
  if (header_size > kMaxSafetensorsHeaderBytes) {
    return FileError(path_, absl::StrCat("header length ", header_size, " exceeds the limit of ",
                                         kMaxSafetensorsHeaderBytes, " bytes (corrupt file?)"));
  }
  if (header_size > size_ - 8) {
    return FileError(
        path_, absl::StrCat("header length ", header_size, " runs past the end of the ", size_,
                            "-byte file (truncated?)"));
  }
  const char* header_begin = reinterpret_cast<const char*>(bytes_ + 8);
  ASSIGN_OR_RETURN(Json header,
                   ParseJsonText(std::string_view(header_begin, header_size), path_, "header"));
  if (!header.is_object()) {
    return FileError(path_,
                     absl::StrCat("header is a JSON ", header.type_name(), ", not an object"));
  }

  const uint64_t data_start = 8 + header_size;
  const uint64_t data_size = size_ - data_start;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      ASSIGN_OR_RETURN(metadata_, ParseStringMap(value, path_, "__metadata__"));
      continue;
    }
    ASSIGN_OR_RETURN(ParsedTensorEntry parsed, ParseTensorEntry(value, path_, name));
    if (parsed.end > data_size) {
      return TensorError(path_, name,
                         absl::StrCat("data_offsets end ", parsed.end, " is beyond the ", data_size,
                                      "-byte data section"));
    }
    Entry entry{parsed.dtype,
                std::move(parsed.shape),
                parsed.begin,
                parsed.end,
                bytes_ + data_start + parsed.begin,
                Tensor()};
    entries_.emplace(name, std::move(entry));
  }

  // The tensors must tile the data section: sorted by offset, each starts where the previous ended.
  std::vector<std::pair<const std::string*, const Entry*>> by_offset;
  by_offset.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) by_offset.emplace_back(&name, &entry);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second->begin, a.second->end) < std::tie(b.second->begin, b.second->end);
  });
  uint64_t covered_until = 0;
  const std::string* previous = nullptr;
  for (const auto& [name, entry] : by_offset) {
    if (entry->begin < covered_until) {
      return TensorError(
          path_, *name,
          absl::StrCat("bytes [", entry->begin, ", ", entry->end, ") overlap tensor \"", *previous,
                       "\" which ends at ", covered_until));
    }
    if (entry->begin > covered_until) {
      const std::string before =
          previous ? absl::StrCat("tensor \"", *previous, "\" ends at ", covered_until)
                   : std::string("the data section starts at 0");
      return TensorError(path_, *name,
                         absl::StrCat("starts at byte ", entry->begin, " but ", before,
                                      "; safetensors forbids gaps in the data section"));
    }
    covered_until = entry->end;
    previous = name;
  }
  if (covered_until != data_size) {
    return FileError(path_, absl::StrCat("the data section has ", data_size,
                                         " bytes but the tensors cover only ", covered_until,
                                         "; safetensors forbids trailing bytes"));
  }

  for (auto& [name, entry] : entries_) {
    names_.push_back(name);
    const size_t alignment = DTypeSize(entry.dtype);
    if (entry.end > entry.begin && reinterpret_cast<uintptr_t>(entry.data) % alignment != 0) {
      entry.aligned_copy = Tensor::Empty(entry.dtype, entry.shape);
      std::memcpy(entry.aligned_copy.data<uint8_t>(), entry.data, entry.end - entry.begin);
      entry.data = entry.aligned_copy.data<uint8_t>();
    }
  }
  return absl::OkStatus();
}

bool SafetensorsFile::Has(std::string_view name) const { return entries_.contains(name); }

absl::StatusOr<TensorView> SafetensorsFile::Get(std::string_view name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(
        absl::StrCat(path_, ": no tensor named \"", std::string(name), "\""));
  }
  const Entry& entry = it->second;
  // The view type is mutable for uniformity with Tensor; this memory is read-only.
  return TensorView::Contiguous(entry.dtype, const_cast<uint8_t*>(entry.data), entry.shape);
}

}  // namespace mtpspec

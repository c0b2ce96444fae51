// Reading safetensors checkpoints: one file (`SafetensorsFile`) or a checkpoint directory that is
// either a single `model.safetensors` or shards listed by `model.safetensors.index.json`
// (`SafetensorsStore`).
//
// File layout (https://github.com/huggingface/safetensors, "Format"):
//   [8 bytes]  little-endian u64 N, the header length
//   [N bytes]  UTF-8 JSON object: {"__metadata__": {str: str}, "<tensor>": {"dtype": "BF16",
//              "shape": [d0, d1, ...], "data_offsets": [begin, end]}, ...}; may end in spaces
//   [rest]     the data section; offsets are relative to its start
//
// Validation follows the reference implementation: every entry must be well formed, its byte size
// must equal numel * dtype size, and the tensors must tile the data section exactly (no overlap, no
// gap, no trailing bytes). A file that passes here therefore also loads with the Python library.
//
// Alignment: the mmap base is page aligned and the reference writer (and ours) lays tensors out so
// each starts at a multiple of its element size, but other writers may put a tensor at any offset.
// Open() copies such a misaligned tensor into an owned, aligned buffer once, so the pointer Get()
// returns is always aligned for its dtype and may be read through `view.as<T>()`.
//
// Memory: FileMemory::kMapped maps the file (zero copy, 4 KiB pages of the page cache);
// kHugePages reads it once into anonymous memory backed by transparent 2 MiB pages where the kernel
// grants them. Decode streams every weight once per token, and with 4 KiB pages each page costs a
// TLB walk (bench/README.md, "Third round": decode_bench's read bandwidth and decode rate both
// rose with huge pages on the 2-vCPU development VM).
//
// The data is read-only either way (PROT_READ: writing through a returned view faults). If another
// process truncates a mapped file, reads past the new end raise SIGBUS; that is a property of mmap,
// not something this reader can detect (a kHugePages copy is not affected once read).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace mtpspec {

// Headers larger than this are rejected as corrupt (the reference implementation uses the same
// cap).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

enum class FileMemory {
  kMapped,     // mmap the file: zero copy, the page cache's 4 KiB pages
  kHugePages,  // read the file into anonymous memory with transparent huge pages (madvise)
};

class SafetensorsFile {
 public:
  // Maps (or reads, see FileMemory) `path` read-only and validates its header. Errors name the
  // path and, where one is at fault, the tensor.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path,
                                                               FileMemory memory = FileMemory::kMapped);
  // Same validation over an in-memory copy of a file; `name` stands in for the path in messages.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBuffer(std::string name,
                                                                     std::string bytes);

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // Tensor names in sorted order (the `__metadata__` key is not a tensor).
  const std::vector<std::string>& names() const { return names_; }
  bool Has(std::string_view name) const;
  // A read-only view of the tensor's data with its dtype and shape; valid while this object lives.
  // NotFound (naming the file and tensor) if absent.
  absl::StatusOr<TensorView> Get(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;  // outermost first; empty for a 0-d tensor
    uint64_t begin;              // byte offsets into the data section
    uint64_t end;
    const uint8_t* data;  // into the file bytes, or into `aligned_copy` below
    Tensor aligned_copy;  // only for tensors whose file offset is misaligned for the dtype
  };
  class Mapping;  // munmaps on destruction

  SafetensorsFile() = default;
  // Parses and validates `bytes_` / `size_`, filling entries_, names_ and metadata_.
  absl::Status ParseHeader();

  std::string path_;
  std::unique_ptr<Mapping> mapping_;  // set by Open
  std::string buffer_;                // set by FromBuffer
  const uint8_t* bytes_ = nullptr;    // whole file
  uint64_t size_ = 0;
  std::map<std::string, Entry, std::less<>> entries_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> metadata_;
};

// The `weight_map` of a `model.safetensors.index.json` (tensor -> shard file name), each shard a
// relative path inside the checkpoint directory. Errors name `source`.
absl::StatusOr<std::map<std::string, std::string>> ParseShardIndex(const std::string& text, const std::string& source);

// A checkpoint directory. With `model.safetensors.index.json` present, its `weight_map`
// (tensor -> shard file name) decides which shards are opened; each is opened once. Open() checks
// that every indexed tensor is in its named shard and that no tensor is stored in two shards.
// Tensors present in a shard but missing from the index are still served. Without an index,
// `model.safetensors` is opened.
class SafetensorsStore {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsStore>> Open(const std::string& dir,
                                                                FileMemory memory = FileMemory::kMapped);

  const std::vector<std::string>& names() const { return names_; }
  bool Has(std::string_view name) const;
  // NotFound naming the directory and tensor if absent.
  absl::StatusOr<TensorView> Get(std::string_view name) const;
  // Path of the file holding `name`, or "" if no file does. Meant for error messages.
  std::string FileOf(std::string_view name) const;
  const std::string& dir() const { return dir_; }
  // Files in the order they were opened (sorted by file name).
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  SafetensorsStore() = default;
  absl::Status OpenSharded(const std::string& index_path, FileMemory memory);

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*, std::less<>> file_of_tensor_;
  std::vector<std::string> names_;
};

}  // namespace mtpspec

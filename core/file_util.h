// File helpers: whole-file reads and atomic whole-file writes.
//
// AtomicFileWriter writes a file so that readers never see it half written: the bytes go to a
// temporary file in the same directory, which is fsync'd and then renamed over the final name by
// Commit(). If the writer is destroyed without a successful Commit(), the temporary file is removed
// and the final name is untouched.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace mtpspec {

// Reads a whole file. NotFound if it does not exist; every message names the path.
// JSON files (config.json, the shard index, tokenizer.json) are read with this bound.
inline constexpr int64_t kMaxJsonFileBytes = int64_t{256} << 20;

// The contents of the regular file `path` (a FIFO, device or directory is an error, so a read can
// neither hang nor run without bound), at most `max_bytes` of it (larger is an error).
absl::StatusOr<std::string> ReadFileToString(const std::string& path, int64_t max_bytes = kMaxJsonFileBytes);

class AtomicFileWriter {
 public:
  // Creates the temporary file next to `path`. Errors name `path`.
  static absl::StatusOr<AtomicFileWriter> Create(const std::string& path);

  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&&) = delete;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  absl::Status Append(const void* data, size_t size);
  // Appends `size` zero bytes as a hole (the file stays sparse where the filesystem allows).
  absl::Status AppendZeros(size_t size);
  // Flushes, closes and renames the temporary file to the final path.
  absl::Status Commit();

 private:
  AtomicFileWriter(std::string path, std::string temp_path, int fd)
      : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;  // -1 once committed or moved from
};

}  // namespace mtpspec

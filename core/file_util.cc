#include "core/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace mtpspec {
namespace {

absl::Status ErrnoError(absl::string_view path, absl::string_view action, int error) {
  return absl::InternalError(absl::StrCat(path, ": ", action, " failed: ", std::strerror(error)));
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path, int64_t max_bytes) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) {
    const int error = errno;
    const std::string message = absl::StrCat(path, ": cannot open: ", std::strerror(error));
    return error == ENOENT || error == ENOTDIR ? absl::NotFoundError(message) : absl::PermissionDeniedError(message);
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, S_ISDIR(info.st_mode) ? ": is a directory" : ": not a regular file",
                                                   ", expected a file"));
  }
  if (info.st_size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", info.st_size, " bytes, more than the ", max_bytes, " this file may have"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  return std::move(contents).str();
}

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Create(const std::string& path) {
  // pid + a process-wide counter make the name unique among concurrent writers; O_EXCL guards
  // against anything left over from a crashed run.
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string temp_path =
        absl::StrCat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
    const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) return AtomicFileWriter(path, temp_path, fd);
    if (errno != EEXIST) return ErrnoError(path, "creating a temporary file", errno);
  }
  return absl::InternalError(absl::StrCat(path, ": could not pick a temporary file name"));
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)), temp_path_(std::move(other.temp_path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_path_.c_str());
  }
}

absl::Status AtomicFileWriter::Append(const void* data, size_t size) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": writer is closed"));
  const char* cursor = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t written = ::write(fd_, cursor, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(path_, "write", errno);
    }
    cursor += written;
    size -= static_cast<size_t>(written);
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::AppendZeros(size_t size) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": writer is closed"));
  const off_t end = ::lseek(fd_, static_cast<off_t>(size), SEEK_CUR);
  if (end < 0) return ErrnoError(path_, "lseek", errno);
  if (::ftruncate(fd_, end) != 0) return ErrnoError(path_, "ftruncate", errno);
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": writer is closed"));
  if (::fsync(fd_) != 0) return ErrnoError(path_, "fsync", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(temp_path_.c_str());
    return ErrnoError(path_, "close", error);
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp_path_.c_str());
    return ErrnoError(path_, "rename", error);
  }
  return absl::OkStatus();
}

}  // namespace mtpspec

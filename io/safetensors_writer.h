// Writing safetensors files.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor.h"

namespace mtpspec {

// Writes `tensors` (name -> contiguous view) and string `metadata` to `path`.
//
// The output is deterministic for the same input and loads with the reference Python library:
//   * header keys are sorted; the header is padded with spaces to a multiple of 8 bytes, so the
//     data section starts 8-byte aligned in the file (and in an mmap of it);
//   * tensors are stored back to back (the format forbids gaps) ordered by element size, largest
//     first, then by name. Every tensor therefore starts at a multiple of its own element size,
//     which is what typed access needs. A fixed 64-byte alignment per tensor would need padding
//     between tensors, which the reference loader rejects as "invalid offset".
// A view whose data is null stands for zeros, written as a hole (a sparse file where the filesystem
// allows): structure-only checkpoints of real dimensions then cost no disk.
// The file is written under a temporary name and renamed into place, so `path` is never left half
// written. Errors (duplicate or empty names, non-contiguous views, I/O) name the path and tensor.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, TensorView>>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace mtpspec

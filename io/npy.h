// Reading and writing numpy .npy files (format version 1.0, little-endian, C order), enough for
// dumping logits from the CLI and for loading reference arrays in tests.
// Format: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace mtpspec {

// Writes a contiguous f32, i32 or i64 view (0 to kMaxDims dims) as a version 1.0 .npy file, via a
// temporary file and rename. Errors name the path.
absl::Status WriteNpy(const std::string& path, const TensorView& view);

// Reads a .npy file (versions 1.0-3.0) holding little-endian f32, i32 or i64 data in C order with
// at most kMaxDims dims. Anything else, or a malformed file, is an error naming the path.
absl::StatusOr<Tensor> ReadNpy(const std::string& path);

// ReadNpy over the bytes of a file already in memory; `name` stands in for the path in messages.
absl::StatusOr<Tensor> ParseNpy(std::string_view name, std::string_view bytes);

}  // namespace mtpspec

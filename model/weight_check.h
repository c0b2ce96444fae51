// A full scan of a checkpoint's stored values for NaN and ±Inf. Loading checks the cheap tensors
// (norms, biases, block scales); this reads every byte, so it is a separate, optional step
// (`mtpspec info DIR --check-weights`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "io/safetensors.h"

namespace mtpspec {

struct NonFiniteTensor {
  std::string name;      // the checkpoint's tensor name
  std::string file;      // the shard holding it
  int64_t count = 0;     // elements that are NaN or ±Inf
  int64_t first = -1;    // flat index of the first of them
};

// Counts, per floating tensor of every file of `store`, the elements that are not finite (the
// bit patterns of each dtype: f32, bf16, f16, and float8_e4m3fn, whose only non-finite codes are
// the two NaNs). Integer tensors are skipped. Sorted by name; empty when all values are finite.
std::vector<NonFiniteTensor> FindNonFiniteTensors(const SafetensorsStore& store);

}  // namespace mtpspec

// Helpers shared by the CUDA attention benchmarks (cuda_attention_bench, cuda_indexer_bench):
// aborting error checks, CUDA-event timing (warm-up, then the median of N reps), the device's
// copy bandwidth, and the JSON output path rule (--json, else $OUT/<name>.json, else ./<name>.json).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace mtpspec::cuda::bench {

inline void Check(const absl::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s: %s\n", what, std::string(status.message()).c_str());
    std::exit(1);
  }
}

inline void CheckCuda(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "error: %s: %s\n", what, cudaGetErrorString(error));
    std::exit(1);
  }
}

// Median time in microseconds of `body` (which enqueues work on `stream`), measured with CUDA
// events around each rep after `warmup` untimed reps.
inline double MedianMicros(cudaStream_t stream, int warmup, int reps, const std::function<void()>& body) {
  for (int i = 0; i < warmup; ++i) body();
  CheckCuda(cudaStreamSynchronize(stream), "warm-up");
  cudaEvent_t start, stop;
  CheckCuda(cudaEventCreate(&start), "cudaEventCreate");
  CheckCuda(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    CheckCuda(cudaEventRecord(start, stream), "cudaEventRecord");
    body();
    CheckCuda(cudaEventRecord(stop, stream), "cudaEventRecord");
    CheckCuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0.0f;
    CheckCuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    times.push_back(1000.0 * ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Device-to-device cudaMemcpy bandwidth in GB/s (10^9 B/s), counting the bytes read plus the bytes
// written (2 × size), as STREAM's copy does. Median of `reps` copies of `bytes`.
inline double CopyBandwidthGBs(cudaStream_t stream, size_t bytes, int reps) {
  void* src = nullptr;
  void* dst = nullptr;
  CheckCuda(cudaMalloc(&src, bytes), "cudaMalloc (copy source)");
  CheckCuda(cudaMalloc(&dst, bytes), "cudaMalloc (copy destination)");
  CheckCuda(cudaMemsetAsync(src, 1, bytes, stream), "cudaMemset");
  const double us = MedianMicros(stream, 3, reps, [&] {
    CheckCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
  });
  cudaFree(src);
  cudaFree(dst);
  return 2.0 * static_cast<double>(bytes) / (us * 1e-6) / 1e9;
}

inline std::string DefaultJsonPath(const std::string& name) {
  const char* out = std::getenv("OUT");
  if (out != nullptr && out[0] != '\0') return std::string(out) + "/" + name + ".json";
  return name + ".json";
}

inline void WriteJson(const std::string& path, const nlohmann::json& j) {
  std::ofstream f(path);
  if (!f) {
    std::fprintf(stderr, "error: cannot write %s\n", path.c_str());
    std::exit(1);
  }
  f << j.dump(2) << "\n";
  std::printf("wrote %s\n", path.c_str());
}

inline std::string DeviceName() {
  cudaDeviceProp prop{};
  int device = 0;
  CheckCuda(cudaGetDevice(&device), "cudaGetDevice");
  CheckCuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  return prop.name;
}

}  // namespace mtpspec::cuda::bench

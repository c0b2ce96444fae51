// The CUDA backend's foundation: error conversion, the device query, owned device memory and the
// per-stream context (stream + cuBLAS handle). Host C++ only (compiled by the host compiler); the
// kernels live in *.cu files that see plain launch functions, never absl.
//
// Every CUDA or cuBLAS error becomes an absl::Status that names the call that failed. Nothing here
// falls back to the CPU: a missing or unusable GPU is an Unavailable error with the reason.
#pragma once

#include <cuda_runtime.h>
#include <cublas_v2.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/status.h"
#include "core/tensor.h"

namespace mtpspec::cuda {

absl::Status FromCuda(cudaError_t error, absl::string_view what);
absl::Status FromCublas(cublasStatus_t status, absl::string_view what);

#define MTPSPEC_CUDA_RETURN_IF_ERROR(expr) RETURN_IF_ERROR(::mtpspec::cuda::FromCuda((expr), #expr))
#define MTPSPEC_CUBLAS_RETURN_IF_ERROR(expr) RETURN_IF_ERROR(::mtpspec::cuda::FromCublas((expr), #expr))

// OK when a CUDA device can run this build's kernels (compute capability ≥ 9.0 for the sm_90 code,
// or newer through PTX); otherwise Unavailable with the reason (no driver, no device, too old).
// Tests that need a GPU skip with this message.
absl::Status DeviceStatus();

// Owned device memory for n elements of T (cudaMalloc / cudaFree). Move-only.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  static absl::StatusOr<DeviceArray> Create(int64_t n, absl::string_view what) {
    DeviceArray array;
    if (n < 0) return absl::InvalidArgumentError(std::string(what) + ": negative element count");
    if (n > 0) {
      void* p = nullptr;
      RETURN_IF_ERROR(FromCuda(cudaMalloc(&p, static_cast<size_t>(n) * sizeof(T)),
                               std::string("cudaMalloc for ") + std::string(what)));
      array.data_ = static_cast<T*>(p);
    }
    array.size_ = n;
    return array;
  }
  DeviceArray(DeviceArray&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      Release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { Release(); }

  T* data() const { return data_; }
  int64_t size() const { return size_; }
  size_t bytes() const { return static_cast<size_t>(size_) * sizeof(T); }

  // Copies n host elements into [offset, offset + n), asynchronously on `stream`.
  absl::Status CopyFromHost(const T* src, int64_t n, cudaStream_t stream, int64_t offset = 0) {
    if (offset < 0 || n < 0 || offset + n > size_) return absl::OutOfRangeError("DeviceArray::CopyFromHost range");
    return FromCuda(cudaMemcpyAsync(data_ + offset, src, static_cast<size_t>(n) * sizeof(T), cudaMemcpyHostToDevice,
                                    stream),
                    "cudaMemcpyAsync(host to device)");
  }
  // Copies [offset, offset + n) to host memory and waits for it.
  absl::Status CopyToHost(T* dst, int64_t n, cudaStream_t stream, int64_t offset = 0) const {
    if (offset < 0 || n < 0 || offset + n > size_) return absl::OutOfRangeError("DeviceArray::CopyToHost range");
    RETURN_IF_ERROR(FromCuda(cudaMemcpyAsync(dst, data_ + offset, static_cast<size_t>(n) * sizeof(T),
                                             cudaMemcpyDeviceToHost, stream),
                             "cudaMemcpyAsync(device to host)"));
    return FromCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }

 private:
  void Release() {
    if (data_ != nullptr) cudaFree(data_);
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  int64_t size_ = 0;
};

// A temporary device buffer of n elements, allocated and freed in stream order on an op's stream
// (cudaMallocAsync / cudaFreeAsync): it outlives every kernel queued before the free and never
// competes with Context::Workspace, which Linear uses for its own temporaries. Move-only.
template <typename T>
class StreamBuffer {
 public:
  static absl::StatusOr<StreamBuffer> Create(int64_t n, cudaStream_t stream, absl::string_view what) {
    StreamBuffer buffer;
    buffer.stream_ = stream;
    if (n > 0) {
      void* p = nullptr;
      RETURN_IF_ERROR(FromCuda(cudaMallocAsync(&p, static_cast<size_t>(n) * sizeof(T), stream),
                               std::string("cudaMallocAsync for ") + std::string(what)));
      buffer.data_ = static_cast<T*>(p);
    }
    return buffer;
  }
  StreamBuffer() = default;
  StreamBuffer(StreamBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), stream_(o.stream_) {}
  StreamBuffer& operator=(StreamBuffer&& o) noexcept {
    if (this != &o) {
      if (data_ != nullptr) cudaFreeAsync(data_, stream_);
      data_ = std::exchange(o.data_, nullptr);
      stream_ = o.stream_;
    }
    return *this;
  }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  ~StreamBuffer() {
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);
  }
  T* data() const { return data_; }

 private:
  T* data_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// One stream and the cuBLAS handle bound to it. Every op of the backend takes a Context and
// enqueues on its stream; host synchronisation happens only where results cross to the host.
class Context {
 public:
  static absl::StatusOr<std::unique_ptr<Context>> Create();
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  cudaStream_t stream() const { return stream_; }
  cublasHandle_t blas() const { return blas_; }
  absl::Status Synchronize() const;
  // A device scratch buffer of at least `bytes`, valid until the next Workspace call. Ops use it for
  // short-lived temporaries (e.g. x rounded to bf16 for cuBLAS); callers must not hold it across ops.
  absl::StatusOr<void*> Workspace(size_t bytes);
  // The error of the most recent kernel launch, if any (cudaGetLastError), named after `what`.
  static absl::Status LaunchStatus(absl::string_view what);

 private:
  Context() = default;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  DeviceArray<uint8_t> workspace_;
};

// n host values → a new StreamBuffer on `ctx`'s stream (the copy is queued, not waited for; the
// host values must stay alive until the stream reaches it, as with any cudaMemcpyAsync).
template <typename T>
absl::StatusOr<StreamBuffer<T>> UploadToStream(Context& ctx, const T* host, int64_t n, absl::string_view what) {
  ASSIGN_OR_RETURN(auto device, StreamBuffer<T>::Create(n, ctx.stream(), what));
  if (n > 0) {
    RETURN_IF_ERROR(FromCuda(cudaMemcpyAsync(device.data(), host, static_cast<size_t>(n) * sizeof(T),
                                             cudaMemcpyHostToDevice, ctx.stream()),
                             std::string("upload of ") + std::string(what)));
  }
  return device;
}

// Copies n device values of `ctx`'s stream to a new host vector and waits for them.
template <typename T>
absl::StatusOr<std::vector<T>> CopyToHost(Context& ctx, const T* device, int64_t n, absl::string_view what) {
  std::vector<T> host(static_cast<size_t>(n));
  if (n > 0) {
    RETURN_IF_ERROR(FromCuda(cudaMemcpyAsync(host.data(), device, static_cast<size_t>(n) * sizeof(T),
                                             cudaMemcpyDeviceToHost, ctx.stream()),
                             std::string("copy of ") + std::string(what) + " to the host"));
  }
  RETURN_IF_ERROR(ctx.Synchronize());
  return host;
}

// Device rows [rows, n] f32 → a new host f32 tensor [rows, n] (waits for the copy).
absl::StatusOr<Tensor> CopyToHostTensor(Context& ctx, const float* device, int64_t rows, int64_t n,
                                        absl::string_view what);

}  // namespace mtpspec::cuda

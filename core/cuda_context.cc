#include "core/cuda_context.h"

#include "absl/strings/str_cat.h"

namespace mtpspec::cuda {

absl::Status FromCuda(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  const auto code = error == cudaErrorMemoryAllocation ? absl::StatusCode::kResourceExhausted
                    : (error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver)
                        ? absl::StatusCode::kUnavailable
                        : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat("CUDA error in ", what, ": ", cudaGetErrorName(error), " (",
                                         cudaGetErrorString(error), ")"));
}

absl::Status FromCublas(cublasStatus_t status, absl::string_view what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("cuBLAS error in ", what, ": ", cublasGetStatusName(status), " (",
                                          cublasGetStatusString(status), ")"));
}

absl::Status DeviceStatus() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later queries start clean
    return absl::UnavailableError(absl::StrCat("no usable CUDA device: cudaGetDeviceCount: ", cudaGetErrorName(error),
                                               " (", cudaGetErrorString(error), ")"));
  }
  if (count == 0) return absl::UnavailableError("no CUDA device present");
  cudaDeviceProp prop{};
  RETURN_IF_ERROR(FromCuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties"));
  if (prop.major < 9) {
    return absl::UnavailableError(absl::StrCat("CUDA device 0 (", prop.name, ") has compute capability ", prop.major,
                                               ".", prop.minor, "; this build targets sm_90 and newer"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Context>> Context::Create() {
  RETURN_IF_ERROR(DeviceStatus());
  std::unique_ptr<Context> ctx(new Context());
  MTPSPEC_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&ctx->stream_, cudaStreamNonBlocking));
  MTPSPEC_CUBLAS_RETURN_IF_ERROR(cublasCreate(&ctx->blas_));
  MTPSPEC_CUBLAS_RETURN_IF_ERROR(cublasSetStream(ctx->blas_, ctx->stream_));
  // Deterministic cuBLAS results for a given shape: no atomics-based reductions.
  MTPSPEC_CUBLAS_RETURN_IF_ERROR(cublasSetAtomicsMode(ctx->blas_, CUBLAS_ATOMICS_NOT_ALLOWED));
  return ctx;
}

Context::~Context() {
  if (blas_ != nullptr) cublasDestroy(blas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status Context::Synchronize() const { return FromCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

absl::StatusOr<void*> Context::Workspace(size_t bytes) {
  if (workspace_.bytes() < bytes) {
    // The old buffer may still be read by queued work: wait before freeing it.
    RETURN_IF_ERROR(Synchronize());
    workspace_ = DeviceArray<uint8_t>();
    ASSIGN_OR_RETURN(workspace_, DeviceArray<uint8_t>::Create(static_cast<int64_t>(bytes), "Context workspace"));
  }
  return static_cast<void*>(workspace_.data());
}

absl::Status Context::LaunchStatus(absl::string_view what) {
  return FromCuda(cudaGetLastError(), absl::StrCat("kernel launch ", what));
}

absl::StatusOr<Tensor> CopyToHostTensor(Context& ctx, const float* device, int64_t rows, int64_t n,
                                        absl::string_view what) {
  Tensor t = Tensor::Empty(DType::kF32, {rows, n});
  RETURN_IF_ERROR(FromCuda(cudaMemcpyAsync(t.data<float>(), device, static_cast<size_t>(rows * n) * sizeof(float),
                                           cudaMemcpyDeviceToHost, ctx.stream()),
                           absl::StrCat("copy of ", what, " to the host")));
  RETURN_IF_ERROR(ctx.Synchronize());
  return t;
}

}  // namespace mtpspec::cuda

// Translation unit 2: its own kernel (fill the input) and the host side of one run.
// Nothing here runs at import time: the module calls these only when asked to.
#include <cuda_runtime.h>

#include <cstdio>

#include "demo_ext.h"

__global__ void iota_kernel(int* values, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    values[i] = i;
  }
}

static int fail(cudaError_t err, const char* step, char* message, size_t size) {
  std::snprintf(message, size, "%s: %s (%s)", step, cudaGetErrorString(err), cudaGetErrorName(err));
  return static_cast<int>(err);
}

extern "C" int demo_ext_device_count(void) {
  int count = 0;
  // No driver or no GPU is an answer (0 devices), not an error.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

extern "C" int demo_ext_run(int n, unsigned long long* total, int* cuda_arch, char* message, size_t size) {
  int* values = nullptr;
  unsigned long long* d_total = nullptr;
  int* d_arch = nullptr;
  cudaError_t err = cudaSuccess;
  int rc = 0;
  if ((err = cudaMalloc(&values, sizeof(int) * (n > 0 ? n : 1))) != cudaSuccess) return fail(err, "cudaMalloc", message, size);
  if ((err = cudaMalloc(&d_total, sizeof(unsigned long long))) != cudaSuccess) { rc = fail(err, "cudaMalloc", message, size); goto out; }
  if ((err = cudaMalloc(&d_arch, sizeof(int))) != cudaSuccess) { rc = fail(err, "cudaMalloc", message, size); goto out; }
  cudaMemset(d_total, 0, sizeof(unsigned long long));
  cudaMemset(d_arch, 0xff, sizeof(int));  // -1: the kernel never wrote it
  iota_kernel<<<8, 128>>>(values, n);
  if ((err = cudaGetLastError()) != cudaSuccess) { rc = fail(err, "iota_kernel launch", message, size); goto out; }
  if ((err = static_cast<cudaError_t>(demo_ext_launch_sum_squares(values, n, d_total, d_arch))) != cudaSuccess) {
    rc = fail(err, "sum_squares_kernel launch", message, size);
    goto out;
  }
  if ((err = cudaDeviceSynchronize()) != cudaSuccess) { rc = fail(err, "cudaDeviceSynchronize", message, size); goto out; }
  if ((err = cudaMemcpy(total, d_total, sizeof(unsigned long long), cudaMemcpyDeviceToHost)) != cudaSuccess) { rc = fail(err, "cudaMemcpy", message, size); goto out; }
  if ((err = cudaMemcpy(cuda_arch, d_arch, sizeof(int), cudaMemcpyDeviceToHost)) != cudaSuccess) { rc = fail(err, "cudaMemcpy", message, size); goto out; }
out:
  cudaFree(values);
  cudaFree(d_total);
  cudaFree(d_arch);
  return rc;
}

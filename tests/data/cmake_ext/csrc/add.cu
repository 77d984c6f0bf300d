// One translation unit of cmake_ext: a kernel, its launcher, and the device count the module reports.
#include <cuda_runtime.h>

__global__ void add_kernel(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}

extern "C" void cmake_ext_add(float* x, int n) { add_kernel<<<(n + 255) / 256, 256>>>(x, n); }

extern "C" int cmake_ext_device_count(void) {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

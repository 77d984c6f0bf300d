// Translation unit 1: the arch-gated kernel.
//
// From sm_89 on, each warp reduces its partial sums with shuffles and issues one atomic; below
// that the kernel takes the plain path, one atomic per thread. Both paths compute the same sum,
// so a GPU that runs an older image still gets the right answer: the gate has a real fallback.
#include <cuda_runtime.h>

#include "demo_ext.h"

__global__ void sum_squares_kernel(const int* values, int n, unsigned long long* total, int* cuda_arch) {
  unsigned long long partial = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    const unsigned long long v = static_cast<unsigned long long>(values[i]);
    partial += v * v;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  for (int offset = 16; offset > 0; offset >>= 1) {
    partial += __shfl_down_sync(0xffffffffu, partial, offset);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(total, partial);
  }
#else
  atomicAdd(total, partial);
#endif
#ifdef __CUDA_ARCH__
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *cuda_arch = __CUDA_ARCH__;
  }
#endif
}

extern "C" int demo_ext_launch_sum_squares(const int* values, int n, unsigned long long* total, int* cuda_arch) {
  sum_squares_kernel<<<8, 128>>>(values, n, total, cuda_arch);
  return static_cast<int>(cudaGetLastError());
}

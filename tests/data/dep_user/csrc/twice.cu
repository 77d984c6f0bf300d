// dep_user's one translation unit: a kernel, and the version of demo_ext it was built against.
#include <cuda_runtime.h>

__global__ void twice_kernel(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.0f;
}

extern "C" void dep_user_twice(float* x, int n) { twice_kernel<<<(n + 255) / 256, 256>>>(x, n); }

extern "C" int dep_user_built_against(void) { return DEMO_EXT_VERSION; }

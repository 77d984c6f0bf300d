#include <cuda_fp16.h>
#include <cstdint>

__device__ __forceinline__ uint32_t relu2(uint32_t x) {
  uint32_t res;
  const uint32_t zero = 0u;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("max.f16x2 %0, %1, %2;\n" : "=r"(res) : "r"(x), "r"(zero));
#else
  asm volatile(
      "{\n"
      "\t .reg .f16x2 sela;\n"
      "\t set.gtu.u32.f16x2 sela, %1, %2;\n"
      "\t and.b32 %0, sela, %1;\n"
      "}\n" : "=r"(res) : "r"(x), "r"(zero));
#endif
  return res;
}

__global__ void relu_kernel(uint32_t* x) { x[threadIdx.x] = relu2(x[threadIdx.x]); }

// CPU kernels: compiled by the host compiler, never by nvcc
#include <cuda_fp8.h>
void quant(__nv_fp8_e4m3* out, const float* in, int n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  out[0] = __nv_fp8_e4m3(in[0]);
#else
  __builtin_trap();
#endif
}

#include <cuda_fp8.h>
__global__ void t(__nv_fp8_e5m2* x) {
#if __CUDA_ARCH__ >= 900
  x[0] = __nv_fp8_e5m2(1.0f);
#else
  __brkpt();
#endif
}

#include <cuda_fp8.h>
__global__ void demo(__nv_fp8_e4m3* x) {
#if __CUDA_ARCH__ >= 890
  x[0] = __nv_fp8_e4m3(2.0f);
#endif
}

#include <nv/target>

__device__ float fast_exp(float x) {
  // libcu++'s target dispatch: a real implementation on either side is no trap
  NV_IF_ELSE_TARGET(NV_PROVIDES_SM_90, (return __expf(x);), (return expf(x);))
}

__global__ void softmax(float* x) {
  NV_DISPATCH_TARGET(
    NV_PROVIDES_SM_89, (x[threadIdx.x] = fast_exp(x[threadIdx.x]);),
    NV_IS_EXACTLY_SM_80, (__trap();))
}

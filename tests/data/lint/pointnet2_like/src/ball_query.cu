#include <cuda_runtime.h>
__global__ void query_ball_point_kernel(int n, const float* xyz, int* idx) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) idx[i] = xyz[i] > 0.0f ? i : -1;
}

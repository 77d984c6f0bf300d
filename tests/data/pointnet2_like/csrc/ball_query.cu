// A ball-query-shaped kernel: count the points within radius of each query point.
#include <cuda_runtime.h>

__global__ void ball_count_kernel(const float* xyz, const float* queries, int n, int m, float r2, int* counts) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= m) return;
  int c = 0;
  for (int i = 0; i < n; ++i) {
    float dx = xyz[3 * i] - queries[3 * j], dy = xyz[3 * i + 1] - queries[3 * j + 1], dz = xyz[3 * i + 2] - queries[3 * j + 2];
    c += (dx * dx + dy * dy + dz * dz) < r2;
  }
  counts[j] = c;
}

extern "C" int pointnet2_like_launch(const float* xyz, const float* queries, int n, int m, float r2, int* counts) {
  ball_count_kernel<<<(m + 127) / 128, 128>>>(xyz, queries, n, m, r2, counts);
  return static_cast<int>(cudaGetLastError());
}

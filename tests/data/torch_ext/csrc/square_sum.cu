#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

// One block per 256 elements: a shared-memory tree reduction, then one atomicAdd per block.
__global__ void square_sum_kernel(const float* x, float* out, int64_t n) {
  __shared__ float part[256];
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  part[threadIdx.x] = i < n ? x[i] * x[i] : 0.0f;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, part[0]);
}

at::Tensor square_sum_cuda(const at::Tensor& x) {
  const c10::cuda::CUDAGuard guard(x.device());
  auto out = at::zeros({}, x.options());
  const int64_t n = x.numel();
  if (n == 0) return out;
  const int blocks = static_cast<int>((n + 255) / 256);
  square_sum_kernel<<<blocks, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

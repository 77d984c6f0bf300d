// ROCm-only kernels (built only when VLLM_GPU_LANG is HIP)
__global__ void paged_attention(float* out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  out[threadIdx.x] = 1.f;
#else
  __trap();
#endif
}

__global__ void wgmma_gemm(float* c) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::);
  c[threadIdx.x] = 1.0f;
#else
  assert(0);
#endif
}

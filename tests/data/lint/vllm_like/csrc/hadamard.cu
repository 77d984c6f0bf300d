__global__ void hadamard(float* x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  x[threadIdx.x] *= 0.5f;
#else
  __trap();
#endif
}

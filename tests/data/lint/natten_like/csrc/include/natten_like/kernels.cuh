#pragma once
#include <cstdio>
#include <lib/config.h>
#include <lib/copy.h>

// Hopper kernel: wgmma needs sm_90a; any other image prints and computes nothing.
template <typename T>
__global__ void hopper_kernel(T* out) {
#if !defined(LIB_ARCH_MMA_SM90A_ENABLED)
  printf("ERROR : Arch conditional MMA instruction used without targeting sm_90a\n");
#else
  out[threadIdx.x] = lib::copy(out[0]);
#endif
}

// Blackwell kernel: tcgen05 needs sm_100a or sm_100f.
template <typename T>
__global__ void blackwell_kernel(T* out) {
#if (!defined(LIB_ARCH_MMA_SM100A_ENABLED) && \
     !defined(LIB_ARCH_MMA_SM100F_ENABLED))
  printf("ERROR : Arch conditional MMA instruction used without targeting sm_100a/f\n");
#else
  out[threadIdx.x] = T(2);
#endif
}

// Built for exactly sm_90: a newer device JIT-compiling compute_90 runs the real body, and a
// native image would print; declaring the newer arch would not help, so this is no finding.
__global__ void exact_sm90(float* out) {
#if __CUDA_ARCH__ == 900
  out[0] = 1.0f;
#else
  printf("FATAL: built for SM90, launched from SM%d\n", int(__CUDA_ARCH__) / 10);
#endif
}

// Gated through a macro built on the family macro: sm_100f (or sm_100a) only.
template <typename T>
__global__ void family_kernel(T* out) {
#if LIB_ARCH_IN_FAMILY(1000)
  out[threadIdx.x] = T(3);
#else
  __trap();
#endif
}

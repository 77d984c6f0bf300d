#pragma once
// CUTLASS-like feature macros: guard idioms nested in arch gates, and a function-like macro.
#if defined(__CUDA_ARCH_FAMILY_SPECIFIC__)
#define LIB_ARCH_FAMILY(ARCH) (__CUDA_ARCH_FAMILY_SPECIFIC__ == ARCH)
#else
#define LIB_ARCH_FAMILY(ARCH) (false)
#endif
#define LIB_ARCH_IN_FAMILY(ARCH) (LIB_ARCH_FAMILY(ARCH) != 0)

#if (__CUDACC_VER_MAJOR__ >= 12)
  #if (!defined(LIB_ARCH_MMA_SM90_ENABLED) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900)
    #define LIB_ARCH_MMA_SM90_ENABLED 1
    #if (!defined(LIB_ARCH_MMA_SM90A_ENABLED) && defined(__CUDA_ARCH_FEAT_SM90_ALL))
      #define LIB_ARCH_MMA_SM90A_ENABLED 1
    #endif
  #endif
  #if (!defined(LIB_ARCH_MMA_SM100_ENABLED) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 1000)
    #define LIB_ARCH_MMA_SM100_ENABLED 1
    #if (!defined(LIB_ARCH_MMA_SM100A_ENABLED) && defined(__CUDA_ARCH_FEAT_SM100_ALL))
      #define LIB_ARCH_MMA_SM100A_ENABLED 1
    #endif
    #if (!defined(LIB_ARCH_MMA_SM100F_ENABLED) && LIB_ARCH_FAMILY(1000))
      #define LIB_ARCH_MMA_SM100F_ENABLED 1
    #endif
  #endif
#endif

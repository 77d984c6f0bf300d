#pragma once
// Feature macro derived from the arch: its uses are the gates.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define KERNEL_HAS_FP8_MMA 1
#endif

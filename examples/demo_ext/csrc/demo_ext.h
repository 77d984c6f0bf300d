// The C interface between the CUDA translation units and the Python module.
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// Number of visible CUDA devices; 0 when there is no driver or no GPU.
int demo_ext_device_count(void);

// Launch sum_squares_kernel on device memory; returns a cudaError_t.
int demo_ext_launch_sum_squares(const int* values, int n, unsigned long long* total, int* cuda_arch);

// Sum of i*i for i in [0, n) on the GPU, and the __CUDA_ARCH__ of the image that ran.
// Returns 0, or a cudaError_t with a message in `message`.
int demo_ext_run(int n, unsigned long long* total, int* cuda_arch, char* message, size_t size);

#ifdef __cplusplus
}
#endif

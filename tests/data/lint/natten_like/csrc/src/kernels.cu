#include "natten_like/kernels.cuh"

template __global__ void hopper_kernel<float>(float*);
template __global__ void blackwell_kernel<float>(float*);
template __global__ void family_kernel<float>(float*);

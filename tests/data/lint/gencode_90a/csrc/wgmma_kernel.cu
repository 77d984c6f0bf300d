__global__ void scale(float* x, float s) { x[threadIdx.x] *= s; }

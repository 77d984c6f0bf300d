#pragma once
namespace lib {
__device__ inline float add(float a, float b) { return a + b; }
}

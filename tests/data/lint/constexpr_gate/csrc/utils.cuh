#pragma once

__device__ __forceinline__ void trap_unsupported_arch() {
  printf("This kernel is not supported on your GPU\n");
  __trap();
}

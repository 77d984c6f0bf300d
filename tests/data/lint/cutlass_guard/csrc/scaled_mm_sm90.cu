#include "cutlass/cutlass.h"
#include "cutlass/arch/config.h"

template <typename Kernel>
__global__ void enable_sm90_only(typename Kernel::Params params) {
#if defined(CUTLASS_ARCH_MMA_SM90A_ENABLED)
  Kernel{}(params);
#else
  CUTE_INVALID_CONTROL_PATH("This kernel only supports sm90a");
#endif
}

template <typename Kernel>
__global__ void enable_sm80_up(typename Kernel::Params params) {
#if defined(CUTLASS_ARCH_MMA_SM80_ENABLED)
  Kernel{}(params);
#endif
}

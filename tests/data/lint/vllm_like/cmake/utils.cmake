# The helpers vLLM's CMake defines (bodies elided: the lint models what they do).
function(cuda_archs_loose_intersection OUT_CUDA_ARCHS SRC_CUDA_ARCHS TGT_CUDA_ARCHS)
  set(${OUT_CUDA_ARCHS} "" PARENT_SCOPE)
endfunction()

macro(set_gencode_flags_for_srcs)
  cmake_parse_arguments(arg "" "BUILD_PTX_FOR_ARCH" "SRCS;CUDA_ARCHS" ${ARGN})
endmacro()

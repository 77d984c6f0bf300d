#include <torch/library.h>
TORCH_LIBRARY(_C, m) {}

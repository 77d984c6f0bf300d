// Host-side dtype dispatch: torch's Float8 tags are not FP8 device code.
#include <torch/extension.h>

bool is_fp8(const at::Tensor& t) {
  return t.scalar_type() == c10::ScalarType::Float8_e4m3fn || t.scalar_type() == torch::kFloat8_e5m2;
}

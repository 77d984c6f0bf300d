#include <torch/extension.h>

at::Tensor scale_cuda(const at::Tensor& x, double a);
at::Tensor square_sum_cuda(const at::Tensor& x);

static at::Tensor scale(const at::Tensor& x, double a) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat, "scale: x must be a CUDA float32 tensor");
  return scale_cuda(x.contiguous(), a);
}

static at::Tensor square_sum(const at::Tensor& x) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat, "square_sum: x must be a CUDA float32 tensor");
  return square_sum_cuda(x.contiguous());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("scale", &scale, "a * x");
  m.def("square_sum", &square_sum, "sum(x * x)");
}

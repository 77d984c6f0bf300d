#pragma once
#include <torch/extension.h>
torch::Tensor qk_int8_sv_f8_accum_f32_attn(torch::Tensor q, torch::Tensor k, torch::Tensor v);

__global__ void attn_res(unsigned* tmem, unsigned cols) {
  asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;" ::"r"(tmem[0]), "r"(cols));
}

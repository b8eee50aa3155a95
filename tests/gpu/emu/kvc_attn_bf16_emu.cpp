/* kvc_attn_bf16_emu.cpp - the bf16-layer decode attention kernels (kvcache/cuda/kvc_attn_bf16.cu) compiled for the
 * CPU emulator (compiled with -DKVC_EMU -include cuda_emu.h; see cuda_emu.h). */
#include "kvcache/cuda/kvc_attn_bf16.cu"

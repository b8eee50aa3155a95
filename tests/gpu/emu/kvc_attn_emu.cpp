/* kvc_attn_emu.cpp - the decode attention kernels (kvcache/cuda/kvc_attn.cu) compiled for the CPU emulator
 * (compiled with -DKVC_EMU -include cuda_emu.h; see cuda_emu.h). */
#include "kvcache/cuda/kvc_attn.cu"

/* kvc_prefill_emu.cpp - the prefill / segment attention kernels (kvcache/cuda/kvc_prefill.cu) compiled for the CPU
 * emulator (compiled with -DKVC_EMU -include cuda_emu.h; see cuda_emu.h). */
#include "kvcache/cuda/kvc_prefill.cu"

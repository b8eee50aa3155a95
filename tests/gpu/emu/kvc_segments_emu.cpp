/* kvc_segments_emu.cpp - the towers' segment attention (kvcache/cuda/kvc_segments.cu) compiled for the CPU emulator
 * (compiled with -DKVC_EMU -include cuda_emu.h; see cuda_emu.h). */
#include "kvcache/cuda/kvc_segments.cu"

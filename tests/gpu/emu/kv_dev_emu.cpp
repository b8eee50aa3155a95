/* kv_dev_emu.cpp - the device KV cache (kvcache/cuda/kv_dev.cu: tables, upload, append / flush kernels) compiled
 * for the CPU emulator (compiled with -DKVC_EMU -include cuda_emu.h; see cuda_emu.h). */
#include "kvcache/cuda/kv_dev.cu"

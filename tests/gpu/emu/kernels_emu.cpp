/* kernels_emu.cpp - the dense CUDA ops of kernels/cuda compiled for the CPU emulator (-DKVC_EMU -include
 * cuda_emu.h; see cuda_emu.h and kernels/cuda/emu_shim.h); kernels/cuda/emu_ctx.cpp replaces ctx.cu (no cuBLAS). */
#include "kernels/cuda/ops.cu"
#include "kernels/cuda/ops_llm.cu"
#include "kernels/cuda/gemv.cu"
#include "kernels/cuda/moe.cu"
#include "kernels/cuda/sample.cu"
#include "kernels/cuda/ops_towers.cu"

/* llm_cuda_emu.cpp - the CUDA decoder (llm/cuda: runner, weights, SIMT attention) compiled for the CPU emulator
 * (compiled with -DKVC_EMU -include cuda_emu.h; see cuda_emu.h), so that test_gpu_decoder runs in CI without a
 * GPU (as test_emu_decoder): the whole step, graphs included (the emulator records and replays captures). */
#include "llm/cuda/runner.cu"
#include "llm/cuda/weights.cu"
#include "llm/cuda/attn_ref.cu"

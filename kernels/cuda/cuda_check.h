/* cuda_check.h - internal to the CUDA code (kernels/cuda, llm/cuda, ...): turn CUDA / cuBLAS return codes into
 * omni_status + message. OMNI_CUDA_TRY(call) returns from the enclosing function with "func: call (file:line):
 * error text": OMNI_ERR_NOMEM for cudaErrorMemoryAllocation, OMNI_ERR_RUNTIME otherwise. */
#ifndef OMNI_CUDA_CHECK_H
#define OMNI_CUDA_CHECK_H

#include <cuda_runtime_api.h>
#ifndef KVC_EMU
#include <cublas_v2.h>
#endif

#include "kernels/status.h"

#define OMNI_CUDA_TRY(call)                                                                                    \
    do {                                                                                                       \
        cudaError_t e_ = (call);                                                                               \
        if (e_ != cudaSuccess)                                                                                 \
            return omni_fail(e_ == cudaErrorMemoryAllocation ? OMNI_ERR_NOMEM : OMNI_ERR_RUNTIME,              \
                             "%s: %s (%s:%d): %s", __func__, #call, __FILE__, __LINE__, cudaGetErrorString(e_)); \
    } while (0)

#ifndef KVC_EMU
#define OMNI_CUBLAS_TRY(call)                                                                                  \
    do {                                                                                                       \
        cublasStatus_t s_ = (call);                                                                            \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                                       \
            return omni_fail(s_ == CUBLAS_STATUS_ALLOC_FAILED ? OMNI_ERR_NOMEM : OMNI_ERR_RUNTIME,             \
                             "%s: %s (%s:%d): %s", __func__, #call, __FILE__, __LINE__,                        \
                             cublasGetStatusString(s_));                                                       \
    } while (0)
#endif

/* After a kernel launch: a bad launch configuration shows up here (asynchronous faults show up at sync). */
#define OMNI_CUDA_LAUNCHED() OMNI_CUDA_TRY(cudaGetLastError())

#endif

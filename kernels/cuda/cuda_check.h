/* cuda_check.h - internal to kernels/cuda: turn CUDA / cuBLAS return codes into omni_status + message.
 * OMNI_CUDA_TRY(call) returns from the enclosing function with OMNI_ERR_RUNTIME and "func: call: error text". */
#ifndef OMNI_CUDA_CHECK_H
#define OMNI_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/status.h"

#define OMNI_CUDA_TRY(call)                                                                                    \
    do {                                                                                                       \
        cudaError_t e_ = (call);                                                                               \
        if (e_ != cudaSuccess)                                                                                 \
            return omni_fail(OMNI_ERR_RUNTIME, "%s: %s: %s", __func__, #call, cudaGetErrorString(e_));         \
    } while (0)

#define OMNI_CUBLAS_TRY(call)                                                                                  \
    do {                                                                                                       \
        cublasStatus_t s_ = (call);                                                                            \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                                       \
            return omni_fail(OMNI_ERR_RUNTIME, "%s: %s: %s", __func__, #call, cublasGetStatusString(s_));      \
    } while (0)

/* After a kernel launch: a bad launch configuration shows up here (asynchronous faults show up at sync). */
#define OMNI_CUDA_LAUNCHED() OMNI_CUDA_TRY(cudaGetLastError())

#endif

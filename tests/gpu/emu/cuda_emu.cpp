/* cuda_emu.cpp - the CPU emulator behind cuda_emu.h: fibers and barriers, the emulated PTX instructions, and the
 * CUDA runtime API subset that the kernels' host code and the GPU tests call (device memory = host memory).
 * x86-64 only (the fiber switch is written in assembly). See cuda_emu.h for what is and is not modelled. */
#include "cuda_emu.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <vector>

/* ---------------------------------------------------------------- fibers */

extern "C" void emu_switch(void **save_sp, void *load_sp);
asm(R"(
.text
.globl emu_switch
.type emu_switch,@function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.size emu_switch,.-emu_switch
.section .note.GNU-stack,"",@progbits
.text
)");

namespace emu {

static const size_t kStack = 512 * 1024;

struct Fiber {
    void *sp;
    uint3 tid;
    int lane, warp, done;
    const char *waiting; /* what it waits for (deadlock report) */
};

struct Warp {
    int alive, count, gen;
    uint32_t slots[32][16];
};

struct Cta {
    uint3 bid;
    dim3 bdim, gdim;
    int n, alive, count, gen;
    std::vector<Fiber> fibers;
    std::vector<Warp> warps;
    std::vector<char *> stacks;
    char *smem;
    std::function<void()> body;
};

static Cta g_cta;
static Fiber *g_cur;
static void *g_sched_sp;
static long long g_idle; /* yields since the last progress */

static void fiber_entry() {
    g_cta.body();
    g_cur->done = 1;
    g_cta.alive--;
    g_cta.warps[g_cur->warp].alive--;
    g_idle = 0;
    /* a fiber that ends releases barriers the others wait at (exited threads count as arrived) */
    if (g_cta.count >= g_cta.alive && g_cta.count > 0) g_cta.count = 0, g_cta.gen++;
    Warp &w = g_cta.warps[g_cur->warp];
    if (w.count >= w.alive && w.count > 0) w.count = 0, w.gen++;
    emu_switch(&g_cur->sp, g_sched_sp);
    abort(); /* never resumed */
}

static void yield() { emu_switch(&g_cur->sp, g_sched_sp); }

static void deadlock() {
    fprintf(stderr, "cuda_emu: DEADLOCK in CTA (%u,%u,%u): no fiber progresses; waiting:\n", g_cta.bid.x, g_cta.bid.y,
            g_cta.bid.z);
    int shown = 0;
    for (Fiber &f : g_cta.fibers)
        if (!f.done && shown++ < 16) fprintf(stderr, "  thread %u (warp %d lane %d): %s\n", f.tid.x, f.warp, f.lane, f.waiting);
    abort();
}

void spin(const char *what) {
    g_cur->waiting = what;
    if (++g_idle > 50000000LL) deadlock();
    yield();
}

const uint3 &thread_idx() { return g_cur->tid; }
const uint3 &block_idx() { return g_cta.bid; }
const dim3 &block_dim() { return g_cta.bdim; }
const dim3 &grid_dim() { return g_cta.gdim; }
void *dyn_smem() { return g_cta.smem; }
int lane_id() { return g_cur->lane; }

void sync_threads() {
    const int gen = g_cta.gen;
    if (++g_cta.count >= g_cta.alive) {
        g_cta.count = 0;
        g_cta.gen++;
        g_idle = 0;
        return;
    }
    while (g_cta.gen == gen) spin("__syncthreads");
}

void sync_warp() {
    Warp &w = g_cta.warps[g_cur->warp];
    const int gen = w.gen;
    if (++w.count >= w.alive) {
        w.count = 0;
        w.gen++;
        g_idle = 0;
        return;
    }
    while (w.gen == gen) spin("warp barrier (__syncwarp / collective)");
}

const uint32_t (*exchange(const uint32_t *mine, int n))[16] {
    Warp &w = g_cta.warps[g_cur->warp];
    memcpy(w.slots[g_cur->lane], mine, (size_t)n * 4);
    sync_warp();
    return w.slots;
}

void exchange_done() { sync_warp(); }

/* CUDA graphs: while a stream capture is active, launches and async copies are recorded (not run); a graph launch
 * replays them in order, reading memory at replay time as the GPU does. */
struct Graph {
    std::vector<std::function<void()>> ops;
};
static Graph *g_capture = nullptr;
int capturing() { return g_capture != nullptr; }
void record(std::function<void()> op) { g_capture->ops.push_back(std::move(op)); }

static cudaError_t launch_now(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body);

cudaError_t launch(dim3 grid, dim3 block, size_t smem, std::function<void()> body) {
    if (!g_capture) return launch_now(grid, block, smem, body);
    const int n = (int)(block.x * block.y * block.z);
    if (n <= 0 || n > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535)
        return cudaErrorInvalidConfiguration;
    record([=]() { launch_now(grid, block, smem, body); });
    return cudaSuccess;
}

static cudaError_t launch_now(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body) {
    const int n = (int)(block.x * block.y * block.z);
    if (n <= 0 || n > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535)
        return cudaErrorInvalidConfiguration;
    if (smem > 227 * 1024) return cudaErrorInvalidValue;
    Cta &c = g_cta;
    c.body = body;
    c.bdim = block, c.gdim = grid, c.n = n;
    c.fibers.assign((size_t)n, Fiber());
    c.warps.assign((size_t)(n + 31) / 32, Warp());
    while ((int)c.stacks.size() < n) c.stacks.push_back((char *)aligned_alloc(64, kStack));
    std::vector<char> sm(smem + 64);
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                c.bid = make_uint3(x, y, z);
                c.alive = n, c.count = 0, c.gen = 0;
                memset(sm.data(), 0xa5, sm.size()); /* shared memory starts as garbage, never zeros */
                c.smem = sm.data();
                for (size_t w = 0; w < c.warps.size(); w++) {
                    c.warps[w].alive = (int)(n - 32 * w < 32 ? n - 32 * w : 32);
                    c.warps[w].count = c.warps[w].gen = 0;
                }
                for (int t = 0; t < n; t++) {
                    Fiber &f = c.fibers[(size_t)t];
                    f.tid = make_uint3((unsigned)t % block.x, ((unsigned)t / block.x) % block.y,
                                       (unsigned)t / (block.x * block.y));
                    f.lane = t % 32, f.warp = t / 32, f.done = 0, f.waiting = "start";
                    void **sp = (void **)((uintptr_t)(c.stacks[(size_t)t] + kStack) & ~(uintptr_t)15);
                    *--sp = nullptr;                 /* alignment slot: rsp % 16 == 8 at entry, as after a call */
                    *--sp = (void *)&fiber_entry;    /* popped by emu_switch's ret */
                    for (int r = 0; r < 6; r++) *--sp = nullptr; /* rbp rbx r12-r15 */
                    f.sp = sp;
                }
                g_idle = 0;
                for (int left = n; left > 0;) {
                    left = 0;
                    for (Fiber &f : c.fibers) {
                        if (f.done) continue;
                        g_cur = &f;
                        emu_switch(&g_sched_sp, f.sp);
                        left += !f.done;
                    }
                }
            }
    return cudaSuccess;
}

/* ---------------------------------------------------------------- conversions */

uint16_t f2h(float f) {
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}
float h2f(uint16_t u) {
    _Float16 h;
    memcpy(&h, &u, 2);
    return (float)h;
}
uint16_t f2bf(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
float bf2f(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }

/* ---------------------------------------------------------------- matrix instructions */

static float elem(uint32_t reg, int half, int bf16) {
    uint16_t h = (uint16_t)(half ? reg >> 16 : reg & 0xffffu);
    return bf16 ? bf2f(h) : h2f(h);
}

/* m16n8k16: A [16][16] (a0: row g, k 2t..; a1: row g+8; a2: row g, k 2t+8..; a3: row g+8, k 2t+8..), B [16][8]
 * (b0: k 2t.., col g; b1: k 2t+8.., col g), C/D [16][8] (c0,c1: row g, cols 2t, 2t+1; c2,c3: row g+8). */
void mma_16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, const float c[4], int bf16) {
    uint32_t mine[6] = {a[0], a[1], a[2], a[3], b0, b1};
    const uint32_t(*t)[16] = exchange(mine, 6);
    const int lane = g_cur->lane, g = lane >> 2, tg = lane & 3;
    float out[4];
    for (int i = 0; i < 4; i++) {
        const int row = g + (i >= 2 ? 8 : 0), col = 2 * tg + (i & 1);
        double s = c[i];
        for (int k = 0; k < 16; k++) {
            const int al = (row % 8) * 4 + (k % 8) / 2, ar = (row / 8) + 2 * (k / 8);
            const int bl = col * 4 + (k % 8) / 2, br = k / 8;
            s += (double)elem(t[al][ar], k & 1, bf16) * (double)elem(t[bl][4 + br], k & 1, bf16);
        }
        out[i] = (float)s;
    }
    exchange_done();
    memcpy(d, out, sizeof out);
}

/* m8n8 b16: the source fragment (row g, cols 2t, 2t+1) becomes the transpose's fragment. */
uint32_t movmatrix_trans(uint32_t x) {
    const uint32_t(*t)[16] = exchange(&x, 1);
    const int lane = g_cur->lane, g = lane >> 2, tg = lane & 3;
    uint32_t r = 0;
    for (int e = 0; e < 2; e++) { /* transposed (g, 2tg + e) = source (2tg + e, g) */
        const int sr = 2 * tg + e, sc = g, sl = sr * 4 + sc / 2;
        r |= ((t[sl][0] >> (16 * (sc & 1))) & 0xffffu) << (16 * e);
    }
    exchange_done();
    return r;
}

/* ldmatrix .x4 .b16: lane l gives the address of row l % 8 of matrix l / 8; r[i] = matrix i's fragment. */
void ldmatrix_x4(uint32_t r[4], const void *row_addr, int trans) {
    uint64_t a = (uint64_t)(uintptr_t)row_addr;
    uint32_t mine[2] = {(uint32_t)a, (uint32_t)(a >> 32)};
    const uint32_t(*t)[16] = exchange(mine, 2);
    const int lane = g_cur->lane, g = lane >> 2, tg = lane & 3;
    uint32_t out[4];
    for (int m = 0; m < 4; m++) {
        out[m] = 0;
        for (int e = 0; e < 2; e++) {
            int row = trans ? 2 * tg + e : g, col = trans ? g : 2 * tg + e; /* element of the stored matrix */
            const uint32_t *ra = t[8 * m + row];
            const uint16_t *p = (const uint16_t *)(uintptr_t)(((uint64_t)ra[1] << 32) | ra[0]);
            out[m] |= (uint32_t)p[col] << (16 * e);
        }
    }
    exchange_done();
    memcpy(r, out, sizeof out);
}

/* mbarrier: {int32 tx count, uint16 pending arrivals, uint16 expected count (15 bits) | phase << 15}. */
struct Mbar {
    int32_t tx;
    uint16_t pending, exp_phase;
};
static_assert(sizeof(Mbar) == 8, "mbarrier is 8 bytes");

static void mbar_check(Mbar *m) {
    if (m->pending == 0 && m->tx == 0) {
        m->exp_phase ^= 0x8000u;
        m->pending = m->exp_phase & 0x7fffu;
        g_idle = 0;
    }
}
void mbar_init(uint64_t *bar, int count) {
    Mbar *m = (Mbar *)bar;
    m->tx = 0, m->pending = (uint16_t)count, m->exp_phase = (uint16_t)count;
}
void mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes) {
    Mbar *m = (Mbar *)bar;
    if (m->pending == 0) {
        fprintf(stderr, "cuda_emu: mbarrier arrive on a phase with no pending arrivals\n");
        abort();
    }
    m->tx += (int32_t)bytes;
    m->pending--;
    mbar_check(m);
}
void mbar_arrive(uint64_t *bar) { mbar_arrive_expect_tx(bar, 0); }
int mbar_try_wait_parity(uint64_t *bar, int parity) {
    Mbar *m = (Mbar *)bar;
    return (int)((m->exp_phase >> 15) & 1u) != (parity & 1);
}
void bulk_copy_g2s(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
    if (bytes % 16 || (uintptr_t)dst % 16 || (uintptr_t)src % 16) {
        fprintf(stderr, "cuda_emu: cp.async.bulk needs 16-byte aligned addresses and sizes (%p %p %u)\n", dst, src,
                bytes);
        abort();
    }
    memcpy(dst, src, bytes);
    Mbar *m = (Mbar *)bar;
    m->tx -= (int32_t)bytes;
    mbar_check(m);
}

void cp_async16(void *dst, const void *src) {
    if ((uintptr_t)dst % 16 || (uintptr_t)src % 16) {
        fprintf(stderr, "cuda_emu: cp.async of 16 bytes needs 16-byte aligned addresses (%p %p)\n", dst, src);
        abort();
    }
    memcpy(dst, src, 16);
}

} // namespace emu

/* ---------------------------------------------------------------- CUDA runtime API subset */

static cudaError_t g_last = cudaSuccess;
static int g_n_sm = 16; /* small on purpose: the kernels' split logic runs with many splits per sequence */

static cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess) g_last = e;
    return e;
}

extern "C" {
cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d) {
    *d = 0;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr attr, int) {
    switch (attr) {
    case cudaDevAttrMultiProcessorCount: *v = g_n_sm; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = 227 * 1024; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = 228 * 1024; break;
    case cudaDevAttrL2CacheSize: *v = 60 * 1024 * 1024; break;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
    default: *v = 0; break;
    }
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t n) {
    size_t sz = (n + 255) & ~(size_t)255;
    *p = aligned_alloc(256, sz ? sz : 256);
    if (!*p) return ret(cudaErrorMemoryAllocation);
    memset(*p, 0xff, sz ? sz : 256);
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void **p, size_t n) { return cudaMalloc(p, n); }
cudaError_t cudaFree(void *p) {
    free(p);
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) { return cudaFree(p); }
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind) {
    memmove(d, s, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t) {
    if (emu::capturing()) {
        emu::record([=]() { memmove(d, s, n); });
        return cudaSuccess;
    }
    return cudaMemcpy(d, s, n, k);
}
cudaError_t cudaMemcpy2DAsync(void *d, size_t dpitch, const void *s, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind, cudaStream_t) {
    if (width > dpitch || width > spitch) return ret(cudaErrorInvalidValue);
    for (size_t r = 0; r < height; r++) memmove((char *)d + r * dpitch, (const char *)s + r * spitch, width);
    return cudaSuccess;
}
cudaError_t cudaMemset(void *d, int v, size_t n) {
    memset(d, v, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t) {
    if (emu::capturing()) {
        emu::record([=]() { memset(d, v, n); });
        return cudaSuccess;
    }
    return cudaMemset(d, v, n);
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int) { return cudaMalloc(p, n); }
cudaError_t cudaStreamBeginCapture(cudaStream_t, enum cudaStreamCaptureMode) {
    if (emu::g_capture) return ret(cudaErrorIllegalState);
    emu::g_capture = new emu::Graph();
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *g) {
    if (!emu::g_capture) return ret(cudaErrorIllegalState);
    *g = (cudaGraph_t)emu::g_capture;
    emu::g_capture = nullptr;
    return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t, enum cudaStreamCaptureStatus *st) {
    *st = emu::g_capture ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long) {
    *e = (cudaGraphExec_t) new emu::Graph(*(emu::Graph *)g);
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t) {
    if (emu::g_capture) return ret(cudaErrorStreamCaptureUnsupported);
    for (auto &op : ((emu::Graph *)e)->ops) op();
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    delete (emu::Graph *)g;
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
    delete (emu::Graph *)e;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamCreate(cudaStream_t *s) {
    *s = (cudaStream_t)malloc(16);
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int) { return cudaStreamCreate(s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    free(s);
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void) {
    cudaError_t e = g_last;
    g_last = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return g_last; }
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error (emulator)";
    case cudaErrorInvalidValue: return "invalid argument (emulator)";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument (emulator)";
    case cudaErrorMemoryAllocation: return "out of memory (emulator)";
    default: return "error (emulator)";
    }
}
cudaError_t cudaFuncSetAttribute(const void *, enum cudaFuncAttribute, int) { return cudaSuccess; }
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *a, const void *) {
    memset(a, 0, sizeof *a);
    a->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, const void *, int block, size_t smem) {
    int by_smem = smem ? (int)((228 * 1024) / (smem + 1024)) : 32, by_thr = 2048 / block;
    *n = by_smem < by_thr ? by_smem : by_thr;
    if (*n > 4) *n = 4;
    if (*n < 1) *n = 1;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) {
    *e = (cudaEvent_t)calloc(1, sizeof(double));
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    free(e);
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int) { return cudaEventCreate(e); }
cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned int) { return cudaEventRecord(e, s); }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *(double *)e = ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int) { return cudaSuccess; } /* in order */
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    *ms = (float)(*(double *)b - *(double *)a);
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    *free_b = (size_t)8 << 30, *total = (size_t)16 << 30;
    return cudaSuccess;
}
}

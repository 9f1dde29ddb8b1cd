/* tests/cuda_emu/emu.h — runs CUDA kernels of src/backends/cuda on the CPU, one thread
 * block at a time, for checking a kernel's index arithmetic and fragment layouts where no
 * GPU is lent (tests/cuda_emu/README.md). Host C++17 (g++ or clang++), with the CUDA
 * toolkit's headers for the vector and bf16 types.
 *
 * Each thread of a block is a fiber (ucontext) with its own threadIdx; a fiber runs until
 * it reaches a point where threads meet — __syncthreads (the block), __syncwarp, a
 * shuffle, an mma.sync or an ldmatrix (its warp) — and the scheduler resumes it once every thread
 * that must meet there has arrived, having carried out the warp's collective operation as
 * the PTX ISA defines it:
 *   mma.sync.m16n8k16 (bf16 × bf16 → f32), lane = 4g + t:
 *     A (16×16): a[r] holds row g + 8·(r % 2), columns 2t + 8·(r / 2) and the next
 *     B (16×8):  b[r] holds rows (k) 2t + 8·r and the next, column g
 *     C (16×8):  c[r] is row g + 8·(r / 2), column 2t + (r % 2)
 *   mma.sync.m16n8k8 (tf32 × tf32 → f32): A (16×8): a[r] is row g + 8·(r % 2), column
 *     t + 4·(r / 2); B (8×8): b[r] is row (k) t + 4·r, column g; C as above. Products are
 *     exact (tf32 × tf32 fits in f32), sums in f32. cvt.rna.tf32.f32 rounds to nearest,
 *     ties away from zero.
 *   ldmatrix.x4 (8×8 b16 matrices): lane l gives row l % 8 of matrix l / 8; register j
 *     gets matrix j's elements (g, 2t) and (g, 2t + 1), the first in the low half; .trans
 *     gets (2t, g) and (2t + 1, g).
 * A kernel whose threads would diverge at a meeting point (some at a barrier, some not)
 * is reported as a deadlock.
 *
 * Blocks run one after another (launch), or several at once (launch_resident: `resident`
 * blocks at a time, each with its own shared memory, the next block in blockIdx order
 * started as one ends, as a GPU's block scheduler does; the threads of all running blocks
 * resumed in an order drawn from `seed`, each block at a speed drawn too, so that blocks
 * drift apart), for kernels whose blocks wait for each other:
 * an atomic increment (RMK_EMU_ATOMIC_INC), a spin until a word holds a value
 * (RMK_EMU_WAIT_EQ: the thread yields until it does) and a release store. Memory is
 * sequentially consistent here (one host thread); a thread runs undisturbed from one
 * meeting point or spin to the next. When every running thread waits and none can go on,
 * the emulator reports a deadlock: a block waiting for one that has not started, with all
 * the GPU's places taken, is one on a GPU too. A kernel's static __shared__ arrays are
 * the kernel's function-local statics where a test defines __shared__ as `static` (as
 * layer_norm_emu.cc does; with launch, one block at a time). Not a CUDA implementation:
 * what the emulated kernels use (attention, layer norm, the optimizer updates), nothing
 * else. */
#ifndef REMAT_CUDA_EMU_H
#define REMAT_CUDA_EMU_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <functional>
#include <vector>

namespace rmk_emu {

/* A block's dynamic shared memory, bytes (each running block has its own). */
constexpr size_t SMEM_BYTES = 256 * 1024;

enum wait_kind { RUN = 0, AT_BLOCK, AT_WARP, DONE, SPIN };
enum warp_op { OP_SHFL = 1, OP_MMA, OP_MMA_TF32, OP_LDSM_T, OP_LDSM, OP_SYNCWARP };

struct fiber {
    ucontext_t ctx;
    std::vector<char> stack;
    uint3 tid, bid;
    int place; /* the running block's place (shared memory, warp slots) */
    int state;
};

struct warp_slot {
    int op;
    float fin[32][4]; /* shuffle value (f32 view) / mma C */
    double din[32];   /* shuffle value (f64) */
    int is_double[32];
    uint32_t uin[32][6]; /* mma A (4), B (2) */
    int arg[32];         /* shuffle xor offset */
    const void *ptr[32]; /* ldmatrix row addresses */
    float fout[32][4];   /* mma D / shuffle result */
    double dout[32];
    uint32_t uout[32][4]; /* ldmatrix registers */
};

inline ucontext_t sched_ctx;
inline std::vector<fiber> fibers;
inline std::vector<warp_slot> slots;
inline fiber *cur = nullptr;
inline uint3 grid_dim, block_dim;
inline std::function<void()> body;
inline std::vector<std::vector<unsigned char>> smem; /* per place, SMEM_BYTES + 16 */
inline int warps_per_block = 1;

inline int lane_of(const fiber *f) { return (int)(f->tid.x & 31); }
inline warp_slot &my_slot() { return slots[cur->place * warps_per_block + (cur->tid.x >> 5)]; }
inline unsigned char *my_smem() {
    unsigned char *p = smem[(size_t)cur->place].data();
    return p + ((16 - (uintptr_t)p % 16) % 16);
}

inline void yield(int state) {
    cur->state = state;
    swapcontext(&cur->ctx, &sched_ctx);
}

inline void sync_block() { yield(AT_BLOCK); }

/* atomicAdd(p, 1) (threads switch only where they yield: this is atomic) */
inline unsigned atomic_inc(unsigned *p) { return (*p)++; }
/* spin until *p == v: the thread yields while it does not */
inline void wait_eq(const unsigned *p, unsigned v) {
    while (*(const volatile unsigned *)p != v) yield(SPIN);
}
inline void store_release(unsigned *p, unsigned v) { *(volatile unsigned *)p = v; }

/* __syncwarp: the warp's lanes meet (shared-memory hand-offs between them are ordered) */
inline void sync_warp() {
    my_slot().op = OP_SYNCWARP;
    yield(AT_WARP);
}

template <typename T> inline T shfl_xor(T v, int o) {
    warp_slot &s = my_slot();
    const int l = lane_of(cur);
    s.op = OP_SHFL;
    s.arg[l] = o;
    s.is_double[l] = sizeof(T) == 8;
    if (sizeof(T) == 8) s.din[l] = (double)v;
    else s.fin[l][0] = (float)v;
    yield(AT_WARP);
    return sizeof(T) == 8 ? (T)s.dout[l] : (T)s.fout[l][0];
}

inline float bf16_lo(uint32_t u) {
    uint32_t b = u << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}
inline float bf16_hi(uint32_t u) {
    uint32_t b = u & 0xFFFF0000u;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* mma.sync (op: OP_MMA bf16 m16n8k16, OP_MMA_TF32 tf32 m16n8k8): c += A·B for the warp */
inline void mma_op(int op, float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    warp_slot &s = my_slot();
    const int l = lane_of(cur);
    s.op = op;
    for (int i = 0; i < 4; i++) {
        s.uin[l][i] = a[i];
        s.fin[l][i] = c[i];
    }
    s.uin[l][4] = b0;
    s.uin[l][5] = b1;
    yield(AT_WARP);
    for (int i = 0; i < 4; i++) c[i] = s.fout[l][i];
}

/* cvt.rna.tf32.f32: to 10 mantissa bits, nearest, ties away from zero (NaN and inf kept) */
inline uint32_t tf32_rna(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7F800000u) == 0x7F800000u) return u;
    return (u + 0x1000u) & 0xFFFFE000u;
}

/* ex2.approx.ftz.f32: 2^x, a subnormal input read as 0 and a result below 2^-126 flushed to
 * +0 (the hardware's approximation, 2 ulp at most as CUDA documents exp2f, which is this
 * instruction plus a fix-up for subnormal results, is the host's exp2f here) */
inline float ex2_ftz(float x) {
    if (fabsf(x) < 0x1p-126f) x = 0.f;
    const float r = exp2f(x);
    return r < 0x1p-126f ? 0.f : r; /* NaN kept */
}

/* a tf32 operand as the tensor core reads it: the register's top 19 bits */
inline float tf32_val(uint32_t u) {
    u &= 0xFFFFE000u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

inline void ldsm_x4_op(int op, uint32_t (&r)[4], const void *row) {
    warp_slot &s = my_slot();
    const int l = lane_of(cur);
    s.op = op;
    s.ptr[l] = row;
    yield(AT_WARP);
    for (int i = 0; i < 4; i++) r[i] = s.uout[l][i];
}
inline void ldsm_x4_t(uint32_t (&r)[4], const void *row) { ldsm_x4_op(OP_LDSM_T, r, row); }
inline void ldsm_x4(uint32_t (&r)[4], const void *row) { ldsm_x4_op(OP_LDSM, r, row); }

/* D = A (16×K) · B (K×8) + C for every lane: C and D in the accumulator layout, row
 * g + 8·(r / 2), column 2t + (r % 2) of register r; products summed in f32, k in order */
inline void mma_out(warp_slot &s, const float (&A)[16][16], const float (&B)[16][8], int K) {
    for (int l = 0; l < 32; l++) {
        const int g = l >> 2, t = l & 3;
        for (int r = 0; r < 4; r++) {
            const int row = g + 8 * (r / 2), col = 2 * t + (r % 2);
            float acc = s.fin[l][r];
            for (int k = 0; k < K; k++) acc += A[row][k] * B[k][col];
            s.fout[l][r] = acc;
        }
    }
}

/* the warp's collective, every lane arrived */
inline void run_warp_op(warp_slot &s) {
    if (s.op == OP_SHFL) {
        for (int l = 0; l < 32; l++) {
            const int src = l ^ s.arg[l];
            if (s.is_double[l]) s.dout[l] = s.din[src];
            else s.fout[l][0] = s.fin[src][0];
        }
    } else if (s.op == OP_MMA) {
        float A[16][16], B[16][8];
        for (int l = 0; l < 32; l++) {
            const int g = l >> 2, t = l & 3;
            for (int r = 0; r < 4; r++) {
                const int row = g + 8 * (r % 2), col = 2 * t + 8 * (r / 2);
                A[row][col] = bf16_lo(s.uin[l][r]);
                A[row][col + 1] = bf16_hi(s.uin[l][r]);
            }
            for (int r = 0; r < 2; r++) {
                const int k = 2 * t + 8 * r;
                B[k][g] = bf16_lo(s.uin[l][4 + r]);
                B[k + 1][g] = bf16_hi(s.uin[l][4 + r]);
            }
        }
        mma_out(s, A, B, 16);
    } else if (s.op == OP_MMA_TF32) { /* m16n8k8: A (16×8), B (8×8) */
        float A[16][16], B[16][8];
        for (int l = 0; l < 32; l++) {
            const int g = l >> 2, t = l & 3;
            for (int r = 0; r < 4; r++) A[g + 8 * (r % 2)][t + 4 * (r / 2)] = tf32_val(s.uin[l][r]);
            for (int r = 0; r < 2; r++) B[t + 4 * r][g] = tf32_val(s.uin[l][4 + r]);
        }
        mma_out(s, A, B, 8);
    } else if (s.op == OP_LDSM_T || s.op == OP_LDSM) {
        for (int l = 0; l < 32; l++)
            if ((uintptr_t)s.ptr[l] & 15) {
                fprintf(stderr, "cuda_emu: ldmatrix row address not 16-byte aligned\n");
                abort();
            }
        for (int l = 0; l < 32; l++) {
            const int g = l >> 2, t = l & 3;
            for (int j = 0; j < 4; j++) {
                if (s.op == OP_LDSM_T) { /* elements (2t, g), (2t + 1, g) */
                    const uint16_t *r0 = (const uint16_t *)s.ptr[8 * j + 2 * t],
                                   *r1 = (const uint16_t *)s.ptr[8 * j + 2 * t + 1];
                    s.uout[l][j] = (uint32_t)r0[g] | ((uint32_t)r1[g] << 16);
                } else { /* elements (g, 2t), (g, 2t + 1) */
                    const uint16_t *r = (const uint16_t *)s.ptr[8 * j + g];
                    s.uout[l][j] = (uint32_t)r[2 * t] | ((uint32_t)r[2 * t + 1] << 16);
                }
            }
        }
    }
}

inline void fiber_main() {
    body();
    cur->state = DONE;
    swapcontext(&cur->ctx, &sched_ctx);
}

/* A fiber set to run the kernel as thread `thread` of block `block` in place `place`
 * (getcontext out of launch_resident, whose variables it would leave undefined). */
__attribute__((noinline)) inline void start_fiber(fiber &f, unsigned thread, unsigned block,
                                                  unsigned place) {
    if (f.stack.empty()) f.stack.resize(256 * 1024);
    f.tid = make_uint3(thread, 0, 0);
    f.bid = make_uint3(block, 0, 0);
    f.place = (int)place;
    f.state = RUN;
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data();
    f.ctx.uc_stack.ss_size = f.stack.size();
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_main, 0);
}

/* Runs `kernel_body` (the kernel called with its arguments) over grid × nt threads,
 * `resident` blocks at a time, threads resumed in an order drawn from `seed` (0: in order). */
inline void launch_resident(unsigned grid, unsigned nt, unsigned places, uint64_t seed,
                            std::function<void()> kernel_body) {
    const unsigned resident = places < 1 ? 1 : places;
    body = std::move(kernel_body);
    grid_dim = make_uint3(grid, 1, 1);
    block_dim = make_uint3(nt, 1, 1);
    warps_per_block = (int)((nt + 31) / 32);
    /* fibers (and their stacks) kept from launch to launch: the first resident × nt used */
    if (fibers.size() < (size_t)resident * nt) fibers.resize((size_t)resident * nt);
    slots.assign((size_t)resident * (size_t)warps_per_block, warp_slot());
    if (smem.size() < resident) smem.resize(resident);
    for (auto &m : smem) m.resize(SMEM_BYTES + 16);
    std::vector<long> block_of(resident, -1); /* each place's block, -1 free */
    std::vector<int> speed(resident, 8);
    std::vector<size_t> order;
    unsigned next = 0;
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 1;
    for (;;) {
        bool moved = false;
        for (unsigned pl = 0; pl < resident; pl++) { /* start blocks in free places */
            if (block_of[pl] >= 0 || next >= grid) continue;
            block_of[pl] = next;
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            speed[pl] = 1 << (rng >> 62);                   /* of 8 rounds: 1, 2, 4 or 8 */
            memset(smem[pl].data(), 0xA5, smem[pl].size()); /* stale data, as a GPU leaves */
            for (unsigned i = 0; i < nt; i++) start_fiber(fibers[(size_t)pl * nt + i], i, next, pl);
            next++;
            moved = true;
        }
        order.clear();
        for (unsigned pl = 0; pl < resident; pl++)
            if (block_of[pl] >= 0)
                for (unsigned i = 0; i < nt; i++) order.push_back((size_t)pl * nt + i);
        if (order.empty()) break; /* every block done */
        if (seed)
            for (size_t i = order.size() - 1; i > 0; i--) { /* Fisher-Yates, xorshift */
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                const size_t k = (size_t)(rng % (i + 1));
                const size_t x = order[i];
                order[i] = order[k];
                order[k] = x;
            }
        /* drawn orders also give each block a speed (it runs in 1, 2, 4 or 8 rounds of 8),
         * so that blocks drift apart as SMs do: one may run many steps ahead of another */
        std::vector<char> held(resident, 0);
        bool any_held = false;
        if (seed)
            for (unsigned pl = 0; pl < resident; pl++) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                held[pl] = (char)((rng >> 61) >= (uint64_t)speed[pl]);
                any_held |= held[pl] != 0;
            }
        for (size_t i : order) {
            fiber &f = fibers[i];
            if (held[(size_t)f.place] || (f.state != RUN && f.state != SPIN)) continue;
            const int was = f.state;
            cur = &f;
            swapcontext(&sched_ctx, &f.ctx);
            if (!(was == SPIN && f.state == SPIN)) moved = true;
        }
        for (unsigned pl = 0; pl < resident; pl++) {
            if (block_of[pl] < 0) continue;
            fiber *fb = &fibers[(size_t)pl * nt];
            int done = 0, at_block = 0;
            for (unsigned i = 0; i < nt; i++) {
                done += fb[i].state == DONE;
                at_block += fb[i].state == AT_BLOCK;
            }
            if (done == (int)nt) { /* the block ended: its place is free */
                block_of[pl] = -1;
                moved = true;
                continue;
            }
            for (int w = 0; w < warps_per_block; w++) { /* warps whose lanes all arrived */
                int n = 0;
                for (unsigned l = 0; l < 32 && 32 * w + l < nt; l++)
                    n += fb[32 * w + l].state == AT_WARP;
                if (n == 32) {
                    run_warp_op(slots[(size_t)pl * warps_per_block + w]);
                    for (unsigned l = 0; l < 32; l++) fb[32 * w + l].state = RUN;
                    moved = true;
                }
            }
            if (at_block + done == (int)nt && at_block > 0) {
                if (done) { /* exited threads do not count at a barrier on a GPU either; the
                             * kernels here never exit early, so say so */
                    fprintf(stderr, "cuda_emu: a barrier with %d threads exited\n", done);
                    abort();
                }
                for (unsigned i = 0; i < nt; i++) fb[i].state = RUN;
                moved = true;
            }
        }
        if (!moved && !any_held) {
            fprintf(stderr, "cuda_emu: deadlock: no running thread can go on (blocks");
            for (unsigned pl = 0; pl < resident; pl++)
                if (block_of[pl] >= 0) fprintf(stderr, " %ld", block_of[pl]);
            fprintf(stderr, " running, %u of %u started)\n", next, grid);
            abort();
        }
    }
}

/* Blocks one after another. */
inline void launch(unsigned grid, unsigned nt, std::function<void()> kernel_body) {
    launch_resident(grid, nt, 1, 0, std::move(kernel_body));
}

} // namespace rmk_emu

/* What the kernels see of CUDA. */
#define threadIdx (rmk_emu::cur->tid)
#define blockIdx (rmk_emu::cur->bid)
#define gridDim (rmk_emu::grid_dim)
#define blockDim (rmk_emu::block_dim)
#define __syncthreads() rmk_emu::sync_block()
#define __syncwarp(...) rmk_emu::sync_warp()
#define __shfl_xor_sync(mask, v, o, ...) rmk_emu::shfl_xor((v), (o))
#define __launch_bounds__(...)
#define RMK_EMU_MMA(c, a, b0, b1) rmk_emu::mma_op(rmk_emu::OP_MMA, (c), (a), (b0), (b1))
#define RMK_EMU_LDSM_X4_T(r, p) rmk_emu::ldsm_x4_t((r), (p))
#define RMK_EMU_LDSM_X4(r, p) rmk_emu::ldsm_x4((r), (p))
#define RMK_EMU_MMA_TF32(c, a, b0, b1) rmk_emu::mma_op(rmk_emu::OP_MMA_TF32, (c), (a), (b0), (b1))
#define RMK_EMU_TF32(x) rmk_emu::tf32_rna(x)
#define RMK_EMU_EX2_FTZ(x) rmk_emu::ex2_ftz(x)
#define RMK_EMU_SMEM() rmk_emu::my_smem()
#define RMK_EMU_ATOMIC_INC(p) rmk_emu::atomic_inc(p)
#define RMK_EMU_WAIT_EQ(p, v) rmk_emu::wait_eq((p), (v))
#define RMK_EMU_STORE_REL(p, v) rmk_emu::store_release((p), (v))

inline float __uint_as_float(unsigned int u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline unsigned int __float_as_uint(float f) {
    unsigned int u;
    memcpy(&u, &f, 4);
    return u;
}

/* The round-to-nearest intrinsics (never contracted into fused multiply-adds on a GPU): the
 * host's IEEE operations, which are the same when the emulated code is compiled without
 * contraction (-ffp-contract=off, as CMake builds the emulator tests). */
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return sqrt(a); }
/* atomicMin (cross_entropy's first bad target): the fibers run one at a time, so a plain
 * read-modify-write */
inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v) {
    const unsigned long long old = *p;
    if (v < old) *p = v;
    return old;
}

#endif /* REMAT_CUDA_EMU_H */

/* tests/cuda_emu/emu_check.h — what the emulator tests share beside emu.h: a seeded
 * xorshift64 stream, and bf16 written from the format itself (round to nearest, ties to
 * even, a NaN kept quiet: the rounding every remat converting copy promises), not from the
 * kernels' rmk_f32_to_bf16, so that a test of a bf16 kernel does not check it against
 * itself. */
#ifndef REMAT_EMU_CHECK_H
#define REMAT_EMU_CHECK_H

#include <cstdint>
#include <cstring>

namespace emu_check {

/* xorshift64: each test seeds its own stream; uniform over [lo, hi) */
struct rng {
    uint64_t s;
    double uniform(double lo, double hi) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return lo + (hi - lo) * ((double)(s >> 11) / (double)(1ull << 53));
    }
};

/* f32 -> bf16 to nearest, ties to even; a NaN stays a NaN, quiet */
inline uint16_t bf16_rne(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x7FFFFFu)) return (uint16_t)((u >> 16) | 0x40u);
    const uint32_t rest = u & 0xFFFFu, half = 0x8000u;
    uint32_t hi = u >> 16;
    if (rest > half || (rest == half && (hi & 1u))) hi++;
    return (uint16_t)hi;
}
inline float bf16_val(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline bool same_bits(float a, float b) { return memcmp(&a, &b, 4) == 0; }

} // namespace emu_check

#endif

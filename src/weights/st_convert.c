/* src/weights/st_convert.c — the format's dtypes (names, sizes, the remat
 * dtype each stands for) and a file's elements into a remat dtype: floats
 * (F64, F32, F16, BF16) into f64 / f32 / bf16, integers into i64 (U8 and
 * BOOL also into u8), as PyTorch's Tensor.to converts (floats to bf16
 * rounded to nearest even, through f32 from F64 as PyTorch does). The
 * source may be unaligned (the header's length is arbitrary): elements are
 * read with memcpy, which compilers turn into plain loads. */
#include <string.h>

#include "core/core.h"
#include "weights/st.h"

static const struct {
    const char *name;
    size_t size;
} DTYPES[RM_ST_NDTYPES] = {
    [RM_ST_BOOL] = {"BOOL", 1},       [RM_ST_U8] = {"U8", 1},           [RM_ST_I8] = {"I8", 1},
    [RM_ST_F8_E4M3] = {"F8_E4M3", 1}, [RM_ST_F8_E5M2] = {"F8_E5M2", 1}, [RM_ST_I16] = {"I16", 2},
    [RM_ST_U16] = {"U16", 2},         [RM_ST_F16] = {"F16", 2},         [RM_ST_BF16] = {"BF16", 2},
    [RM_ST_I32] = {"I32", 4},         [RM_ST_U32] = {"U32", 4},         [RM_ST_F32] = {"F32", 4},
    [RM_ST_I64] = {"I64", 8},         [RM_ST_U64] = {"U64", 8},         [RM_ST_F64] = {"F64", 8},
};

int rm_st_dtype_of(const char *name) {
    for (int d = 0; d < RM_ST_NDTYPES; d++)
        if (strcmp(name, DTYPES[d].name) == 0) return d;
    return -1;
}
const char *rm_st_dtype_name(rm_st_dtype d) { return DTYPES[d].name; }
size_t rm_st_dtype_size(rm_st_dtype d) { return DTYPES[d].size; }

int rm_st_dtype_from_remat(remat_dtype d) {
    switch (d) {
    case REMAT_F32: return RM_ST_F32;
    case REMAT_F64: return RM_ST_F64;
    case REMAT_BF16: return RM_ST_BF16;
    case REMAT_I64: return RM_ST_I64;
    case REMAT_U8: return RM_ST_U8;
    }
    return -1;
}

static bool is_float(rm_st_dtype d) {
    return d == RM_ST_F64 || d == RM_ST_F32 || d == RM_ST_F16 || d == RM_ST_BF16;
}

static bool is_int(rm_st_dtype d) {
    return d == RM_ST_I64 || d == RM_ST_I32 || d == RM_ST_I16 || d == RM_ST_I8 || d == RM_ST_U32 ||
           d == RM_ST_U8 || d == RM_ST_BOOL;
}

bool rm_st_convertible(rm_st_dtype src, remat_dtype dst) {
    switch (dst) {
    case REMAT_F32:
    case REMAT_F64:
    case REMAT_BF16: return is_float(src);
    case REMAT_I64: return is_int(src);
    case REMAT_U8: return src == RM_ST_U8 || src == RM_ST_BOOL;
    }
    return false;
}

/* IEEE half -> float, exactly (every half is a float). */
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu, u;
    if (e == 0x1F) {
        u = sign | 0x7F800000u | (m << 13); /* infinities, NaNs (payload kept) */
    } else if (e == 0) {
        float s = (float)m * 0x1p-24f; /* zero or subnormal: m * 2^-24, exact */
        memcpy(&u, &s, 4);
        u |= sign;
    } else {
        u = sign | ((e + 112) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Element i of an array of 2-, 4- or 8-byte elements at s, which may be
 * unaligned, as its bits; and bits as the float or double they spell. */
static inline uint16_t bits16(const unsigned char *s, int64_t i) {
    uint16_t v;
    memcpy(&v, s + 2 * i, 2);
    return v;
}
static inline uint32_t bits32(const unsigned char *s, int64_t i) {
    uint32_t v;
    memcpy(&v, s + 4 * i, 4);
    return v;
}
static inline uint64_t bits64(const unsigned char *s, int64_t i) {
    uint64_t v;
    memcpy(&v, s + 8 * i, 8);
    return v;
}
static inline float as_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline double as_f64(uint64_t u) {
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* Element i of a float source as float / double. */
static inline float load_f32(rm_st_dtype sd, const unsigned char *s, int64_t i) {
    switch (sd) {
    case RM_ST_F16: return f16_to_f32(bits16(s, i));
    case RM_ST_BF16: return rm_bf16_to_f32(bits16(s, i));
    case RM_ST_F64: return (float)as_f64(bits64(s, i));
    default: return as_f32(bits32(s, i));
    }
}

static inline double load_f64(rm_st_dtype sd, const unsigned char *s, int64_t i) {
    return sd == RM_ST_F64 ? as_f64(bits64(s, i)) : (double)load_f32(sd, s, i);
}

/* Element i of an integer source (two's complement: the signed ones' bits
 * read through their own type). */
static inline int64_t load_i64(rm_st_dtype sd, const unsigned char *s, int64_t i) {
    switch (sd) {
    case RM_ST_I64: return (int64_t)bits64(s, i);
    case RM_ST_I32: return (int32_t)bits32(s, i);
    case RM_ST_U32: return bits32(s, i);
    case RM_ST_I16: return (int16_t)bits16(s, i);
    case RM_ST_I8: return (int8_t)s[i];
    case RM_ST_BOOL: return s[i] != 0;
    default: return s[i];
    }
}

void rm_st_convert(rm_st_dtype sd, const void *src, remat_dtype dd, void *dst, int64_t n) {
    const unsigned char *s = src;
    if (n <= 0) return;
    if (rm_st_dtype_from_remat(dd) == (int)sd && sd != RM_ST_BOOL) {
        memcpy(dst, src, (size_t)n * rm_st_dtype_size(sd)); /* the same bytes */
        return;
    }
    switch (dd) {
    case REMAT_F32: {
        float *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = load_f32(sd, s, i);
        break;
    }
    case REMAT_F64: {
        double *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = load_f64(sd, s, i);
        break;
    }
    case REMAT_BF16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = rm_f32_to_bf16(load_f32(sd, s, i));
        break;
    }
    case REMAT_I64: {
        int64_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = load_i64(sd, s, i);
        break;
    }
    case REMAT_U8: {
        unsigned char *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = sd == RM_ST_BOOL ? s[i] != 0 : s[i];
        break;
    }
    }
}

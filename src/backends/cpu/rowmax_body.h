/* src/backends/cpu/rowmax_body.h — rm_rowmax_key (see nn.h), written once and compiled
 * once per dtype: nn.h includes this file with T defined as f32 or f64, TI as the signed
 * integer type of T's width, TI_MIN its least value, TI_ABS T's bits but the sign and
 * TI_INF the bits of +infinity, which it undefines again. No include guard: included once
 * per dtype. */

static inline bool TFN(rm_rowmax_key)(const T *restrict x, int64_t n, T *best) {
    const int sh = (int)(8 * sizeof(TI)) - 1; /* the sign bit's place */
    TI m = TI_MIN, nan = 0;
    for (int64_t i = 0; i < n; i++) {
        TI b;
        memcpy(&b, x + i, sizeof b);
        TI k = b ^ ((b >> sh) & TI_ABS); /* negative values: magnitude bits flipped */
        m = k > m ? k : m;
        nan |= (b & TI_ABS) > TI_INF;
    }
    TI b = m ^ ((m >> sh) & TI_ABS);
    memcpy(best, &b, sizeof b);
    return nan != 0;
}

#undef T
#undef TI
#undef TI_MIN
#undef TI_ABS
#undef TI_INF

/* src/backends/cpu/unary_bwd_cases.h — the body of the unary backward, dx = g * f'(s)
 * where s is the saved x or y (see k_uinfo): included as the body of bwd and bwd_inplace
 * (unary_body.h) so both compile it with their own aliasing (restrict g and dx, or g ==
 * dx) inside each OpenMP region and each target clone — an inline function's OpenMP
 * regions would be outlined, and compiled, once for the baseline ISA. add's dx = g is a
 * copy for f32 and f64 and ST(LD(g)) for bf16 (a signalling NaN comes out quiet, as
 * through f32). No include guard: included once per function. */
switch (op) {
case RM_U_NEG:
    for (int64_t i = 0; i < n; i++) dx[i] = ST(-LD(g[i]));
    break;
case RM_U_EXP: UN_EACH_SIMD(dx, ST(LD(g[i]) * LD(s[i]))); break;
case RM_U_LOG: UN_EACH_SIMD(dx, ST(LD(g[i]) / LD(s[i]))); break;
case RM_U_SQRT: UN_EACH_SIMD(dx, ST(LD(g[i]) / ((C)2 * LD(s[i])))); break;
case RM_U_TANH: UN_EACH_SIMD(dx, ST(LD(g[i]) * ((C)1 - LD(s[i]) * LD(s[i])))); break;
case RM_U_SIGMOID: UN_EACH_SIMD(dx, ST(LD(g[i]) * LD(s[i]) * ((C)1 - LD(s[i])))); break;
case RM_U_RELU: UN_EACH_SIMD(dx, ST(LD(s[i]) > 0 ? LD(g[i]) : (C)0)); break;
case RM_U_GELU_ERF: UN_EACH(dx, ST(LD(g[i]) * UN_GELU_GRAD(LD(s[i])))); break;
case RM_U_GELU_TANH: UN_EACH(dx, ST(LD(g[i]) * UN_GELU_T_GRAD(LD(s[i])))); break;
case RM_U_SILU: UN_EACH(dx, ST(LD(g[i]) * UN_SILU_GRAD(LD(s[i])))); break;
case RM_U_POW: UN_EACH(dx, ST(p == (C)0 ? (C)0 : LD(g[i]) * p * UN_POW(LD(s[i]), p - (C)1))); break;
case RM_U_ADD:
#if UN_COPY_IS_MEMCPY
    if ((const void *)dx != (const void *)g) memcpy(dx, g, (size_t)n * sizeof *dx);
#else
#pragma omp parallel for simd if (n > 65536)
    for (int64_t i = 0; i < n; i++) dx[i] = ST(LD(g[i]));
#endif
    break;
case RM_U_MUL: UN_EACH_SIMD(dx, ST(LD(g[i]) * p)); break;
case RM_U_RSUB:
    for (int64_t i = 0; i < n; i++) dx[i] = ST(-LD(g[i]));
    break;
}

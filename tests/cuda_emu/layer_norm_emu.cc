/* tests/cuda_emu/layer_norm_emu.cc — the layer-norm kernels of src/backends/cuda/layer_norm.cu
 * run on the CPU (emu.h: every thread a fiber, the warp shuffles and block barriers carried
 * out when every thread has arrived), for remat_layer_norm_to's cast folded into the norm:
 *
 *   forward   y stored as bf16 (Y = rmk_bf16) is, bit for bit, the f32 kernel's y rounded
 *             to nearest, ties to even, NaN kept quiet (this file's own rounding, written
 *             from the bf16 format, not the kernels' rmk_f32_to_bf16); mean and rstd the
 *             same bits; with the residual add in front (r f32 or bf16), the sum x + r
 *             bitwise the host's and y, mean, rstd those of the norm run on that sum (the
 *             add then the norm, unfused);
 *   backward  dx, dweight, dbias from a bf16 g (G = rmk_bf16) bitwise those from the same
 *             g widened to f32;
 *   both      against the norm in f64 from the same inputs: y, mean, rstd within 1e-5 and
 *             dx, dw, db within 1e-4 of the largest magnitude (f32 sums over up to 2,500
 *             terms), rows holding a NaN or an infinity left out of this check (bitwise
 *             only).
 * Widths 5…1024 take the warp kernels (every elements-per-lane class, lane tails) and 1100
 * and 2500 the block kernels; every affine form; rows whose weights make subnormal
 * outputs; grids smaller than the work (the kernels' grid-stride loops).
 *
 *   CMake builds it as test_cuda_emu_layer_norm beside the cuda backend (make test). */
#define RMK_EMU 1
#include "emu.h"
#include "emu_check.h"
/* a kernel's static __shared__ array: one for the block (blocks run one after another) */
#undef __shared__
#define __shared__ static

#include "backends/cuda/layer_norm.cu"

#include <vector>

namespace {

int failures = 0;

emu_check::rng gen = {0x2545F4914F6CDD1Dull};
double uniform(double lo, double hi) { return gen.uniform(lo, hi); }

using emu_check::bf16_rne; /* the rounding written from the format (emu_check.h) */
using emu_check::bf16_val;
using emu_check::same_bits;

void expect(bool ok, const char *what, const char *name) {
    if (!ok) {
        printf("  FAIL %s: %s\n", name, what);
        failures++;
    }
}

/* max |got - ref| over finite rows against rtol * the largest |ref| */
void near(const std::vector<double> &ref, const std::vector<float> &got, double rtol,
          const char *what, const char *name) {
    double mx = 0, err = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (!std::isfinite(ref[i])) continue;
        mx = fmax(mx, fabs(ref[i]));
        const double e = fabs(ref[i] - (double)got[i]);
        if (!(e <= err)) err = e; /* NaN counts */
    }
    const bool ok = err <= rtol * (mx > 0 ? mx : 1);
    if (!ok) printf("  FAIL %s: %s max |err| %.3e of max %.3e\n", name, what, err, mx);
    failures += !ok;
}

unsigned capped(int64_t n, unsigned cap) { return (unsigned)(n < (int64_t)cap ? n : cap); }

/* The forward kernel for (N, C) (warp kernels when ln_npl(C), else the block kernel) with
 * grids of at most `cap` blocks. */
template <typename R, typename Y, int NPL>
void fwd_warp(const float *x, const R *r, float *sum, const float *w, const float *b, Y *y,
              float *mean, float *rstd, int64_t N, int64_t C, unsigned cap) {
    rmk_emu::launch(capped(ln_warp_blocks(N), cap), 32 * RMK_LN_WARP_ROWS, [&] {
        ln_fwd_warp<float, R, Y, NPL>(x, r, sum, w, b, y, mean, rstd, N, C, 1e-5);
    });
}
template <typename R, typename Y>
void fwd(const float *x, const R *r, float *sum, const float *w, const float *b, Y *y,
         float *mean, float *rstd, int64_t N, int64_t C, unsigned cap) {
    switch (ln_npl(C)) {
    case 8: fwd_warp<R, Y, 8>(x, r, sum, w, b, y, mean, rstd, N, C, cap); break;
    case 16: fwd_warp<R, Y, 16>(x, r, sum, w, b, y, mean, rstd, N, C, cap); break;
    case 24: fwd_warp<R, Y, 24>(x, r, sum, w, b, y, mean, rstd, N, C, cap); break;
    case 32: fwd_warp<R, Y, 32>(x, r, sum, w, b, y, mean, rstd, N, C, cap); break;
    default:
        rmk_emu::launch(capped(N, cap), RMK_LN_THREADS, [&] {
            ln_fwd<float, R, Y>(x, r, sum, w, b, y, mean, rstd, N, C, 1e-5);
        });
    }
}

/* The backward kernels: dx (warp or block), then the column sums of dw and db. */
template <typename G, int NPL>
void dx_warp(const G *g, const float *x, const float *w, const float *mean, const float *rstd,
             float *dx, int64_t N, int64_t C, unsigned cap) {
    rmk_emu::launch(capped(ln_warp_blocks(N), cap), 32 * RMK_LN_WARP_ROWS,
                    [&] { ln_bwd_dx_warp<float, G, NPL>(g, x, w, mean, rstd, dx, N, C); });
}
template <typename G>
void bwd(const G *g, const float *x, const float *w, const float *mean, const float *rstd,
         float *dx, float *dw, float *db, int64_t N, int64_t C, unsigned cap) {
    switch (ln_npl(C)) {
    case 8: dx_warp<G, 8>(g, x, w, mean, rstd, dx, N, C, cap); break;
    case 16: dx_warp<G, 16>(g, x, w, mean, rstd, dx, N, C, cap); break;
    case 24: dx_warp<G, 24>(g, x, w, mean, rstd, dx, N, C, cap); break;
    case 32: dx_warp<G, 32>(g, x, w, mean, rstd, dx, N, C, cap); break;
    default:
        rmk_emu::launch(capped(N, cap), RMK_LN_THREADS,
                        [&] { ln_bwd_dx<float, G>(g, x, w, mean, rstd, dx, N, C); });
    }
    const int64_t nch = ln_chunks(N);
    std::vector<float> part((size_t)(2 * nch * C));
    rmk_emu::launch(capped(rmk_blocks(nch * C, 256), cap), 256, [&] {
        ln_bwd_cols<float, G>(g, x, mean, rstd, part.data(), N, C, nch);
    });
    rmk_emu::launch(capped(rmk_blocks(C, 256), cap), 256,
                    [&] { ln_bwd_cols_total<float>(part.data(), C, nch, dw, db); });
}

struct kase {
    int64_t N, C;
    int affine; /* bit 0 weight, bit 1 bias */
    int add;    /* 0 no r, 1 f32 r, 2 bf16 r */
    bool odd;   /* a NaN in row 1, an infinity in row 2 */
    unsigned cap;
};

void run(const kase &k) {
    const int64_t N = k.N, C = k.C, n = N * C;
    char name[120];
    snprintf(name, sizeof name, "N=%lld C=%lld affine=%d r=%s%s grid<=%u", (long long)N,
             (long long)C, k.affine, k.add == 0 ? "none" : k.add == 1 ? "f32" : "bf16",
             k.odd ? " NaN/inf rows" : "", k.cap);
    std::vector<float> x((size_t)n), r32((size_t)n), w((size_t)C), b((size_t)C);
    std::vector<rmk_bf16> rh((size_t)n), gh((size_t)n);
    std::vector<float> g32((size_t)n);
    for (auto &v : x) v = (float)uniform(-2, 2);
    for (int64_t i = 0; i < n; i++) {
        const uint16_t h = bf16_rne((float)uniform(-2, 2));
        rh[(size_t)i].bits = h;
        r32[(size_t)i] = k.add == 2 ? bf16_val(h) : (float)uniform(-2, 2);
        const uint16_t gb = bf16_rne((float)uniform(-1, 1));
        gh[(size_t)i].bits = gb;
        g32[(size_t)i] = bf16_val(gb); /* the cast's backward: widened, exact */
    }
    for (int64_t c = 0; c < C; c++) {
        w[(size_t)c] = c % 4 == 0 ? 3e-39f : (float)uniform(0.5, 1.5); /* subnormal outputs */
        b[(size_t)c] = (float)uniform(-1, 1);
    }
    if (k.odd && N > 2) {
        x[(size_t)(1 * C + (C > 3 ? 3 : 0))] = NAN;
        x[(size_t)(2 * C)] = INFINITY;
    }
    const float *wp = k.affine & 1 ? w.data() : nullptr, *bp = k.affine & 2 ? b.data() : nullptr;
    /* the norm's input: x, or the sum x + r */
    std::vector<float> s32(x);
    if (k.add)
        for (int64_t i = 0; i < n; i++) s32[(size_t)i] = x[(size_t)i] + r32[(size_t)i];

    /* forward: f32 y, then bf16 y (both with the add when asked) */
    std::vector<float> y32((size_t)n, NAN), m1((size_t)N, NAN), v1((size_t)N, NAN),
        m2((size_t)N, NAN), v2((size_t)N, NAN), sum1((size_t)n, NAN), sum2((size_t)n, NAN);
    std::vector<rmk_bf16> yh((size_t)n);
    for (auto &e : yh) e.bits = 0x7FC1;
    if (k.add == 2) {
        fwd<rmk_bf16, float>(x.data(), rh.data(), sum1.data(), wp, bp, y32.data(), m1.data(),
                             v1.data(), N, C, k.cap);
        fwd<rmk_bf16, rmk_bf16>(x.data(), rh.data(), sum2.data(), wp, bp, yh.data(), m2.data(),
                                v2.data(), N, C, k.cap);
    } else {
        const float *rp = k.add ? r32.data() : nullptr;
        fwd<float, float>(x.data(), rp, k.add ? sum1.data() : nullptr, wp, bp, y32.data(),
                          m1.data(), v1.data(), N, C, k.cap);
        fwd<float, rmk_bf16>(x.data(), rp, k.add ? sum2.data() : nullptr, wp, bp, yh.data(),
                             m2.data(), v2.data(), N, C, k.cap);
    }
    bool ok = true;
    for (int64_t i = 0; i < n && ok; i++) ok = yh[(size_t)i].bits == bf16_rne(y32[(size_t)i]);
    expect(ok, "bf16 y is not the f32 y rounded to nearest even", name);
    ok = true;
    for (int64_t i = 0; i < N && ok; i++)
        ok = same_bits(m1[(size_t)i], m2[(size_t)i]) && same_bits(v1[(size_t)i], v2[(size_t)i]);
    expect(ok, "mean / rstd differ between the f32 and the bf16 y", name);
    if (k.add) {
        ok = true;
        for (int64_t i = 0; i < n && ok; i++)
            ok = same_bits(sum1[(size_t)i], s32[(size_t)i]) &&
                 same_bits(sum2[(size_t)i], s32[(size_t)i]);
        expect(ok, "the sum is not x + r", name);
        /* the unfused path: the engine's add, then the norm of the sum */
        std::vector<float> yp((size_t)n, NAN), mp((size_t)N, NAN), vp((size_t)N, NAN);
        fwd<float, float>(s32.data(), nullptr, nullptr, wp, bp, yp.data(), mp.data(), vp.data(),
                          N, C, k.cap);
        ok = true;
        for (int64_t i = 0; i < n && ok; i++) ok = same_bits(y32[(size_t)i], yp[(size_t)i]);
        for (int64_t i = 0; i < N && ok; i++)
            ok = same_bits(m1[(size_t)i], mp[(size_t)i]) && same_bits(v1[(size_t)i], vp[(size_t)i]);
        expect(ok, "the add + norm differs from the add then the norm", name);
    }

    /* backward: from the bf16 g and from it widened */
    std::vector<float> dx1((size_t)n, NAN), dx2((size_t)n, NAN), dw1((size_t)C, NAN),
        dw2((size_t)C, NAN), db1((size_t)C, NAN), db2((size_t)C, NAN);
    bwd<float>(g32.data(), s32.data(), wp, m1.data(), v1.data(), dx1.data(), dw1.data(), db1.data(),
               N, C, k.cap);
    bwd<rmk_bf16>(gh.data(), s32.data(), wp, m1.data(), v1.data(), dx2.data(), dw2.data(),
                  db2.data(), N, C, k.cap);
    ok = true;
    for (int64_t i = 0; i < n && ok; i++) ok = same_bits(dx1[(size_t)i], dx2[(size_t)i]);
    expect(ok, "dx from the bf16 g differs from dx from g widened", name);
    ok = true;
    for (int64_t c = 0; c < C && ok; c++)
        ok = same_bits(dw1[(size_t)c], dw2[(size_t)c]) && same_bits(db1[(size_t)c], db2[(size_t)c]);
    expect(ok, "dw / db from the bf16 g differ from those from g widened", name);

    /* the f64 reference from the same inputs (rows with a NaN or an infinity: NaN) */
    std::vector<double> ry((size_t)n), rm((size_t)N), rs((size_t)N), rdx((size_t)n),
        rdw((size_t)C, 0.0), rdb((size_t)C, 0.0);
    for (int64_t i = 0; i < N; i++) {
        const float *sr = s32.data() + i * C;
        double mu = 0, var = 0;
        for (int64_t c = 0; c < C; c++) mu += sr[c];
        mu /= (double)C;
        for (int64_t c = 0; c < C; c++) var += (sr[c] - mu) * (sr[c] - mu);
        const double is = 1.0 / sqrt(var / (double)C + 1e-5);
        rm[(size_t)i] = mu, rs[(size_t)i] = is;
        double a = 0, bb = 0;
        for (int64_t c = 0; c < C; c++) {
            const double nx = (sr[c] - mu) * is, wc = wp ? wp[c] : 1.0, gv = g32[(size_t)(i * C + c)];
            ry[(size_t)(i * C + c)] = nx * wc + (bp ? bp[c] : 0.0);
            a += wc * gv, bb += wc * gv * nx;
            rdw[(size_t)c] += nx * gv, rdb[(size_t)c] += gv;
        }
        for (int64_t c = 0; c < C; c++) {
            const double nx = (sr[c] - mu) * is, wc = wp ? wp[c] : 1.0;
            rdx[(size_t)(i * C + c)] =
                (wc * g32[(size_t)(i * C + c)] - a / (double)C - nx * bb / (double)C) * is;
        }
    }
    near(ry, y32, 1e-5, "y", name);
    near(rm, m1, 1e-5, "mean", name);
    near(rs, v1, 1e-5, "rstd", name);
    near(rdx, dx1, 1e-4, "dx", name);
    if (!k.odd) { /* a non-finite row makes every column sum NaN */
        near(rdw, dw1, 1e-4, "dweight", name);
        near(rdb, db1, 1e-4, "dbias", name);
    }
    printf("  %s\n", name);
}

} // namespace

int main() {
    /* warp kernels: 8, 16, 24, 32 elements a lane, lane tails; block kernels past 1024 */
    const int64_t widths[] = {5, 100, 384, 600, 768, 1000, 1024, 1100, 2500};
    const unsigned caps[] = {1000, 2, 3};
    int i = 0;
    for (int64_t C : widths)
        for (int affine = 0; affine < 4; affine++)
            for (int add = 0; add < 3; add++, i++) {
                const kase k = {C > 1024 ? 9 : 37, C, affine, add, affine == 3 && add != 1,
                                caps[i % 3]};
                run(k);
            }
    printf(failures ? "%d FAILED\n" : "all passed\n", failures);
    return failures ? 1 : 0;
}

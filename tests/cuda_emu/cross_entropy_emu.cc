/* tests/cuda_emu/cross_entropy_emu.cc — the cross_entropy kernels of
 * src/backends/cuda/cross_entropy.cu run on the CPU (emu.h) for autocast's bf16 logits read
 * uncast (X = rmk_bf16 with f32 loss and lse):
 *
 *   forward   lse and the loss from the bf16 logits bitwise those of the f32 kernels on
 *             the logits widened (the cast first), the first bad target found alike;
 *   backward  the bf16 dx bitwise the f32 kernel's dx rounded to nearest even (this file's
 *             own rounding, not the kernels'), ignored rows +0;
 *   both      against f64 from the same values: lse and the loss within 1e-5, dx within
 *             1e-5 of the largest |dx| (rows with non-finite logits: bitwise only).
 * Widths under, at and over the block (5, 256, 1000, 3000), ignored rows, a row of -inf, a
 * row holding +inf or NaN, every target ignored (NaN loss), a target out of range, grids
 * smaller than the rows. */
#define RMK_EMU 1
#include "emu.h"
#include "emu_check.h"
/* a kernel's static __shared__ arrays: one for the block (blocks run one after another) */
#undef __shared__
#define __shared__ static

#include "backends/cuda/cross_entropy.cu"

#include <vector>

namespace {

int failures = 0;

emu_check::rng gen = {0xD1B54A32D192ED03ull};
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

unsigned capped(int64_t n, unsigned cap) { return (unsigned)(n < (int64_t)cap ? n : cap); }

/* forward and backward of one storage type X: lse, loss, bad, dx */
template <typename X>
void run_x(const std::vector<X> &x, const std::vector<int64_t> &t, int64_t ignore, int64_t N,
           int64_t C, float g, unsigned cap, std::vector<float> &lse, float &loss, int64_t &bad,
           std::vector<X> &dx) {
    lse.assign((size_t)N, NAN);
    rmk_emu::launch(capped(N, cap), RMK_CE_THREADS,
                    [&] { row_lse<float, X>(x.data(), N, C, lse.data()); });
    rmk_emu::launch(1, 1024, [&] {
        ce_loss<float, X>(x.data(), t.data(), ignore, lse.data(), N, C, &loss, &bad);
    });
    int64_t count = -1;
    rmk_emu::launch(1, 1024, [&] { ce_count(t.data(), N, ignore, &count); });
    rmk_emu::launch(capped(N, cap), RMK_CE_THREADS, [&] {
        ce_bwd_rows<float, X>(x.data(), t.data(), ignore, lse.data(), &g, &count, dx.data(), N, C);
    });
}

struct kase {
    int64_t N, C;
    int every;     /* every-th row ignored (0: none, 1: all) */
    int odd;       /* 1: row 1 +inf, row 2 all -inf; 2: row 1 NaN */
    int64_t bad;   /* a row whose target is out of range (-1: none) */
    unsigned cap;
};

void run(const kase &k) {
    const int64_t N = k.N, C = k.C, n = N * C, ignore = -100;
    char name[120];
    snprintf(name, sizeof name, "N=%lld C=%lld ignored=1/%d odd=%d bad=%lld grid<=%u",
             (long long)N, (long long)C, k.every, k.odd, (long long)k.bad, k.cap);
    std::vector<rmk_bf16> xh((size_t)n), dxh((size_t)n);
    std::vector<float> x32((size_t)n), dx32((size_t)n, NAN);
    for (int64_t i = 0; i < n; i++) {
        xh[(size_t)i].bits = bf16_rne((float)uniform(-6, 6));
        dxh[(size_t)i].bits = 0x7FC1;
    }
    if (k.odd == 1 && N > 2) {
        xh[(size_t)(1 * C + C / 2)].bits = 0x7F80; /* +inf */
        for (int64_t c = 0; c < C; c++) xh[(size_t)(2 * C + c)].bits = 0xFF80; /* -inf row */
    } else if (k.odd == 2 && N > 1) {
        xh[(size_t)(1 * C)].bits = 0x7FC0;
    }
    for (int64_t i = 0; i < n; i++) x32[(size_t)i] = bf16_val(xh[(size_t)i].bits);
    std::vector<int64_t> t((size_t)N);
    for (int64_t r = 0; r < N; r++)
        t[(size_t)r] = k.every && r % k.every == 0 ? ignore : (r * 7 + 3) % C;
    if (k.bad >= 0) t[(size_t)k.bad] = C;
    std::vector<float> lse32, lseh;
    float loss32 = NAN, lossh = NAN;
    int64_t bad32 = -1, badh = -1;
    const float g = 0.75f;
    run_x<float>(x32, t, ignore, N, C, g, k.cap, lse32, loss32, bad32, dx32);
    run_x<rmk_bf16>(xh, t, ignore, N, C, g, k.cap, lseh, lossh, badh, dxh);
    bool ok = same_bits(loss32, lossh) && bad32 == badh;
    for (int64_t r = 0; r < N && ok; r++) ok = same_bits(lse32[(size_t)r], lseh[(size_t)r]);
    expect(ok, "lse / loss / bad from bf16 logits differ from those of the logits widened", name);
    const int64_t want_bad = k.bad >= 0 ? k.bad : N;
    expect(bad32 == want_bad, "the first bad target", name);
    if (k.bad >= 0) {
        printf("  %s\n", name);
        return; /* the wrapper fails the call: no backward */
    }
    ok = true;
    for (int64_t i = 0; i < n && ok; i++) ok = dxh[(size_t)i].bits == bf16_rne(dx32[(size_t)i]);
    expect(ok, "bf16 dx is not the f32 dx rounded to nearest even", name);

    /* f64 reference (rows with a non-finite logit: bitwise checks only) */
    int64_t count = 0;
    for (int64_t r = 0; r < N; r++) count += t[(size_t)r] != ignore;
    const double scale = count ? (double)g / (double)count : 0.0;
    double sum = 0, mx_dx = 0, err_dx = 0, err_lse = 0, mx_lse = 0;
    for (int64_t r = 0; r < N; r++) {
        const float *xr = x32.data() + r * C;
        double m = -INFINITY;
        bool finite = true;
        for (int64_t c = 0; c < C; c++) {
            m = fmax(m, xr[c]);
            finite &= std::isfinite(xr[c]) != 0;
        }
        if (!finite) continue;
        double e = 0;
        for (int64_t c = 0; c < C; c++) e += exp(xr[c] - m);
        const double l = m + log(e);
        mx_lse = fmax(mx_lse, fabs(l));
        const double el = fabs(l - lse32[(size_t)r]);
        if (!(el <= err_lse)) err_lse = el;
        const bool kept = t[(size_t)r] != ignore;
        if (kept) sum += l - xr[t[(size_t)r]];
        for (int64_t c = 0; c < C && count; c++) {
            const double d =
                kept ? (exp(xr[c] - l) - (c == t[(size_t)r] ? 1.0 : 0.0)) * scale : 0.0;
            mx_dx = fmax(mx_dx, fabs(d));
            const double e = fabs(d - dx32[(size_t)(r * C + c)]);
            if (!(e <= err_dx)) err_dx = e; /* NaN counts */
        }
    }
    if (count == 0) expect(std::isnan(loss32), "no target left: the loss is not NaN", name);
    else if (k.odd == 0) {
        const double ref = sum / (double)count;
        expect(fabs(ref - loss32) <= 1e-5 * fmax(1.0, fabs(ref)), "loss against f64", name);
    }
    expect(err_lse <= 1e-5 * fmax(1.0, mx_lse), "lse against f64", name);
    expect(err_dx <= 1e-5 * fmax(mx_dx, 1e-30), "dx against f64", name);
    printf("  %s\n", name);
}

} // namespace

int main() {
    const int64_t widths[] = {5, 256, 1000, 3000};
    const unsigned caps[] = {1000, 3};
    int i = 0;
    for (int64_t C : widths)
        for (int every = 0; every < 3; every++)
            for (int odd = 0; odd < 3; odd++, i++)
                run({13, C, every == 2 ? 4 : every, odd, -1, caps[i % 2]});
    run({13, 300, 0, 0, 5, 2});  /* a target out of range (row 5, the first) */
    run({13, 300, 4, 0, 11, 1000});
    printf(failures ? "%d FAILED\n" : "all passed\n", failures);
    return failures ? 1 : 0;
}

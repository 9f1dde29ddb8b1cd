/* tests/cuda_emu/attention_emu.cc — the tensor-core attention kernels of
 * src/backends/cuda/attention_mma.cu run on the CPU (emu.h: every thread a fiber, mma.sync
 * and ldmatrix carried out as the PTX ISA defines them) against attention computed in f64
 * from the same bf16 inputs: forward (y, lse) and backward (dq, dk, dv), causal masks
 * top-left and lower-right with Tq < Tk and Tq > Tk, grouped-query heads, D != Dv, head
 * classes 32, 64 and 128, padded heads, per-head views of a packed qkv buffer (16-byte
 * loads) and odd head sizes (element loads), grids smaller than the work (the kernels'
 * grid-stride loops).
 *
 * Tolerance: the kernels round P and dS to bf16 as the products' operands and every
 * output once to bf16, so each result is compared against the largest magnitude of its
 * f64 counterpart: within 1e-2 of it (a bf16 ulp is 2^-8 relative; the rounding of P and
 * dS averages out over a row's keys), the lse within 1e-4 absolute.
 *
 *   sh tests/cuda_emu/run.sh        (no GPU needed: g++ or clang++ and the CUDA headers) */
#define RMK_EMU 1
#include "emu.h"

#include "backends/cuda/attention_mma.cu"

#include <vector>

namespace {

uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
double from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint64_t rng_state = 0x9E3779B97F4A7C15ull;
double uniform() { /* [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
}

/* An operand (B, heads, T, cols) at base + b·sb + h·sh + r·rs + c (columns contiguous). */
struct view {
    std::vector<uint16_t> *buf;
    int64_t off, sb, sh, rs;
    int64_t heads, T, cols;
    uint16_t *at(int64_t b, int64_t h, int64_t r, int64_t c) const {
        return buf->data() + off + b * sb + h * sh + r * rs + c;
    }
    rmk_att_operand op(int64_t hdiv) const {
        rmk_att_operand o;
        memset(&o, 0, sizeof o);
        o.bst[0] = sb;
        o.bst[1] = sh;
        o.rs = rs;
        o.cs = 1;
        o.hdiv = hdiv;
        return o;
    }
};

struct kase {
    const char *name;
    int64_t B, H, Hkv, Tq, Tk, D, Dv;
    bool causal, lower_right, packed;
    unsigned grid_cap; /* blocks at most (the rest through the grid-stride loop) */
};

int failures = 0;

void check(const char *what, const kase &c, const std::vector<double> &ref,
           const std::vector<double> &got, double rtol) {
    double mx = 0, err = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        mx = fmax(mx, fabs(ref[i]));
        const double e = fabs(ref[i] - got[i]);
        if (!(e <= err)) err = e; /* NaN counts */
    }
    const bool ok = err <= rtol * (mx > 0 ? mx : 1);
    printf("  %-4s %-40s max |err| %.3e of max %.3e (%.2e)%s\n", what, c.name, err, mx,
           mx > 0 ? err / mx : err, ok ? "" : "   FAIL");
    failures += !ok;
}

template <int HD> void run(const kase &c) {
    typedef tc_cfg<HD> C;
    const int64_t group = c.H / c.Hkv;
    /* buffers: packed qkv (B, T, 3, H, D) when asked (Tq == Tk, D == Dv, H == Hkv), else one
     * (B, heads, T, cols) buffer per operand */
    std::vector<uint16_t> bq, bk, bv, bg, by, bdq, bdk, bdv;
    view q, k, v;
    if (c.packed) {
        bq.resize((size_t)(c.B * c.Tq * 3 * c.H * c.D));
        const int64_t rs = 3 * c.H * c.D, sb = c.Tq * rs;
        q = {&bq, 0, sb, c.D, rs, c.H, c.Tq, c.D};
        k = {&bq, c.H * c.D, sb, c.D, rs, c.H, c.Tk, c.D};
        v = {&bq, 2 * c.H * c.D, sb, c.D, rs, c.H, c.Tk, c.Dv};
    } else {
        bq.resize((size_t)(c.B * c.H * c.Tq * c.D));
        bk.resize((size_t)(c.B * c.Hkv * c.Tk * c.D));
        bv.resize((size_t)(c.B * c.Hkv * c.Tk * c.Dv));
        q = {&bq, 0, c.H * c.Tq * c.D, c.Tq * c.D, c.D, c.H, c.Tq, c.D};
        k = {&bk, 0, c.Hkv * c.Tk * c.D, c.Tk * c.D, c.D, c.Hkv, c.Tk, c.D};
        v = {&bv, 0, c.Hkv * c.Tk * c.Dv, c.Tk * c.Dv, c.Dv, c.Hkv, c.Tk, c.Dv};
    }
    for (auto &x : bq) x = to_bf16((float)uniform());
    for (auto &x : bk) x = to_bf16((float)uniform());
    for (auto &x : bv) x = to_bf16((float)uniform());
    /* y and the gradients (B, T, H, cols) as the library stores attention's output */
    by.assign((size_t)(c.B * c.Tq * c.H * c.Dv), 0);
    bg.resize(by.size());
    for (auto &x : bg) x = to_bf16((float)uniform());
    view y = {&by, 0, c.Tq * c.H * c.Dv, c.Dv, c.H * c.Dv, c.H, c.Tq, c.Dv};
    view gy = {&bg, 0, c.Tq * c.H * c.Dv, c.Dv, c.H * c.Dv, c.H, c.Tq, c.Dv};
    bdq.assign((size_t)(c.B * c.H * c.Tq * c.D), 0x7FC0); /* NaN: every element written */
    bdk.assign((size_t)(c.B * c.Hkv * c.Tk * c.D), 0x7FC0);
    bdv.assign((size_t)(c.B * c.Hkv * c.Tk * c.Dv), 0x7FC0);
    view dq = {&bdq, 0, c.H * c.Tq * c.D, c.Tq * c.D, c.D, c.H, c.Tq, c.D};
    view dk = {&bdk, 0, c.Hkv * c.Tk * c.D, c.Tk * c.D, c.D, c.Hkv, c.Tk, c.D};
    view dv = {&bdv, 0, c.Hkv * c.Tk * c.Dv, c.Tk * c.Dv, c.Dv, c.Hkv, c.Tk, c.Dv};

    rmk_att_dims d;
    memset(&d, 0, sizeof d);
    d.nb = c.B * c.H;
    d.Tq = c.Tq;
    d.Tk = c.Tk;
    d.D = c.D;
    d.Dv = c.Dv;
    d.group = group;
    d.causal = c.causal;
    d.off = c.causal && c.lower_right ? c.Tk - c.Tq : 0;
    d.scale = 1.0 / sqrt((double)c.D);
    rmk_att_lead lead;
    memset(&lead, 0, sizeof lead);
    lead.nlead = 2;
    lead.shape[0] = c.B;
    lead.shape[1] = c.H;
    const rmk_att_operand oq = q.op(1), ok = k.op(group), ov = v.op(group), oy = y.op(1),
                          og = gy.op(1), odq = dq.op(1), odk = dk.op(group), odv = dv.op(group);
    std::vector<float> lse((size_t)(d.nb * d.Tq)), delta((size_t)(d.nb * d.Tq));
    const tc_ops fv = {(tc_vec(q.at(0, 0, 0, 0), oq, lead, c.D) ? 1u : 0u) |
                       (tc_vec(k.at(0, 0, 0, 0), ok, lead, c.D) ? 2u : 0u) |
                       (tc_vec(v.at(0, 0, 0, 0), ov, lead, c.Dv) ? 4u : 0u) |
                       (tc_vec(gy.at(0, 0, 0, 0), og, lead, c.Dv) ? 8u : 0u)};
    if (C::SM_FWD > sizeof smem_raw || C::SM_DQ > sizeof smem_raw || C::SM_DKDV > sizeof smem_raw)
        abort();
    auto cap = [&](int64_t n) { return (unsigned)(n < (int64_t)c.grid_cap ? n : c.grid_cap); };
    const int64_t nqb = (c.Tq + C::BR - 1) / C::BR, nkb = (c.Tk + C::BR - 1) / C::BR;
    rmk_emu::launch(cap(d.nb * nqb), C::NT, [&] {
        tc_att_fwd<HD>(d, lead, oq, q.at(0, 0, 0, 0), ok, k.at(0, 0, 0, 0), ov, v.at(0, 0, 0, 0),
                       oy, y.at(0, 0, 0, 0), lse.data(), fv);
    });
    rmk_emu::launch(cap(d.nb * nqb), C::NT, [&] {
        tc_att_bwd_dq<HD>(d, lead, oq, q.at(0, 0, 0, 0), ok, k.at(0, 0, 0, 0), ov, v.at(0, 0, 0, 0),
                          oy, y.at(0, 0, 0, 0), og, gy.at(0, 0, 0, 0), odq, dq.at(0, 0, 0, 0),
                          lse.data(), delta.data(), fv);
    });
    rmk_emu::launch(cap(d.nb / group * nkb), C::NT, [&] {
        tc_att_bwd_dkdv<HD>(d, lead, oq, q.at(0, 0, 0, 0), ok, k.at(0, 0, 0, 0), ov,
                            v.at(0, 0, 0, 0), og, gy.at(0, 0, 0, 0), odk, dk.at(0, 0, 0, 0), odv,
                            dv.at(0, 0, 0, 0), lse.data(), delta.data(), fv);
    });

    /* f64 reference from the same bf16 values */
    std::vector<double> ry, rl, rdq, rdk((size_t)(c.B * c.Hkv * c.Tk * c.D), 0.0),
        rdv((size_t)(c.B * c.Hkv * c.Tk * c.Dv), 0.0), gyv, gl, gdq, gdk, gdv;
    std::vector<double> P((size_t)(c.Tq * c.Tk)), dS((size_t)(c.Tq * c.Tk));
    for (int64_t b = 0; b < c.B; b++)
        for (int64_t h = 0; h < c.H; h++) {
            const int64_t hk = h / group;
            for (int64_t i = 0; i < c.Tq; i++) {
                double m = -INFINITY;
                for (int64_t j = 0; j < c.Tk; j++) {
                    double s = -INFINITY;
                    if (!c.causal || j <= i + d.off) {
                        s = 0;
                        for (int64_t e = 0; e < c.D; e++)
                            s += from_bf16(*q.at(b, h, i, e)) * from_bf16(*k.at(b, hk, j, e));
                        s *= d.scale;
                    }
                    P[i * c.Tk + j] = s;
                    m = fmax(m, s);
                }
                double l = 0;
                for (int64_t j = 0; j < c.Tk; j++) {
                    const double p = m == -INFINITY ? 0 : exp(P[i * c.Tk + j] - m);
                    P[i * c.Tk + j] = p;
                    l += p;
                }
                for (int64_t j = 0; j < c.Tk; j++)
                    P[i * c.Tk + j] = l > 0 ? P[i * c.Tk + j] / l : 0;
                rl.push_back(l > 0 ? m + log(l) : -INFINITY);
                gl.push_back(lse[(size_t)((b * c.H + h) * c.Tq + i)]);
                double dl = 0;
                std::vector<double> yi((size_t)c.Dv, 0.0);
                for (int64_t e = 0; e < c.Dv; e++) {
                    for (int64_t j = 0; j < c.Tk; j++)
                        yi[(size_t)e] += P[i * c.Tk + j] * from_bf16(*v.at(b, hk, j, e));
                    ry.push_back(yi[(size_t)e]);
                    gyv.push_back(from_bf16(*y.at(b, h, i, e)));
                    dl += yi[(size_t)e] * from_bf16(*gy.at(b, h, i, e));
                }
                for (int64_t j = 0; j < c.Tk; j++) {
                    double dp = 0;
                    for (int64_t e = 0; e < c.Dv; e++)
                        dp += from_bf16(*gy.at(b, h, i, e)) * from_bf16(*v.at(b, hk, j, e));
                    dS[i * c.Tk + j] = P[i * c.Tk + j] * (dp - dl) * d.scale;
                }
            }
            for (int64_t i = 0; i < c.Tq; i++)
                for (int64_t e = 0; e < c.D; e++) {
                    double s = 0;
                    for (int64_t j = 0; j < c.Tk; j++)
                        s += dS[i * c.Tk + j] * from_bf16(*k.at(b, hk, j, e));
                    rdq.push_back(s);
                    gdq.push_back(from_bf16(*dq.at(b, h, i, e)));
                }
            for (int64_t j = 0; j < c.Tk; j++) {
                for (int64_t e = 0; e < c.D; e++) {
                    double s = 0;
                    for (int64_t i = 0; i < c.Tq; i++)
                        s += dS[i * c.Tk + j] * from_bf16(*q.at(b, h, i, e));
                    rdk[(size_t)(((b * c.Hkv + hk) * c.Tk + j) * c.D + e)] += s;
                }
                for (int64_t e = 0; e < c.Dv; e++) {
                    double s = 0;
                    for (int64_t i = 0; i < c.Tq; i++)
                        s += P[i * c.Tk + j] * from_bf16(*gy.at(b, h, i, e));
                    rdv[(size_t)(((b * c.Hkv + hk) * c.Tk + j) * c.Dv + e)] += s;
                }
            }
        }
    for (auto x : bdk) gdk.push_back(from_bf16(x));
    for (auto x : bdv) gdv.push_back(from_bf16(x));
    printf("%s (head class %d, loads %s)\n", c.name, HD, (fv.vec & 1) ? "16-byte" : "by element");
    /* rows without keys: lse -inf on both sides (compared as equal) */
    for (size_t i = 0; i < rl.size(); i++)
        if (rl[i] == -INFINITY && gl[i] == -INFINITY) rl[i] = gl[i] = 0;
    check("y", c, ry, gyv, 1e-2);
    check("lse", c, rl, gl, 1e-4); /* relative to the largest |lse| */
    check("dq", c, rdq, gdq, 1e-2);
    check("dk", c, rdk, gdk, 1e-2);
    check("dv", c, rdv, gdv, 1e-2);
}

void run_case(const kase &c) {
    const int64_t m = c.D > c.Dv ? c.D : c.Dv;
    if (m <= 32) run<32>(c);
    else if (m <= 64) run<64>(c);
    else run<128>(c);
}

} // namespace

int main() {
    const kase cases[] = {
        {"GPT-2 heads from a packed qkv, causal", 1, 2, 2, 130, 130, 64, 64, true, false, true, 3},
        {"lower-right causal, Tq < Tk", 1, 2, 2, 40, 150, 128, 128, true, true, false, 2},
        {"lower-right causal, Tq > Tk (rows without keys)", 1, 2, 2, 150, 70, 20, 20, true, true,
         false, 4},
        {"grouped-query, padded head, no mask", 1, 4, 2, 100, 100, 48, 48, false, false, false, 5},
        {"two batch entries, head 32, causal", 2, 1, 1, 64, 64, 32, 32, true, false, false, 1},
        {"D 64, Dv 40, no mask", 1, 1, 1, 70, 90, 64, 40, false, false, false, 7},
    };
    for (const kase &c : cases) run_case(c);
    printf(failures ? "%d FAILED\n" : "all passed\n", failures);
    return failures ? 1 : 0;
}

/* tests/cuda_emu/attention_emu.cc — the tensor-core attention kernels of
 * src/backends/cuda/attention_mma.cu run on the CPU (emu.h: every thread a fiber, mma.sync
 * and ldmatrix carried out as the PTX ISA defines them) against attention computed in f64
 * from the same bf16 inputs: forward (y, lse) and backward (dq, dk, dv), causal masks
 * top-left and lower-right with Tq < Tk and Tq > Tk, grouped-query heads, D != Dv, head
 * classes 32, 64 and 128, padded heads, per-head views of a packed qkv buffer (16-byte
 * loads) and odd head sizes (element loads), grids smaller than the work (the kernels'
 * grid-stride loops). Built with RMK_TC_BWD_FUSED=1 (test_cuda_emu_attention_variants) it
 * runs the fused backward three ways — blocks one after another, then several at once in
 * drawn orders and speeds — and checks the bits are the same each time; built with
 * RMK_TC_FWD_MT=2 (test_cuda_emu_attention_fwdmt, _fwdmt8) it runs the forward with 2
 * m-tiles a warp. Built with RMK_TC_LEAN=1 (test_cuda_emu_attention_lean, _lean_fused) it
 * runs the lean backward, whose mask is only applied in the tiles it cuts: the causal
 * cases' diagonal tiles and the ends of T not a tile multiple are where a wrong bound shows.
 *
 * Tolerance, against the largest magnitude of each result's f64 counterpart: bf16 within
 * 1e-2 (the kernels round P and dS to bf16 as the products' operands and every output once
 * to bf16; a bf16 ulp is 2^-8 relative), f32 within 2e-5 (3xTF32 products, f32 sums:
 * f32 arithmetic's error over sums of up to 150 terms); the lse within 1e-4 (bf16) and
 * 1e-5 (f32) of the largest |lse|.
 *
 *   CMake builds it as test_cuda_emu_attention (no GPU needed: g++ or clang++ and the CUDA
 *   headers; tests/cuda_emu/README.md). */
#define RMK_EMU 1
#include "emu.h"
#include "emu_check.h"

#include "backends/cuda/attention_mma.cu"

#include <vector>

namespace {

/* The element types' values: encoded from a double, decoded to one; NaN; tolerances. */
template <typename E> struct elem_of;
template <> struct elem_of<bf16_t> {
    static bf16_t enc(double x) {
        const float f = (float)x;
        uint32_t u;
        memcpy(&u, &f, 4);
        return (bf16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    }
    static double dec(bf16_t h) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    static constexpr bf16_t nan = 0x7FC0;
    static constexpr double rtol = 1e-2, lse_rtol = 1e-4;
    static constexpr const char *name = "bf16";
};
template <> struct elem_of<float> {
    static float enc(double x) { return (float)x; }
    static double dec(float x) { return x; }
    static constexpr float nan = NAN;
    static constexpr double rtol = 2e-5, lse_rtol = 1e-5;
    static constexpr const char *name = "f32";
};

emu_check::rng gen = {0x9E3779B97F4A7C15ull};
double uniform() { return gen.uniform(-1, 1); } /* [-1, 1) */

/* An operand (B, heads, T, cols) at base + b·sb + h·sh + r·rs + c (columns contiguous). */
template <typename E> struct view {
    std::vector<E> *buf;
    int64_t off, sb, sh, rs;
    int64_t heads, T, cols;
    E *at(int64_t b, int64_t h, int64_t r, int64_t c) const {
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
    double scale;      /* 0: 1 / sqrt(D) */
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

template <typename TR, int HD> void run(const kase &c) {
    typedef tc_cfg<TR, HD> C;
    typedef typename TR::elem E;
    typedef elem_of<E> V;
    typedef view<E> view;
    const int64_t group = c.H / c.Hkv;
    /* buffers: packed qkv (B, T, 3, H, D) when asked (Tq == Tk, D == Dv, H == Hkv), else one
     * (B, heads, T, cols) buffer per operand */
    std::vector<E> bq, bk, bv, bg, by, bdq, bdk, bdv;
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
    for (auto &x : bq) x = V::enc(uniform());
    for (auto &x : bk) x = V::enc(uniform());
    for (auto &x : bv) x = V::enc(uniform());
    /* y and the gradients (B, T, H, cols) as the library stores attention's output */
    by.assign((size_t)(c.B * c.Tq * c.H * c.Dv), V::nan);
    bg.resize(by.size());
    for (auto &x : bg) x = V::enc(uniform());
    view y = {&by, 0, c.Tq * c.H * c.Dv, c.Dv, c.H * c.Dv, c.H, c.Tq, c.Dv};
    view gy = {&bg, 0, c.Tq * c.H * c.Dv, c.Dv, c.H * c.Dv, c.H, c.Tq, c.Dv};
    /* NaN: every element written. Packed q, k, v get their gradients as the same pieces of
     * one buffer, as the library makes them (src/ops/grad_layout.c): row stride 3·H·D */
    view dq, dk, dv;
    if (c.packed) {
        bdq.assign(bq.size(), V::nan);
        dq = q, dk = k, dv = v;
        dq.buf = dk.buf = dv.buf = &bdq;
    } else {
        bdq.assign((size_t)(c.B * c.H * c.Tq * c.D), V::nan);
        bdk.assign((size_t)(c.B * c.Hkv * c.Tk * c.D), V::nan);
        bdv.assign((size_t)(c.B * c.Hkv * c.Tk * c.Dv), V::nan);
        dq = {&bdq, 0, c.H * c.Tq * c.D, c.Tq * c.D, c.D, c.H, c.Tq, c.D};
        dk = {&bdk, 0, c.Hkv * c.Tk * c.D, c.Tk * c.D, c.D, c.Hkv, c.Tk, c.D};
        dv = {&bdv, 0, c.Hkv * c.Tk * c.Dv, c.Tk * c.Dv, c.Dv, c.Hkv, c.Tk, c.Dv};
    }

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
    d.scale = c.scale != 0 ? c.scale : 1.0 / sqrt((double)c.D);
    rmk_att_lead lead;
    memset(&lead, 0, sizeof lead);
    lead.nlead = 2;
    lead.shape[0] = c.B;
    lead.shape[1] = c.H;
    const rmk_att_operand oq = q.op(1), ok = k.op(group), ov = v.op(group), oy = y.op(1),
                          og = gy.op(1), odq = dq.op(1), odk = dk.op(group), odv = dv.op(group);
    std::vector<float> lse((size_t)(d.nb * d.Tq)), delta((size_t)(d.nb * d.Tq));
    tc_params<E> p = {};
    p.d = d;
    p.lead = lead;
    p.oq = oq, p.ok = ok, p.ov = ov, p.oy = oy, p.og = og, p.odq = odq, p.odk = odk, p.odv = odv;
    p.q = q.at(0, 0, 0, 0), p.k = k.at(0, 0, 0, 0), p.v = v.at(0, 0, 0, 0);
    p.gy = gy.at(0, 0, 0, 0), p.y = y.at(0, 0, 0, 0);
    p.dq = dq.at(0, 0, 0, 0), p.dk = dk.at(0, 0, 0, 0), p.dv = dv.at(0, 0, 0, 0);
    p.lse = lse.data(), p.delta = delta.data();
    p.vec = tc_vec_bits(p);
    const size_t smax = rmk_emu::SMEM_BYTES;
    if (C::SM_FWD > smax || C::SM_DQ > smax || C::SM_DKDV > smax || C::SM_FUSED > smax) abort();
    auto cap = [&](int64_t n) { return (unsigned)(n < (int64_t)c.grid_cap ? n : c.grid_cap); };
    const int64_t nkb = (c.Tk + C::BR - 1) / C::BR;
    const int64_t nqf = (c.Tq + C::BRF - 1) / C::BRF;
    rmk_emu::launch(cap(d.nb * nqf), C::NTF, [&] { tc_att_fwd<TR, HD>(p); });
#if RMK_TC_BWD_FUSED
    /* the fused backward: scratch as rmk_attention_tc_bwd lays it out, its counters left
     * non-zero (the first kernel sets them); the kernels run three times, blocks one after
     * another and then several at once in two drawn orders (and a grid smaller than the
     * work): the same bits every time, the adds to dq's sums being ordered */
    const tc_ws_layout wl = tc_fused_ws(d, C::BCQ, HD);
    std::vector<unsigned char> ws(wl.bytes + 256, 0xFF);
    unsigned char *w0 = ws.data() + (256 - (uintptr_t)ws.data() % 256) % 256;
    p.delta = (float *)w0;
    p.dqa = (float *)(w0 + wl.dqa);
    p.cnt = (unsigned *)(w0 + wl.cnt);
    const int64_t nqq = (c.Tq + C::BCQ - 1) / C::BCQ, items = d.nb / group * nkb;
    auto backward = [&](unsigned resident, uint64_t seed, unsigned grid) {
        for (auto *bb : {&bdq, &bdk, &bdv})
            for (auto &x : *bb) x = V::nan;
        rmk_emu::launch(cap(nqq > 0 ? d.nb * nqq : 1), C::NT, [&] { tc_att_bwd_pre<TR, HD>(p); });
        rmk_emu::launch_resident(grid, C::NT, resident, seed, [&] { tc_att_bwd_fused<TR, HD>(p); });
    };
    std::vector<std::vector<E>> runs;
    const unsigned ways[3][3] = {{1, 0, (unsigned)items},
                                 {4, 7, (unsigned)items + 2},
                                 {3, 11, items > 3 ? (unsigned)items / 2 : 1u}};
    for (const auto &wy : ways) {
        backward(wy[0], wy[1], wy[2]);
        std::vector<E> all(bdq);
        all.insert(all.end(), bdk.begin(), bdk.end());
        all.insert(all.end(), bdv.begin(), bdv.end());
        runs.push_back(all);
    }
#else
    const int64_t nqb = (c.Tq + C::BR - 1) / C::BR;
    rmk_emu::launch(cap(d.nb * nqb), C::NT, [&] { tc_att_bwd_dq<TR, HD>(p); });
    rmk_emu::launch(cap(d.nb / group * nkb), C::NT, [&] { tc_att_bwd_dkdv<TR, HD>(p); });
#endif

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
                            s += V::dec(*q.at(b, h, i, e)) * V::dec(*k.at(b, hk, j, e));
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
                        yi[(size_t)e] += P[i * c.Tk + j] * V::dec(*v.at(b, hk, j, e));
                    ry.push_back(yi[(size_t)e]);
                    gyv.push_back(V::dec(*y.at(b, h, i, e)));
                    dl += yi[(size_t)e] * V::dec(*gy.at(b, h, i, e));
                }
                for (int64_t j = 0; j < c.Tk; j++) {
                    double dp = 0;
                    for (int64_t e = 0; e < c.Dv; e++)
                        dp += V::dec(*gy.at(b, h, i, e)) * V::dec(*v.at(b, hk, j, e));
                    dS[i * c.Tk + j] = P[i * c.Tk + j] * (dp - dl) * d.scale;
                }
            }
            for (int64_t i = 0; i < c.Tq; i++)
                for (int64_t e = 0; e < c.D; e++) {
                    double s = 0;
                    for (int64_t j = 0; j < c.Tk; j++)
                        s += dS[i * c.Tk + j] * V::dec(*k.at(b, hk, j, e));
                    rdq.push_back(s);
                    gdq.push_back(V::dec(*dq.at(b, h, i, e)));
                }
            for (int64_t j = 0; j < c.Tk; j++) {
                for (int64_t e = 0; e < c.D; e++) {
                    double s = 0;
                    for (int64_t i = 0; i < c.Tq; i++)
                        s += dS[i * c.Tk + j] * V::dec(*q.at(b, h, i, e));
                    rdk[(size_t)(((b * c.Hkv + hk) * c.Tk + j) * c.D + e)] += s;
                }
                for (int64_t e = 0; e < c.Dv; e++) {
                    double s = 0;
                    for (int64_t i = 0; i < c.Tq; i++)
                        s += P[i * c.Tk + j] * V::dec(*gy.at(b, h, i, e));
                    rdv[(size_t)(((b * c.Hkv + hk) * c.Tk + j) * c.Dv + e)] += s;
                }
            }
        }
    for (int64_t b = 0; b < c.B; b++) /* in rdk's and rdv's order, through the views */
        for (int64_t h = 0; h < c.Hkv; h++)
            for (int64_t j = 0; j < c.Tk; j++) {
                for (int64_t e = 0; e < c.D; e++) gdk.push_back(V::dec(*dk.at(b, h, j, e)));
                for (int64_t e = 0; e < c.Dv; e++) gdv.push_back(V::dec(*dv.at(b, h, j, e)));
            }
    printf("%s, %s (head class %d, loads %s)\n", c.name, V::name, HD,
           (p.vec & 1) ? "16-byte" : "by element");
    /* rows without keys: lse -inf on both sides (compared as equal) */
    for (size_t i = 0; i < rl.size(); i++)
        if (rl[i] == -INFINITY && gl[i] == -INFINITY) rl[i] = gl[i] = 0;
    check("y", c, ry, gyv, V::rtol);
    check("lse", c, rl, gl, V::lse_rtol);
    check("dq", c, rdq, gdq, V::rtol);
    check("dk", c, rdk, gdk, V::rtol);
    check("dv", c, rdv, gdv, V::rtol);
#if RMK_TC_BWD_FUSED
    for (size_t r = 1; r < runs.size(); r++) {
        const bool same = memcmp(runs[r].data(), runs[0].data(), runs[0].size() * sizeof(E)) == 0;
        printf("  bits %-40s run %zu (%u blocks at once, order %u) %s\n", c.name, r, ways[r][0],
               ways[r][1], same ? "the same as run 0" : "DIFFER   FAIL");
        failures += !same;
    }
#endif
}

template <typename TR> void run_case(const kase &c) {
    const int64_t m = c.D > c.Dv ? c.D : c.Dv;
    if (m <= 32) run<TR, 32>(c);
    else if (m <= 64) run<TR, 64>(c);
    else run<TR, 128>(c);
}

} // namespace

int main() {
    printf("variant: RMK_TC_FWD_WARPS %d, RMK_TC_FWD_MT %d, RMK_TC_FWD_QREG %d, "
           "RMK_TC_FWD_LEAN %d, RMK_TC_BWD_FUSED %d, RMK_TC_LEAN %d\n",
           RMK_TC_FWD_WARPS, RMK_TC_FWD_MT, RMK_TC_FWD_QREG, RMK_TC_FWD_LEAN, RMK_TC_BWD_FUSED,
           RMK_TC_LEAN);
    const kase cases[] = {
        {"GPT-2 heads from a packed qkv, causal", 1, 2, 2, 130, 130, 64, 64, true, false, true, 3,
         0},
        {"lower-right causal, Tq < Tk", 1, 2, 2, 40, 150, 128, 128, true, true, false, 2, 0},
        {"lower-right causal, Tq > Tk (rows without keys)", 1, 2, 2, 150, 70, 20, 20, true, true,
         false, 4, 0},
        {"grouped-query, padded head, no mask", 1, 4, 2, 100, 100, 48, 48, false, false, false, 5,
         0},
        /* off 16: with 2 m-tiles a warp (RMK_TC_FWD_MT), warp 1's first m-tile (rows 32-47)
         * sees a part of key tile 0 and none of key tile 1, its second (48-63) all of key
         * tile 0 and a part of key tile 1 */
        {"lower-right causal, Tq < Tk, head 64", 1, 2, 2, 100, 116, 64, 64, true, true, false, 2,
         0},
        {"two batch entries, head 32, causal", 2, 1, 1, 64, 64, 32, 32, true, false, false, 1, 0},
        /* a negative scale, large enough that without Q negated (RMK_TC_FWD_LEAN) the rows'
         * max would be their min and exp2 overflow */
        {"D 64, Dv 40, no mask, scale -8", 1, 1, 1, 70, 90, 64, 40, false, false, false, 7, -8},
        {"head 128, no mask, T not a tile multiple", 1, 2, 2, 90, 100, 128, 128, false, false,
         false, 3, 0},
        {"five key tiles, head 32, causal", 1, 1, 1, 260, 260, 32, 32, true, false, false, 6, 0},
    };
    for (const kase &c : cases) {
        run_case<tr_bf16>(c);
        run_case<tr_f32>(c);
    }
    printf(failures ? "%d FAILED\n" : "all passed\n", failures);
    return failures ? 1 : 0;
}

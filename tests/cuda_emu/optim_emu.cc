/* tests/cuda_emu/optim_emu.cc — the AdamW and SGD kernels of src/backends/cuda/optim.cu run on
 * the CPU (emu.h) with a gradient scale (RM_KF_GRAD_SCALE: the optimizer's mean over
 * micro-batches times its clip factor, read with the gradient):
 *
 *   - an update with grad_scale s is, bit for bit, the update without one on the gradient
 *     the elementwise SCALE pass leaves (g · s rounded in g's type, s rounded to it first:
 *     elementwise.cu's `a * p`), f32 and f64, three steps (m, v and the momentum buffer
 *     carried), AdamW with and without decay, SGD plain, with momentum + dampening, with
 *     nesterov + decay;
 *   - both are the cpu's loops (src/core/optim_loops.h: the same operations in the same
 *     order, transcribed here), bitwise;
 *   - without a scale (0 or 1) g is read as it is: a subnormal gradient keeps its bits.
 * Grids smaller than the work (the grid-stride loop). */
#define RMK_EMU 1
#include "emu.h"
#include "emu_check.h"

#include "backends/cuda/optim.cu"

#include <vector>

namespace {

int failures = 0;

emu_check::rng gen = {0x9E3779B97F4A7C15ull};
double uniform(double lo, double hi) { return gen.uniform(lo, hi); }

template <typename T> bool same(const std::vector<T> &a, const std::vector<T> &b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}
void expect(bool ok, const char *what) {
    printf("  %-70s%s\n", what, ok ? "" : "   FAIL");
    failures += !ok;
}

const int64_t kN = 1037; /* not a multiple of the block */
const unsigned kCap = 3; /* blocks: the grid-stride loop covers the rest */

/* the AdamW kernel of T on p, g, m, v */
void adamw_kernel(std::vector<float> &p, const std::vector<float> &g, std::vector<float> &m,
                  std::vector<float> &v, const rm_adamw_factors &f) {
    rmk_emu::launch(kCap, RMK_THREADS, [&] {
        adamw_f32(p.data(), g.data(), m.data(), v.data(), (int64_t)p.size(), f);
    });
}
void adamw_kernel(std::vector<double> &p, const std::vector<double> &g, std::vector<double> &m,
                  std::vector<double> &v, const rm_adamw_factors &f) {
    rmk_emu::launch(kCap, RMK_THREADS, [&] {
        adamw_f64(p.data(), g.data(), m.data(), v.data(), (int64_t)p.size(), f);
    });
}

/* the cpu's AdamW loops (optim_loops.h), operation for operation */
void adamw_cpu(std::vector<float> &p, const std::vector<float> &g, std::vector<float> &m,
               std::vector<float> &v, const rm_adamw_factors &f) {
    for (size_t i = 0; i < p.size(); i++) {
        float gi = g[i] * f.gscalef;
        float mi = f.b1f * m[i] + f.one_m_b1f * gi;
        float vi = f.b2f * v[i] + f.one_m_b2f * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) * f.inv_sqrt_bc2f + f.epsf;
        p[i] = p[i] * f.decayf - f.stepf * mi / denom;
    }
}
void adamw_cpu(std::vector<double> &p, const std::vector<double> &g, std::vector<double> &m,
               std::vector<double> &v, const rm_adamw_factors &f) {
    for (size_t i = 0; i < p.size(); i++) {
        double gi = g[i] * f.gscale;
        double mi = f.b1 * m[i] + (1.0 - f.b1) * gi;
        double vi = f.b2 * v[i] + (1.0 - f.b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * f.decay - f.step_size * mi / (sqrt(vi) / f.sqrt_bc2 + f.eps);
    }
}

template <typename T> void sgd_kernel_run(std::vector<T> &p, const std::vector<T> &g,
                                          std::vector<T> &buf, const rm_sgd_kparams &h) {
    const double gs = h.grad_scale != 0 ? h.grad_scale : 1.0;
    rmk_emu::launch(kCap, RMK_THREADS, [&] {
        sgd_kernel<T>(p.data(), g.data(), h.momentum != 0 ? buf.data() : nullptr,
                      (int64_t)p.size(), (T)h.lr, (T)h.momentum, (T)h.weight_decay,
                      (T)(1.0 - h.dampening), (T)gs, gs != 1.0, h.weight_decay != 0,
                      h.momentum != 0, h.first, h.nesterov);
    });
}

/* the cpu's SGD loop (optim_loops.h RM_SGD_LOOP) */
template <typename T> void sgd_cpu(std::vector<T> &p, const std::vector<T> &g, std::vector<T> &buf,
                                   const rm_sgd_kparams &h) {
    const T lr = (T)h.lr, mom = (T)h.momentum, wd = (T)h.weight_decay;
    const T damp = (T)(1.0 - h.dampening), gs = (T)(h.grad_scale != 0 ? h.grad_scale : 1.0);
    for (size_t i = 0; i < p.size(); i++) {
        T d = g[i] * gs;
        if (h.weight_decay != 0) d = d + wd * p[i];
        if (h.momentum != 0) {
            T b = h.first ? d : mom * buf[i] + damp * d;
            buf[i] = b;
            d = h.nesterov ? d + mom * b : b;
        }
        p[i] -= lr * d;
    }
}

/* the SCALE pass (elementwise.cu: y = a * (T)p) */
template <typename T> std::vector<T> scaled(const std::vector<T> &g, double s) {
    std::vector<T> out(g);
    for (auto &e : out) e = e * (T)s;
    return out;
}

/* the gradient scale of a clipped mean over 3 micro-batches: not a power of two, not an
 * f32 value */
const double kScale = (1.0 / 3.0) * 0.8123456789;

template <typename T> void adamw_case(double decay, const char *tname) {
    std::vector<T> p0((size_t)kN), g((size_t)kN);
    for (auto &e : p0) e = (T)uniform(-1, 1);
    std::vector<T> pk(p0), mk((size_t)kN, 0), vk((size_t)kN, 0); /* kernel, scale inside */
    std::vector<T> ps(p0), ms(mk), vs(vk);                        /* SCALE pass, then kernel */
    std::vector<T> pc(p0), mc(mk), vc(vk);                        /* cpu loop */
    for (int64_t step = 1; step <= 3; step++) {
        for (auto &e : g) e = (T)uniform(-3, 3);
        rm_adamw_kparams h = {1e-3, 0.9, 0.999, 1e-8, decay, step, kScale};
        rm_adamw_factors f, f1;
        rm_adamw_factors_make(&h, &f);
        adamw_kernel(pk, g, mk, vk, f);
        adamw_cpu(pc, g, mc, vc, f);
        h.grad_scale = 0;
        rm_adamw_factors_make(&h, &f1);
        adamw_kernel(ps, scaled(g, kScale), ms, vs, f1);
    }
    char what[120];
    snprintf(what, sizeof what, "adamw %s decay %g: scaled read = SCALE pass then update", tname,
             decay);
    expect(same(pk, ps) && same(mk, ms) && same(vk, vs), what);
    snprintf(what, sizeof what, "adamw %s decay %g: = the cpu loop", tname, decay);
    expect(same(pk, pc) && same(mk, mc) && same(vk, vc), what);
}

template <typename T> void sgd_case(double mom, double damp, double wd, bool nesterov,
                                    const char *tname) {
    std::vector<T> p0((size_t)kN), g((size_t)kN);
    for (auto &e : p0) e = (T)uniform(-1, 1);
    std::vector<T> pk(p0), bk((size_t)kN, 0), ps(p0), bs(bk), pc(p0), bc(bk);
    for (int step = 0; step < 3; step++) {
        for (auto &e : g) e = (T)uniform(-3, 3);
        rm_sgd_kparams h = {0.05, mom, damp, wd, nesterov, step == 0, kScale};
        sgd_kernel_run(pk, g, bk, h);
        sgd_cpu(pc, g, bc, h);
        h.grad_scale = 0;
        sgd_kernel_run(ps, scaled(g, kScale), bs, h);
    }
    char what[120];
    snprintf(what, sizeof what, "sgd %s mom %g damp %g wd %g%s: scaled = SCALE then update", tname,
             mom, damp, wd, nesterov ? " nesterov" : "");
    expect(same(pk, ps) && same(bk, bs), what);
    snprintf(what, sizeof what, "sgd %s mom %g damp %g wd %g%s: = the cpu loop", tname, mom, damp,
             wd, nesterov ? " nesterov" : "");
    expect(same(pk, pc) && same(bk, bc), what);
}

/* no scale: a subnormal gradient read as it is (SGD p -= lr * g) */
void unscaled_subnormal() {
    std::vector<float> p((size_t)kN, 0.0f), g((size_t)kN, 1e-40f), buf;
    const rm_sgd_kparams h = {1.0, 0, 0, 0, false, true, 0};
    sgd_kernel_run(p, g, buf, h);
    bool ok = true;
    for (float e : p) ok &= e == -1e-40f;
    expect(ok, "sgd f32 without a scale: a subnormal gradient read as it is");
}

} // namespace

int main() {
    adamw_case<float>(0.0, "f32");
    adamw_case<float>(0.01, "f32");
    adamw_case<double>(0.01, "f64");
    sgd_case<float>(0.0, 0.0, 0.0, false, "f32");
    sgd_case<float>(0.9, 0.1, 0.0, false, "f32");
    sgd_case<float>(0.9, 0.0, 1e-4, true, "f32");
    sgd_case<double>(0.9, 0.1, 1e-4, true, "f64");
    unscaled_subnormal();
    printf(failures ? "%d FAILED\n" : "all passed\n", failures);
    return failures ? 1 : 0;
}

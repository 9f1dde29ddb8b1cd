/* tests/cuda_emu/optim_emu.cc — the AdamW and SGD kernels of src/backends/cuda/optim.cu run on
 * the CPU (emu.h), per tensor with a gradient scale (RM_KF_GRAD_SCALE: the optimizer's mean
 * over micro-batches times its clip factor, read with the gradient):
 *
 *   - an update with grad_scale s is, bit for bit, the update without one on the gradient
 *     the elementwise SCALE pass leaves (g · s rounded in g's type, s rounded to it first:
 *     elementwise.cu's `a * p`), f32 and f64, three steps (m, v and the momentum buffer
 *     carried), AdamW with and without decay, SGD plain, with momentum + dampening, with
 *     nesterov + decay;
 *   - both are the cpu's loops (src/core/optim_loops.h: the same operations in the same
 *     order, transcribed here), bitwise;
 *   - without a scale (0 or 1) g is read as it is: a subnormal gradient keeps its bits.
 * Grids smaller than the work (the grid-stride loop).
 *
 * And the list kernels (RM_K_ADAMW_LIST, RM_K_SGD_LIST: optim.cu's list_run packing the
 * launches' tables, adamw_list / sgd_list), on 150 tensors of odd sizes (empty, 1, 3, 1000,
 * 4097, around and past a chunk) with two weight-decay groups, or six sets of scalars (steps,
 * rates, momentum begun or not) so that a launch also ends when its table of sets is full,
 * with and without a gradient scale, one block a chunk or 5 blocks striding over them: three
 * updates bitwise those of the per-tensor kernel and of the cpu loop, tensor by tensor, and
 * every element in exactly one launch entry, the launches as few as the tables allow.
 * Built twice: with the real chunks (65536 elements), and (test_cuda_emu_optim_chunks) with
 * chunks of 64 and entries of 192 elements, so that every tensor spans many chunks and the
 * larger ones several entries. Skipping the last element of a chunk fails 28 checks (29 with
 * small chunks), doing a chunk's boundary element twice 28 (29), dropping the entry that
 * overflows a launch 27 (42), the last tensor 43, a piece's offset within its tensor 29 (small
 * chunks only: no tensor here is past 2^30), a wrong set after a launch ends 14. */
#define RMK_EMU 1
#include "emu.h"
#include "emu_check.h"

#include "backends/cuda/optim.cu"

#include <string>
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
    rmk_emu::launch(kCap, RMK_THREADS, [&] {
        sgd_kernel<T>(p.data(), g.data(), h.momentum != 0 ? buf.data() : nullptr,
                      (int64_t)p.size(), sgd_make<T>(&h));
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

/* ---- the list kernels (ADAMW_LIST, SGD_LIST: optim.cu's list_run and its kernels) --------
 * kListN tensors of odd sizes (empty, 1, 3, around and past a chunk, past an entry in the
 * build with small chunks) in one list, more than a launch takes, updated three times by
 * the list launches and, tensor by tensor, by the per-tensor kernel and by the cpu loop:
 * every tensor bit for bit. A chunk or a tensor skipped leaves its elements as they were, one
 * done twice moves them twice: either is a difference. */
const int kListN = 150;
/* threads a list block: fewer where the build's chunks are small (the emulator's time) */
const unsigned kListThreads = RMK_LIST_CHUNK < 4 * RMK_THREADS ? 32 : RMK_THREADS;

std::vector<int64_t> list_sizes() {
    std::vector<int64_t> s = {1,     3,     1000, 4097,   0,  RMK_LIST_CHUNK, RMK_LIST_CHUNK + 1,
                              70001, 2,     7,    131073, 65535};
    for (int i = 0; (int)s.size() < kListN; i++) s.push_back(1 + (i * 37) % 301);
    return s;
}

/* What the emulated launches were given. */
struct launches {
    int count = 0, entries = 0, max_entries = 0;
    int64_t elems = 0;
};
template <typename S> void count(launches &L, const rmk_list_args<S> &a) {
    L.count++;
    L.entries += a.entries;
    L.max_entries = a.entries > L.max_entries ? a.entries : L.max_entries;
    for (int e = 0; e < a.entries; e++) L.elems += a.n[e];
}

/* The launches a list of these sizes takes with at most RMK_LIST_SETS scalar sets. */
int expected_launches(const std::vector<int64_t> &sizes) {
    int64_t entries = 0;
    for (int64_t n : sizes) entries += (n + RMK_LIST_ENTRY_MAX - 1) / RMK_LIST_ENTRY_MAX;
    return (int)((entries + RMK_LIST_MAX - 1) / RMK_LIST_MAX);
}

/* The launcher a list case hands adamw_list_run / sgd_list_run: counts each launch in L and
 * runs `kernel` on the emulator, on at most grid_cap blocks (0: one a chunk). */
template <typename S, typename K> auto counted_launcher(launches &L, unsigned grid_cap, K kernel) {
    return [&L, grid_cap, kernel](const rmk_list_args<S> &a, unsigned grid) {
        count(L, a);
        rmk_emu::launch(grid_cap && grid > grid_cap ? grid_cap : grid, kListThreads,
                        [&] { kernel(a); });
        return cudaSuccess;
    };
}

/* After 3 updates of a list of these sizes: every element went in one entry, no launch took
 * more than RMK_LIST_MAX, and there were as few launches as the table allows (more with
 * more than RMK_LIST_SETS scalar sets, whose fifth set ends a launch). */
void expect_launches(const launches &L, const std::vector<int64_t> &sizes, int sets) {
    int64_t total = 0;
    for (int64_t n : sizes) total += n;
    char what[96];
    snprintf(what, sizeof what, "  every element in one entry, %d launches (%d entries)", L.count,
             L.entries);
    expect(L.elems == 3 * total && L.max_entries <= RMK_LIST_MAX &&
               (sets > RMK_LIST_SETS ? L.count > 3 * expected_launches(sizes)
                                     : L.count == 3 * expected_launches(sizes)),
           what);
}

template <typename T> std::vector<std::vector<T>> filled(const std::vector<int64_t> &sizes,
                                                          double lo, double hi) {
    std::vector<std::vector<T>> x(sizes.size());
    for (size_t i = 0; i < sizes.size(); i++) {
        x[i].resize((size_t)sizes[i]);
        for (auto &e : x[i]) e = (T)uniform(lo, hi);
    }
    return x;
}
template <typename T> std::vector<std::vector<T>> zeros(const std::vector<int64_t> &sizes) {
    std::vector<std::vector<T>> x(sizes.size());
    for (size_t i = 0; i < sizes.size(); i++) x[i].assign((size_t)sizes[i], (T)0);
    return x;
}
template <typename T> bool all_same(const std::vector<std::vector<T>> &a,
                                    const std::vector<std::vector<T>> &b) {
    for (size_t i = 0; i < a.size(); i++)
        if (!same(a[i], b[i])) return false;
    return true;
}
std::string blocks_text(unsigned grid_cap) {
    return grid_cap ? std::to_string(grid_cap) + " blocks" : std::string("a block a chunk");
}
template <typename T> T *data_or_null(std::vector<T> &x) { return x.empty() ? nullptr : x.data(); }

/* The list's tensors (s1 NULL for SGD, s0 NULL without momentum). */
template <typename T>
std::vector<rmk_optim_tensor> list_of(std::vector<std::vector<T>> &p, std::vector<std::vector<T>> &g,
                                      std::vector<std::vector<T>> *s0,
                                      std::vector<std::vector<T>> *s1) {
    std::vector<rmk_optim_tensor> t(p.size());
    for (size_t i = 0; i < p.size(); i++)
        t[i] = {data_or_null(p[i]), data_or_null(g[i]), s0 ? data_or_null((*s0)[i]) : nullptr,
                s1 ? data_or_null((*s1)[i]) : nullptr, (int64_t)p[i].size()};
    return t;
}

/* sets: 2 (two weight-decay groups: a launch ends only when full of entries) or 6 (the
 * tensors also 0, 1 or 2 steps ahead: a launch also ends when a fifth set comes); grid_cap:
 * blocks at most, fewer than the chunks: a block strides over several (0: one a chunk). */
template <typename T> void adamw_list_case(const char *tname, bool scale, int sets,
                                           unsigned grid_cap) {
    const std::vector<int64_t> sizes = list_sizes();
    const size_t N = sizes.size();
    auto p0 = filled<T>(sizes, -1, 1);
    auto pl = p0, pk = p0, pc = p0;
    auto ml = zeros<T>(sizes), vl = ml, mk = ml, vk = ml, mc = ml, vc = ml;
    launches L;
    for (int64_t step = 1; step <= 3; step++) {
        auto g = filled<T>(sizes, -3, 3);
        std::vector<rm_adamw_kparams> h(N);
        std::vector<rm_adamw_factors> f(N);
        for (size_t i = 0; i < N; i++) {
            h[i] = {1e-3, 0.9, 0.999, 1e-8, i % 2 ? 0.1 : 0.0,
                    step + (sets > 2 ? (int64_t)(i % 3) : 0), scale ? kScale : 0.0};
            rm_adamw_factors_make(&h[i], &f[i]);
        }
        auto t = list_of<T>(pl, g, &ml, &vl);
        cudaError_t e = adamw_list_run<T>(
            t.data(), (int)N, h.data(), f.data(),
            counted_launcher<rm_adamw_factors>(
                L, grid_cap, [](const rmk_list_args<rm_adamw_factors> &a) { adamw_list<T>(a); }));
        if (e != cudaSuccess) failures++;
        for (size_t i = 0; i < N; i++) {
            adamw_kernel(pk[i], g[i], mk[i], vk[i], f[i]);
            adamw_cpu(pc[i], g[i], mc[i], vc[i], f[i]);
        }
    }
    char what[160];
    snprintf(what, sizeof what, "adamw list %s%s, %d sets, %s: = the per-tensor kernel",
             tname, scale ? " scaled" : "", sets, blocks_text(grid_cap).c_str());
    expect(all_same(pl, pk) && all_same(ml, mk) && all_same(vl, vk), what);
    snprintf(what, sizeof what, "adamw list %s%s, %d sets, %s: = the cpu loop", tname,
             scale ? " scaled" : "", sets, blocks_text(grid_cap).c_str());
    expect(all_same(pl, pc) && all_same(ml, mc) && all_same(vl, vc), what);
    expect_launches(L, sizes, sets);
}

/* SGD: plain, momentum with dampening, nesterov with decay; sets as adamw_list_case's (6:
 * three rates, as three groups would have, by every other tensor's momentum buffer already
 * begun, `first` differing in the first update, and two decays). */
template <typename T> void sgd_list_case(const char *tname, double mom, double damp, double wd,
                                         bool nesterov, bool scale, int sets, unsigned grid_cap) {
    const std::vector<int64_t> sizes = list_sizes();
    const size_t N = sizes.size();
    auto p0 = filled<T>(sizes, -1, 1);
    auto pl = p0, pk = p0, pc = p0;
    auto bl = zeros<T>(sizes), bk = bl, bc = bl;
    launches L;
    for (int step = 0; step < 3; step++) {
        auto g = filled<T>(sizes, -3, 3);
        std::vector<rm_sgd_kparams> h(N);
        for (size_t i = 0; i < N; i++) {
            const bool ahead = sets > 2 && i % 2 == 0;
            const double lr = sets > 2 ? 0.05 - 0.01 * (double)(i % 3) : 0.05;
            h[i] = {lr, mom, damp, i % 2 ? wd : 0.0, nesterov, step == 0 && !ahead,
                    scale ? kScale : 0.0};
        }
        auto t = list_of<T>(pl, g, mom != 0 ? &bl : nullptr, nullptr);
        cudaError_t e = sgd_list_run<T>(
            t.data(), (int)N, h.data(),
            counted_launcher<sgd_consts<T>>(
                L, grid_cap, [](const rmk_list_args<sgd_consts<T>> &a) { sgd_list<T>(a); }));
        if (e != cudaSuccess) failures++;
        for (size_t i = 0; i < N; i++) {
            sgd_kernel_run(pk[i], g[i], bk[i], h[i]);
            sgd_cpu(pc[i], g[i], bc[i], h[i]);
        }
    }
    char what[160];
    snprintf(what, sizeof what, "sgd list %s mom %g damp %g wd %g%s%s, %d sets, %s: = kernel",
             tname, mom, damp, wd, nesterov ? " nesterov" : "", scale ? " scaled" : "", sets,
             blocks_text(grid_cap).c_str());
    expect(all_same(pl, pk) && all_same(bl, bk), what);
    snprintf(what, sizeof what, "sgd list %s mom %g damp %g wd %g%s%s, %d sets: = the cpu loop",
             tname, mom, damp, wd, nesterov ? " nesterov" : "", scale ? " scaled" : "", sets);
    expect(all_same(pl, pc) && all_same(bl, bc), what);
    expect_launches(L, sizes, sets);
}

/* no scale: the list reads a subnormal gradient as it is too */
void list_unscaled_subnormal() {
    std::vector<float> p((size_t)kN, 0.0f), g((size_t)kN, 1e-40f);
    const rm_sgd_kparams h = {1.0, 0, 0, 0, false, true, 0};
    const rmk_optim_tensor t = {p.data(), g.data(), nullptr, nullptr, kN};
    sgd_list_run<float>(&t, 1, &h, [&](const rmk_list_args<sgd_consts<float>> &a, unsigned grid) {
        rmk_emu::launch(grid, kListThreads, [&] { sgd_list<float>(a); });
        return cudaSuccess;
    });
    bool ok = true;
    for (float e : p) ok &= e == -1e-40f;
    expect(ok, "sgd list f32 without a scale: a subnormal gradient read as it is");
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
    printf("list kernels: chunks of %d elements, entries of at most %lld, %d a launch\n",
           RMK_LIST_CHUNK, (long long)RMK_LIST_ENTRY_MAX, RMK_LIST_MAX);
    for (int sets : {2, 6}) {
        adamw_list_case<float>("f32", true, sets, 0);
        adamw_list_case<float>("f32", false, sets, 5);
        adamw_list_case<double>("f64", true, sets, 5);
        sgd_list_case<float>("f32", 0.0, 0.0, 0.0, false, false, sets, 0);
        sgd_list_case<float>("f32", 0.9, 0.1, 0.0, false, true, sets, 5);
        sgd_list_case<float>("f32", 0.9, 0.0, 1e-4, true, true, sets, 0);
        sgd_list_case<double>("f64", 0.9, 0.1, 1e-4, true, false, sets, 5);
    }
    list_unscaled_subnormal();
    printf(failures ? "%d FAILED\n" : "all passed\n", failures);
    return failures ? 1 : 0;
}

/* src/backends/cuda/attention_cudnn.cu — bf16 attention through cuDNN's fused SDPA (the
 * cudnn-frontend graph API that PyTorch's and llm.c's cuDNN attention use), forward and
 * deterministic backward, when REMAT_CUDA_ATTENTION=cudnn asks for it (attention_kernels.c
 * tries it first and falls back to remat's kernels whenever it answers no). C++17 inside,
 * the interface (attention_cudnn.h) is C.
 *
 * Optional twice over: built only where CMake found the frontend's headers (REMAT_CUDNN,
 * docs/cuda.md; else every entry point says no, and says why once), and cuDNN itself is
 * opened at run time (the frontend's dynamic loading: NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING),
 * so that libremat with cuda starts where no libcudnn is installed.
 *
 * A graph is built per rmk_cudnn_att (att_cudnn_map.h: every dim, stride, the mask, the
 * scale, the device) the first time it is asked for, with cuDNN's heuristics' first plan,
 * and kept for the process: the plan, hence the arithmetic, is the same at every call with
 * the same key (a checkpointed forward recomputes the same bits). A graph cuDNN will not
 * build is remembered as such (a warning naming the shapes and cuDNN's message, remat's
 * kernels for that key); an error at execution turns cuDNN off for the process (a warning
 * the same way): never an abort, never a partial result returned as success. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>

#include "attention_cudnn.h"

/* REMAT_CUDA_ATTENTION=cudnn, read once. */
static bool ca_env_wanted(void) {
    static int w = -1;
    if (w < 0) {
        const char *e = getenv("REMAT_CUDA_ATTENTION");
        w = e && strcmp(e, "cudnn") == 0;
    }
    return w;
}

/* REMAT_CUDNN_VERBOSE=1: every graph built and every reason a call was not mapped. */
static bool ca_verbose(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("REMAT_CUDNN_VERBOSE");
        v = e && *e && strcmp(e, "0") != 0;
    }
    return v;
}

#if defined(REMAT_WITH_CUDNN)

#include <dlfcn.h>

#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <cudnn_frontend.h>

namespace fe = cudnn_frontend;

/* The diagnostics' description of a call: what a failure report needs to be reproduced
 * without a GPU (dims, mask, scale, every operand's strides). */
static void ca_describe(const rmk_cudnn_att *a, char *buf, size_t n) {
    static const char *const names[RMK_CA_NOPS] = {"q", "k", "v", "o", "dO", "dq", "dk", "dv"};
    static const char *const masks[] = {"none", "causal top-left", "causal bottom-right"};
    int w = snprintf(buf, n, "%s B=%lld H=%lld Tq=%lld Tk=%lld D=%lld Dv=%lld mask=%s scale=%g",
                     a->bwd ? "backward" : "forward", (long long)a->B, (long long)a->H,
                     (long long)a->Tq, (long long)a->Tk, (long long)a->D, (long long)a->Dv,
                     masks[a->mask], a->scale);
    for (int k = 0; k < (a->bwd ? RMK_CA_NOPS : RMK_CA_DO) && w > 0 && (size_t)w < n; k++)
        w += snprintf(buf + w, n - (size_t)w, " %s(%lld,%lld,%lld,%lld)", names[k],
                      (long long)a->st[k][0], (long long)a->st[k][1], (long long)a->st[k][2],
                      (long long)a->st[k][3]);
}

/* The library the frontend's dynamic loading calls into (it declares, the user defines). */
void *cudnn_frontend::cudnn_dlhandle = nullptr;

namespace {

#define CA_STR_(x) #x
#define CA_STR(x) CA_STR_(x)
/* cuDNN keeps its ABI within a major version: the one these headers are. */
#define CA_SONAME "libcudnn.so." CA_STR(CUDNN_MAJOR)

enum : int64_t { U_Q = 1, U_K, U_V, U_O, U_DO, U_DQ, U_DK, U_DV, U_STATS };
const int64_t g_uid[RMK_CA_NOPS] = {U_Q, U_K, U_V, U_O, U_DO, U_DQ, U_DK, U_DV};

struct Key {
    rmk_cudnn_att a;
    bool operator<(const Key &o) const { return memcmp(&a, &o.a, sizeof a) < 0; }
};
struct Entry {
    std::shared_ptr<fe::graph::Graph> g; /* null: cuDNN would not build it */
    int64_t ws = 0;
};

std::mutex g_mu; /* everything below; a handle's stream is set and used under it */
int g_state;     /* 0 not tried, 1 loaded, -1 not available (said once on stderr) */
bool g_off;      /* an execution failed: cuDNN is not used again */
int g_warnings;
std::map<Key, Entry> g_graphs;
std::map<int, cudnnHandle_t> g_handles;

/* At most 8 warnings a process: each names the shapes; the rest would repeat them. */
void warn(const char *what, const rmk_cudnn_att *a, const std::string &msg) {
    if (g_warnings > 8) return;
    if (g_warnings++ == 8) {
        fprintf(stderr, "remat: cuDNN attention: further warnings not shown\n");
        return;
    }
    char d[1024] = "";
    if (a) ca_describe(a, d, sizeof d);
    fprintf(stderr, "remat: cuDNN attention %s failed (%s): %s; remat's kernels take it\n", what, d,
            msg.c_str());
}

/* dlopen of REMAT_CUDNN_LIB, else the soname (the loader's path), else the toolkit's folder
 * of the build; the frontend resolves every cudnn* call through the handle. */
bool load(std::string *why) {
    const char *env = getenv("REMAT_CUDNN_LIB");
    std::string tried;
    const char *cands[3] = {env && *env ? env : nullptr, CA_SONAME, nullptr};
#ifdef REMAT_CUDA_LIBDIR
    cands[2] = REMAT_CUDA_LIBDIR "/" CA_SONAME;
#endif
    void *h = nullptr;
    const char *used = nullptr;
    for (const char *c : cands) {
        if (!c) continue;
        h = dlopen(c, RTLD_NOW | RTLD_LOCAL);
        used = c;
        if (h) break;
        const char *e = dlerror();
        tried += std::string(tried.empty() ? "" : "; ") + (e ? e : c);
        if (c == cands[0]) break; /* a library named explicitly is the one wanted */
    }
    if (!h) {
        *why = "cannot load " + std::string(CA_SONAME) + " (" + tried +
               "): install cuDNN " CA_STR(CUDNN_MAJOR) " for CUDA " +
               std::to_string(CUDART_VERSION / 1000) +
               " (libcudnn9-cuda-13, or pip's "
               "nvidia-cudnn-cu13; PyTorch's wheels bring it) or name the library in "
               "REMAT_CUDNN_LIB";
        return false;
    }
    cudnn_frontend::cudnn_dlhandle = h;
    size_t v = fe::detail::get_backend_version();
    fprintf(stderr, "remat: attention through cuDNN %zu.%zu.%zu (%s), cudnn-frontend %d.%d.%d\n",
            v / 10000, v / 100 % 100, v % 100, used, CUDNN_FRONTEND_MAJOR_VERSION,
            CUDNN_FRONTEND_MINOR_VERSION, CUDNN_FRONTEND_PATCH_VERSION);
    if (v / 10000 != CUDNN_MAJOR) {
        *why = "the loaded cuDNN is " + std::to_string(v) + ", not major version " +
               std::to_string(CUDNN_MAJOR);
        return false;
    }
    return true;
}

/* The current device's handle (made on first use on that device). */
cudnnHandle_t handle(int dev, std::string *why) {
    auto it = g_handles.find(dev);
    if (it != g_handles.end()) return it->second;
    cudnnHandle_t h = nullptr;
    cudnnStatus_t st = fe::detail::create_handle(&h);
    if (st != CUDNN_STATUS_SUCCESS) {
        *why = std::string("cudnnCreate: ") + fe::detail::get_error_string(st);
        return nullptr;
    }
    g_handles[dev] = h; /* kept for the process, as cuBLAS's handles are */
    return h;
}

std::shared_ptr<fe::graph::Tensor_attributes> operand(fe::graph::Graph &g, const rmk_cudnn_att &a,
                                                      int k, const char *name) {
    const bool kv = k == RMK_CA_K || k == RMK_CA_V || k == RMK_CA_DK || k == RMK_CA_DV;
    const bool vw = k == RMK_CA_V || k == RMK_CA_O || k == RMK_CA_DO || k == RMK_CA_DV;
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(g_uid[k])
                        .set_dim({a.B, a.H, kv ? a.Tk : a.Tq, vw ? a.Dv : a.D})
                        .set_stride({a.st[k][0], a.st[k][1], a.st[k][2], a.st[k][3]}));
}

/* An output the sdpa node made, given remat's uid, dims and strides. */
void output(const std::shared_ptr<fe::graph::Tensor_attributes> &t, const rmk_cudnn_att &a, int k) {
    const bool kv = k == RMK_CA_DK || k == RMK_CA_DV;
    const bool vw = k == RMK_CA_O || k == RMK_CA_DV;
    t->set_output(true)
        .set_uid(g_uid[k])
        .set_dim({a.B, a.H, kv ? a.Tk : a.Tq, vw ? a.Dv : a.D})
        .set_stride({a.st[k][0], a.st[k][1], a.st[k][2], a.st[k][3]});
}

template <typename Attr> void mask(Attr &o, const rmk_cudnn_att &a) {
    if (a.mask == RMK_CA_MASK_NONE) return;
    o.set_diagonal_alignment(a.mask == RMK_CA_MASK_TOP_LEFT ? fe::DiagonalAlignment_t::TOP_LEFT
                                                            : fe::DiagonalAlignment_t::BOTTOM_RIGHT)
        .set_diagonal_band_right_bound(0);
}

/* a's graph, built and planned on handle h; null with *why set when cuDNN refuses. */
std::shared_ptr<fe::graph::Graph> build(const rmk_cudnn_att &a, cudnnHandle_t h, int64_t *ws,
                                        std::string *why) {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto q = operand(*g, a, RMK_CA_Q, "q"), k = operand(*g, a, RMK_CA_K, "k"),
         v = operand(*g, a, RMK_CA_V, "v");
    /* the lse: (B, H, Tq, 1) f32 over remat's contiguous (nb, Tq) */
    const std::vector<int64_t> sdim = {a.B, a.H, a.Tq, 1}, sst = {a.H * a.Tq, a.Tq, 1, 1};
    if (!a.bwd) {
        auto o = fe::graph::SDPA_attributes()
                     .set_name("remat_attention")
                     .set_generate_stats(true)
                     .set_attn_scale((float)a.scale);
        mask(o, a);
        auto [y, stats] = g->sdpa(q, k, v, o);
        output(y, a, RMK_CA_O);
        stats->set_output(true)
            .set_uid(U_STATS)
            .set_data_type(fe::DataType_t::FLOAT)
            .set_dim(sdim)
            .set_stride(sst);
    } else {
        auto y = operand(*g, a, RMK_CA_O, "o"), dy = operand(*g, a, RMK_CA_DO, "dO");
        auto stats = g->tensor(fe::graph::Tensor_attributes()
                                   .set_name("stats")
                                   .set_uid(U_STATS)
                                   .set_data_type(fe::DataType_t::FLOAT)
                                   .set_dim(sdim)
                                   .set_stride(sst));
        /* deterministic: checkpointed gradients equal un-checkpointed ones bit for bit */
        auto o = fe::graph::SDPA_backward_attributes()
                     .set_name("remat_attention_backward")
                     .set_attn_scale((float)a.scale)
                     .set_deterministic_algorithm(true);
        mask(o, a);
        auto [dq, dk, dv] = g->sdpa_backward(q, k, v, y, dy, stats, o);
        output(dq, a, RMK_CA_DQ);
        output(dk, a, RMK_CA_DK);
        output(dv, a, RMK_CA_DV);
    }
    auto e = g->build(h, {fe::HeurMode_t::A});
    if (!e.is_good()) {
        *why = e.get_message();
        return nullptr;
    }
    auto w = g->get_workspace_size(*ws);
    if (!w.is_good()) {
        *why = "workspace size: " + w.get_message();
        return nullptr;
    }
    return g;
}

/* The entry of a: found, or built now (under g_mu). Null when cuDNN cannot take it. */
const Entry *entry(const rmk_cudnn_att &a) {
    Key key{a};
    auto it = g_graphs.find(key);
    if (it != g_graphs.end()) return it->second.g ? &it->second : nullptr;
    Entry &e = g_graphs[key];
    std::string why;
    cudnnHandle_t h = handle(a.dev, &why);
    if (h) {
        const auto t0 = std::chrono::steady_clock::now();
        e.g = build(a, h, &e.ws, &why);
        if (e.g && ca_verbose()) {
            char d[1024];
            ca_describe(&a, d, sizeof d);
            fprintf(stderr,
                    "remat: cuDNN attention graph %s: workspace %lld bytes, built in %.0f ms\n", d,
                    (long long)e.ws,
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                        .count());
        }
    }
    if (!e.g) warn("graph", &a, why);
    return e.g ? &e : nullptr;
}

/* Whether cuDNN is loaded (loading it on the first call, under g_mu). */
bool ready() {
    if (g_state == 0) {
        std::string why;
        bool ok = false;
        try {
            ok = load(&why);
        } catch (const std::exception &ex) {
            why = ex.what();
        }
        g_state = ok ? 1 : -1;
        if (!ok)
            fprintf(stderr,
                    "remat: REMAT_CUDA_ATTENTION=cudnn: %s; attention stays on remat's kernels\n",
                    why.c_str());
    }
    return g_state == 1 && !g_off;
}

} // namespace

extern "C" bool rmk_cudnn_att_wanted(void) {
    if (!ca_env_wanted()) return false;
    std::lock_guard<std::mutex> lock(g_mu);
    return ready();
}

extern "C" int rmk_cudnn_att_prepare(const rmk_cudnn_att *a, size_t *ws) {
    std::lock_guard<std::mutex> lock(g_mu);
    try {
        if (!ready()) return -1;
        const Entry *e = entry(*a);
        if (!e) return -1;
        *ws = (size_t)e->ws;
        return 0;
    } catch (const std::exception &ex) {
        warn("graph", a, ex.what());
    } catch (...) {
        warn("graph", a, "an exception");
    }
    return -1;
}

extern "C" int rmk_cudnn_att_run(const rmk_cudnn_att *a, void *const *ptrs, void *lse, void *ws,
                                 cudaStream_t s) {
    std::lock_guard<std::mutex> lock(g_mu);
    std::string why;
    try {
        auto it = g_graphs.find(Key{*a});
        if (!ready() || it == g_graphs.end() || !it->second.g) return -1; /* prepare said no */
        cudnnHandle_t h = handle(a->dev, &why);
        if (h) {
            cudnnStatus_t st = fe::detail::set_stream(h, s);
            if (st == CUDNN_STATUS_SUCCESS) {
                std::unordered_map<int64_t, void *> pack = {{U_STATS, lse}};
                for (int k = 0; k < (a->bwd ? RMK_CA_NOPS : RMK_CA_DO); k++)
                    pack[g_uid[k]] = ptrs[k];
                auto e = it->second.g->execute(h, pack, ws);
                if (e.is_good()) return 0;
                why = e.get_message();
            } else {
                why = std::string("cudnnSetStream: ") + fe::detail::get_error_string(st);
            }
        }
    } catch (const std::exception &ex) {
        why = ex.what();
    } catch (...) {
        why = "an exception";
    }
    /* nothing was enqueued that wrote a result, or it failed part way: either way the
     * caller reruns the call with remat's kernels, which write every output */
    g_off = true;
    warn("execution", a, why + " (cuDNN is not used again in this process)");
    return -1;
}

#else /* the frontend's headers were not found at configure time */

extern "C" bool rmk_cudnn_att_wanted(void) {
    static bool said;
    if (!ca_env_wanted()) return false;
    if (!said) { /* racy at worst twice: a message, nothing else depends on it */
        said = true;
        fprintf(stderr, "remat: REMAT_CUDA_ATTENTION=cudnn: this libremat was built without "
                        "cuDNN attention (configure with the headers of PyPI's "
                        "nvidia-cudnn-frontend: scripts/fetch_cudnn_frontend.sh, docs/cuda.md); "
                        "attention stays on remat's kernels\n");
    }
    return false;
}
extern "C" int rmk_cudnn_att_prepare(const rmk_cudnn_att *a, size_t *ws) {
    (void)a;
    (void)ws;
    return -1;
}
extern "C" int rmk_cudnn_att_run(const rmk_cudnn_att *a, void *const *ptrs, void *lse, void *ws,
                                 cudaStream_t s) {
    (void)a, (void)ptrs, (void)lse, (void)ws, (void)s;
    return -1;
}

#endif

extern "C" void rmk_cudnn_att_skip(const char *why, const rm_attention_dims *d) {
    /* once per reason (they are literals): a suite's thousand calls would repeat them */
    static const char *seen[16];
    static int nseen;
    static std::mutex mu;
    if (!ca_verbose()) return;
    std::lock_guard<std::mutex> lock(mu);
    for (int i = 0; i < nseen; i++)
        if (seen[i] == why) return;
    if (nseen < 16) seen[nseen++] = why;
    fprintf(stderr,
            "remat: cuDNN attention not used (%s): nb=%lld Tq=%lld Tk=%lld D=%lld Dv=%lld "
            "group=%lld causal=%d off=%lld\n",
            why, (long long)d->nb, (long long)d->Tq, (long long)d->Tk, (long long)d->D,
            (long long)d->Dv, (long long)d->group, (int)d->causal, (long long)d->off);
}

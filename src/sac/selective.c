/* src/sac/selective.c — selective activation checkpointing regions (PyTorch:
 * _CachingTorchDispatchMode / _CachedTorchDispatchMode and
 * create_selective_checkpoint_contexts).
 *
 * One region per remat_checkpoint call. Its forward context records every
 * top-level op of the checkpointed function (index, name, policy); for an
 * op the policy saves it keeps
 *   - each fresh output (an output whose storage is not an input's), as a
 *     detached alias, and
 *   - each tensor the op saves for backward that is neither an input nor
 *     a view of an output (layer_norm's mean/rstd, dropout's mask), as a
 *     detached alias; saves that view an output are remembered as
 *     (output, offset, shape, strides), saves of inputs as "input".
 * The op's saves still go to the checkpoint's placeholders as usual.
 *
 * During the recomputation an op served from the cache runs in skip mode
 * (no kernels, data-less outputs, but the graph node is recorded exactly
 * as in the forward). Each tensor it saves is replaced by the tensor saved
 * at the same position in the forward — which fills the checkpoint's
 * placeholder with the original value — and each data-less output adopts
 * the storage of the cached output, so later ops compute on the original
 * values. The cache entry is then dropped: a second recomputation is the
 * "backward an extra time" error, as in PyTorch.
 *
 * What the region knows of the checkpoint's recomputation comes through
 * the remat_recomputation the checkpoint hands it (recompute_attach): how
 * many saves remain before early stop, and whether it has stopped. Once it
 * has, skip mode is on and the op bracket consults no interceptor, so the
 * region sees nothing more of that run.
 *
 * Named residuals: remat_tag is an identity op. When the policy saves a
 * tag, the op that produced the tagged tensor is cached instead (looked up
 * by storage among the recorded ops), so that it is not recomputed — JAX
 * saves the named value and never recomputes what only feeds it. To make
 * that possible, every recorded op keeps its fresh outputs and private
 * saves until nothing but the record refers to those storages any more
 * (checked at each op), or until the forward ends: the region holds no
 * memory the function itself does not still hold. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "offload.h"
#include "sac.h"

typedef enum save_kind { SAVE_NONE = 0, SAVE_INPUT, SAVE_OUT_VIEW, SAVE_OWN } save_kind;

typedef struct sac_save_rec {
    uint8_t kind;
    int out_idx;    /* SAVE_OUT_VIEW: which output it views */
    int64_t offset; /* SAVE_OUT_VIEW geometry */
    int ndim;
    int64_t shape[REMAT_MAX_DIMS];
    int64_t strides[REMAT_MAX_DIMS];
    remat_dtype dtype;
    remat_tensor *t;       /* SAVE_OWN: alias (NULL while offloaded; the bf16 copy if bf16) */
    remat_device dev;      /* device of the original */
    rm_offload_entry *off; /* offloaded (OFFLOAD policies): the host copy */
    bool bf16;             /* t is the bf16 copy of an f32 original (SAVE_BF16) */
} sac_save_rec;

typedef struct sac_out_rec {
    remat_tensor *t; /* fresh output: alias (NULL while offloaded) */
    rm_storage *key; /* storage identity for tag lookup (NULL once offloaded) */
    remat_device dev;
    rm_offload_entry *off; /* offloaded (OFFLOAD policies): the host copy */
    uint64_t version;
    bool bf16; /* t is the bf16 copy of an f32 original (SAVE_BF16) */
} sac_out_rec;

typedef enum rec_state {
    REC_PENDING = 0, /* recorded; kept for a possible tag until its storages die */
    REC_CACHED,      /* kept for the recomputation */
    REC_DROPPED,     /* nothing kept */
    REC_CONSUMED     /* served by a recomputation */
} rec_state;

typedef struct sac_rec {
    const char *op;
    int policy;
    uint8_t state;
    bool inplace, is_tag;
    bool promoted, demoted; /* decided by a later tag */
    bool offload;
    bool bf16;          /* SAVE_BF16: eligible f32 tensors go to bf16 when the forward ends */
    bool held;          /* listed in pending (holds references while PENDING) */
    int64_t bytes;      /* CACHED: what it holds (rec_bytes when cached) */
    int64_t bytes_bf16; /* CACHED: f32 bytes SAVE_BF16 stores as bf16 (bf16_bytes) */
    bool compressed;    /* some of its tensors are bf16 copies */
    int n_out;
    sac_out_rec *outs;
    int n_saves, cap_saves;
    sac_save_rec *saves;
} sac_rec;

enum { MODE_IDLE = 0, MODE_FORWARD, MODE_RECOMPUTE };

struct sac_region {
    remat_policy *policy;
    bool allow_mutation;
    remat_sac_stats *stats; /* the caller's, or own_stats when none was asked for */
    remat_sac_stats own_stats;
    sac_rec *recs;
    int n_recs, cap_recs;
    int *pending; /* indices of PENDING records holding references */
    int n_pending, cap_pending;
    int mode;
    bool forward_done;
    int next_index; /* recomputation: index of the next top-level op */
    int base_depth;
    uint64_t bid;
    /* the recomputation running the region (recompute_attach; NULL in the
     * forward): where its early stop stands */
    const remat_recomputation *recomp;
    bool stopped;      /* the next op's saves end the recomputation: ask nothing more */
    bool consumed_any; /* this recomputation served an op from the cache */
    /* this recomputation runs in a create_graph backward: the region will
     * be recomputed again by the backward of the graph it records (grad of
     * grad), so it serves cache entries without consuming them */
    bool keep;
    /* the running top-level op */
    int cur; /* record index (forward) or served record (recompute); -1 none */
    bool serving;
    int save_pos;
    int cur_n_in;
    remat_tensor *const *cur_in;
    rm_saver_fn prev_saver; /* the saver and interceptor this region replaced */
    void *prev_saver_self;
    rm_icpt_ref prev_icpt;
    /* first problem found where no status can be returned; reported when
     * the context exits */
    int err;
    char errmsg[1024];
};

static void defer(sac_region *r, remat_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void defer(sac_region *r, remat_status status, const char *fmt, ...) {
    if (r->err) return;
    r->err = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->errmsg, sizeof r->errmsg, fmt, ap);
    va_end(ap);
}

/* ---- helpers ------------------------------------------------------------------------ */
static remat_tensor *alias_of(const remat_tensor *t) {
    remat_tensor *a =
        rm_tensor_alloc(t->storage, t->offset, t->ndim, t->shape, t->strides, t->dtype);
    if (a) a->is_view = true;
    return a;
}

static bool same_device(remat_device a, remat_device b) {
    return a.type == b.type && a.index == b.index;
}

static bool shares_input(const sac_region *r, const remat_tensor *t) {
    for (int i = 0; i < r->cur_n_in; i++)
        if (r->cur_in[i] && r->cur_in[i]->storage == t->storage) return true;
    return false;
}

/* OFFLOAD: *pt (a device alias) to host memory through offload.c (async D2H on the device's
 * side stream where it has one); the entry into *off, *pt released. Entries are grouped by
 * region: the recomputation brings them back in order, prefetching the next ones. */
static remat_status offload(const sac_region *r, remat_tensor **pt, rm_offload_entry **off) {
    int rc = rm_offload_pack(*pt, r, off);
    if (!rc) rm_release_p(pt);
    return rc;
}

/* *pt := the offloaded tensor back on its device (prefetched, or fetched now); the entry's
 * host copy is freed. */
static remat_status restore(remat_tensor **pt, rm_offload_entry **off) {
    int rc = rm_offload_unpack(*off, pt);
    if (rc) return rc;
    rm_offload_free(*off);
    *off = NULL;
    return REMAT_OK;
}

static void rec_release(sac_rec *rec) {
    for (int j = 0; j < rec->n_out; j++) {
        rm_release_p(&rec->outs[j].t);
        rm_offload_free(rec->outs[j].off);
        rec->outs[j].off = NULL;
        rec->outs[j].key = NULL;
    }
    for (int k = 0; k < rec->n_saves; k++) {
        rm_release_p(&rec->saves[k].t);
        rm_offload_free(rec->saves[k].off);
        rec->saves[k].off = NULL;
    }
}

static void rec_free(sac_rec *rec) {
    rec_release(rec);
    free(rec->outs);
    free(rec->saves);
    rec->outs = NULL;
    rec->saves = NULL;
    rec->n_out = rec->n_saves = rec->cap_saves = 0;
}

/* Bytes of the distinct storages a cached record holds. */
static int64_t rec_bytes(const sac_rec *rec) {
    const rm_storage *seen[64];
    int n_seen = 0;
    int64_t total = 0;
    for (int pass = 0; pass < 2; pass++) {
        int n = pass == 0 ? rec->n_out : rec->n_saves;
        for (int i = 0; i < n; i++) {
            const remat_tensor *t = pass == 0 ? rec->outs[i].t : rec->saves[i].t;
            if (!t) continue;
            bool dup = false;
            for (int k = 0; k < n_seen; k++) dup = dup || seen[k] == t->storage;
            if (dup) continue;
            if (n_seen < 64) seen[n_seen++] = t->storage;
            total += (int64_t)t->storage->nbytes;
        }
    }
    return total;
}

/* SAVE_BF16 stores t as bf16 (on t's device) when t is f32 with data, contiguous, and
 * alone on its whole storage among the record's tensors (so converting it frees the f32
 * storage once the forward drops it, and the copy back has the original's layout). */
static bool bf16_eligible(const sac_rec *rec, const remat_tensor *t) {
    if (!t || t->dtype != REMAT_F32 || !t->storage->data || t->offset != 0 ||
        !remat_is_contiguous(t) || (size_t)remat_numel(t) * sizeof(float) != t->storage->nbytes)
        return false;
    int uses = 0;
    for (int j = 0; j < rec->n_out; j++)
        uses += rec->outs[j].t && rec->outs[j].t->storage == t->storage;
    for (int k = 0; k < rec->n_saves; k++)
        uses += rec->saves[k].t && rec->saves[k].t->storage == t->storage;
    return uses == 1;
}

/* f32 bytes of the record's tensors SAVE_BF16 would store as bf16. */
static int64_t rec_bf16_bytes(const sac_rec *rec) {
    int64_t total = 0;
    for (int j = 0; j < rec->n_out; j++)
        if (bf16_eligible(rec, rec->outs[j].t)) total += (int64_t)rec->outs[j].t->storage->nbytes;
    for (int k = 0; k < rec->n_saves; k++)
        if (rec->saves[k].kind == SAVE_OWN && bf16_eligible(rec, rec->saves[k].t))
            total += (int64_t)rec->saves[k].t->storage->nbytes;
    return total;
}

/* *pt := its bf16 copy (to_bf16; *pt f32) or f32 again for the recomputation (*pt a bf16
 * copy); *flag says which it now is. */
static remat_status convert_bf16(remat_tensor **pt, bool *flag, bool to_bf16) {
    remat_tensor *y = NULL;
    int rc = sac_bf16_convert(&y, *pt, to_bf16);
    if (rc) return rc;
    rm_release(*pt);
    *pt = y;
    *flag = to_bf16;
    return REMAT_OK;
}

/* A record became CACHED (by its policy or a tag): count it, offload it. */
static void rec_cache(sac_region *r, sac_rec *rec) {
    remat_sac_stats *st = r->stats;
    st->ops_cached++;
    rec->bytes = rec_bytes(rec);
    st->bytes_cached += rec->bytes;
    rec->bytes_bf16 = rec_bf16_bytes(rec);
    st->bytes_cached_bf16 += rec->bytes_bf16;
    if (!rec->offload) return;
    bool moved = false;
    int rc = REMAT_OK;
    for (int j = 0; j < rec->n_out && rc == REMAT_OK; j++) {
        sac_out_rec *o = &rec->outs[j];
        if (!o->t || o->dev.type == REMAT_CPU || !o->t->storage->data) continue;
        rc = offload(r, &o->t, &o->off);
        if (rc == REMAT_OK) {
            o->key = NULL;
            moved = true;
        }
    }
    for (int k = 0; k < rec->n_saves && rc == REMAT_OK; k++) {
        sac_save_rec *s = &rec->saves[k];
        if (s->kind != SAVE_OWN || !s->t || s->dev.type == REMAT_CPU || !s->t->storage->data)
            continue;
        rc = offload(r, &s->t, &s->off);
        moved = moved || rc == REMAT_OK;
    }
    if (rc) {
        defer(r, rc,
              "remat_checkpoint (selective): could not offload the output of %s to host "
              "memory: %s",
              rec->op, remat_last_error());
        return;
    }
    if (moved) st->ops_offloaded++;
}

static void rec_uncache(sac_region *r, sac_rec *rec) {
    remat_sac_stats *st = r->stats;
    st->ops_cached--;
    st->bytes_cached -= rec->bytes;
    st->bytes_cached_bf16 -= rec->bytes_bf16;
    if (rec->compressed) st->ops_bf16--;
    rec->compressed = false;
    bool off = false;
    for (int j = 0; j < rec->n_out; j++) off = off || rec->outs[j].off;
    for (int k = 0; k < rec->n_saves; k++) off = off || rec->saves[k].off;
    if (off) st->ops_offloaded--;
    rec_release(rec);
    rec->state = REC_DROPPED;
}

static bool rec_holds_anything(const sac_rec *rec) {
    for (int j = 0; j < rec->n_out; j++)
        if (rec->outs[j].t || rec->outs[j].off) return true;
    for (int k = 0; k < rec->n_saves; k++)
        if (rec->saves[k].t || rec->saves[k].off) return true;
    return false;
}

/* Drops PENDING records none of whose output storages is referenced by
 * anything but the record: no later tag can name them. */
static void release_dead_pending(sac_region *r, bool all) {
    int w = 0;
    for (int i = 0; i < r->n_pending; i++) {
        sac_rec *rec = &r->recs[r->pending[i]];
        bool keep = false;
        if (rec->state == REC_PENDING && !all) {
            for (int j = 0; j < rec->n_out && !keep; j++) {
                remat_tensor *t = rec->outs[j].t;
                if (!t) continue;
                int mine = 0;
                for (int k = 0; k < rec->n_out; k++)
                    if (rec->outs[k].t && rec->outs[k].t->storage == t->storage) mine++;
                keep = atomic_load(&t->storage->refcount) > mine;
            }
        }
        if (keep) {
            r->pending[w++] = r->pending[i];
            continue;
        }
        rec->held = false;
        if (rec->state == REC_PENDING) {
            rec_release(rec);
            rec->state = REC_DROPPED;
        }
    }
    r->n_pending = w;
}

/* ---- tags: promote or demote the producer of the tagged tensor ------------------------ */
static void tag_override(sac_region *r, int p, remat_tensor *t) {
    if (!t) return;
    sac_rec *prod = NULL;
    for (int i = r->n_recs - 1; i >= 0 && !prod; i--) {
        sac_rec *rec = &r->recs[i];
        if (rec->state != REC_PENDING && rec->state != REC_CACHED) continue;
        for (int j = 0; j < rec->n_out; j++)
            if (rec->outs[j].key && rec->outs[j].key == t->storage) prod = rec;
    }
    if (!prod) return; /* made outside the region (an input) or by a non-op */
    if (sac_is_save(p)) {
        prod->promoted = true;
        prod->demoted = false;
        if (prod->state == REC_PENDING) {
            prod->state = REC_CACHED;
            prod->policy = p;
            prod->offload = sac_is_offload(p);
            prod->bf16 = sac_is_bf16(p);
            rec_cache(r, prod);
        }
    } else if (p == REMAT_MUST_RECOMPUTE) {
        prod->demoted = true;
        prod->promoted = false;
        if (prod->state == REC_CACHED) rec_uncache(r, prod);
    }
}

static remat_status saver(void *self, remat_node *n, int slot, remat_tensor *t);

/* ---- interception -------------------------------------------------------------------- */
static bool sac_wants(void *self, int depth) {
    sac_region *r = self;
    return r->mode != MODE_IDLE && !r->stopped && depth == r->base_depth &&
           remat_current_backward_id() == r->bid;
}

static remat_status ask_policy(sac_region *r, const char *op, int index, int n_in,
                               remat_tensor *const *inputs, const char *tag, int *out) {
    remat_sac_context ctx = {r->mode == MODE_RECOMPUTE, index, tag};
    remat_clear_error();
    int p = remat_policy_eval(r->policy, &ctx, op, n_in, inputs);
    if (r->mode == MODE_RECOMPUTE) r->stats->policy_calls_recompute++;
    else r->stats->policy_calls_forward++;
    if (!sac_valid_policy(p)) {
        if (remat_last_error()[0])
            return rm_err(REMAT_ECALLBACK,
                          "%s: the selective-checkpoint policy failed for op %d "
                          "of the region (%s): %s",
                          op, index, r->mode == MODE_RECOMPUTE ? "recomputation" : "forward",
                          remat_last_error());
        return rm_err(REMAT_ECALLBACK,
                      "%s: the selective-checkpoint policy returned %d for op %d "
                      "of the region; expected a remat_checkpoint_policy (REMAT_MUST_SAVE .. "
                      "REMAT_PREFER_SAVE_BF16)",
                      op, p, index);
    }
    *out = p;
    return REMAT_OK;
}

static bool is_inplace(const char *op) {
    size_t n = strlen(op);
    return n > 0 && op[n - 1] == '_';
}

/* Op `idx` of the region becomes the running one: the region's saver takes
 * its saves until it ends. serving: it is served from the cache (a
 * recomputation), not recorded (the forward). */
static void make_current(sac_region *r, rm_op_frame *f, int idx, int n_in,
                         remat_tensor *const *inputs, bool serving) {
    r->cur = idx;
    r->serving = serving;
    r->save_pos = 0;
    r->cur_n_in = n_in;
    r->cur_in = inputs;
    rm_saver_set(saver, r, &r->prev_saver, &r->prev_saver_self);
    f->region = r;
}

static remat_status begin_forward(sac_region *r, rm_op_frame *f, const char *op, int n_in,
                                  remat_tensor *const *inputs, const char *tag) {
    release_dead_pending(r, false);
    int idx = r->n_recs;
    int p;
    int rc = ask_policy(r, op, idx, n_in, inputs, tag, &p);
    if (rc) return rc;
    sac_rec *nr = rm_grow(r->recs, &r->cap_recs, r->n_recs, 32, sizeof *nr);
    if (nr) r->recs = nr;
    int *np = nr ? rm_grow(r->pending, &r->cap_pending, r->n_pending, 32, sizeof *np) : NULL;
    if (np) r->pending = np;
    if (!nr || !np)
        return rm_err(REMAT_ENOMEM, "%s: out of memory recording a selective-checkpoint op", op);
    r->stats->ops_forward++;
    if (tag && n_in > 0) tag_override(r, p, inputs[0]);
    sac_rec *rec = &r->recs[r->n_recs++];
    memset(rec, 0, sizeof *rec);
    rec->op = op;
    rec->policy = p;
    rec->inplace = is_inplace(op);
    rec->is_tag = tag != NULL;
    rec->offload = sac_is_offload(p);
    rec->bf16 = sac_is_bf16(p);
    rec->state = sac_is_save(p) && !rec->inplace && !rec->is_tag ? REC_CACHED : REC_PENDING;
    make_current(r, f, idx, n_in, inputs, false);
    return REMAT_OK;
}

/* Tensors op `rec` saved in the forward that were its own inputs. */
static int input_saves(const sac_rec *rec) {
    int k = 0;
    for (int i = 0; i < rec->n_saves; i++) k += rec->saves[i].kind == SAVE_INPUT;
    return k;
}

/* PyTorch: _VersionWrapper.get_val: an output of op `idx` mutated since it
 * was cached fails the recomputation, unless mutation is allowed. */
static remat_status check_unmutated(const sac_region *r, const sac_rec *rec, const char *op,
                                    int idx) {
    for (int j = 0; j < rec->n_out && !r->allow_mutation; j++) {
        const sac_out_rec *o = &rec->outs[j];
        /* offloaded (no alias): a host copy nobody can mutate; bf16: a private copy,
         * made when the forward ended (compress_cached checked the original then) */
        if (!o->t || o->bf16 || remat_version(o->t) == o->version) continue;
        char b[200];
        return rm_err(REMAT_EVERSION,
                      "%s: Tensor cached during selective activation checkpoint has been "
                      "mutated: output %d of op %d of the region, %s, is at version %llu, "
                      "cached at version %llu. Pass allow_cache_entry_mutation = true if the "
                      "mutation is intended.",
                      op, j, idx, rm_tensor_str(o->t, b, sizeof b),
                      (unsigned long long)remat_version(o->t), (unsigned long long)o->version);
    }
    return REMAT_OK;
}

static remat_status begin_recompute(sac_region *r, rm_op_frame *f, const char *op, int n_in,
                                    remat_tensor *const *inputs, const char *tag) {
    int idx = r->next_index;
    int remaining = remat_recomputation_remaining(r->recomp);
    if (remaining > 0 && idx < r->n_recs && strcmp(r->recs[idx].op, op) == 0 &&
        input_saves(&r->recs[idx]) >= remaining) {
        /* PyTorch saves an op's inputs before its policy sees the op; these saves
         * end the recomputation, so PyTorch never asks about it: run it plainly
         * (its saves stop the recomputation) and ask nothing more. */
        r->next_index++;
        r->stopped = true;
        return REMAT_OK;
    }
    int p;
    int rc = ask_policy(r, op, idx, n_in, inputs, tag, &p);
    if (rc) return rc;
    r->next_index++;
    sac_rec *rec = idx < r->n_recs ? &r->recs[idx] : NULL;
    bool same = rec && strcmp(rec->op, op) == 0;
    bool servable = !is_inplace(op) && !tag;
    bool serve;
    if (same && rec->promoted) serve = true;
    else if (same && rec->demoted) serve = false;
    else serve = servable && sac_is_save(p);
    if (!serve) {
        r->stats->ops_recomputed++;
        return REMAT_OK;
    }
    if (!same || (rec->state != REC_CACHED && rec->state != REC_CONSUMED)) {
        const char *why = !rec    ? "the forward ran fewer ops"
                          : !same ? "the forward ran another op at that index"
                                  : "the forward's policy did not save it";
        return rm_err(REMAT_EDETERMINISM,
                      "%s: op %d of the selective-checkpoint region (%s) was not found in the "
                      "cache during recomputation (%s: %s%s). The checkpointed function or its "
                      "policy must make the same decisions in forward and recomputation.",
                      op, idx, op, why, rec ? "forward op: " : "forward recorded ",
                      rec ? rec->op : "no such op");
    }
    if (rec->state == REC_CONSUMED)
        return rm_err(REMAT_ESTATE,
                      "%s: Trying to backward an extra time. You are only allowed to backward "
                      "once on any region computed under selective activation checkpoint (op %d "
                      "of the region was already served from the cache by an earlier "
                      "recomputation).",
                      op, idx);
    rc = check_unmutated(r, rec, op, idx);
    if (rc) return rc;
    /* bring offloaded tensors back before the op needs them */
    for (int j = 0; j < rec->n_out && rc == REMAT_OK; j++)
        if (rec->outs[j].off) rc = restore(&rec->outs[j].t, &rec->outs[j].off);
    for (int k = 0; k < rec->n_saves && rc == REMAT_OK; k++)
        if (rec->saves[k].off) rc = restore(&rec->saves[k].t, &rec->saves[k].off);
    /* and bf16 copies to f32 (each copy freed as its f32 is made) */
    for (int j = 0; j < rec->n_out && rc == REMAT_OK; j++)
        if (rec->outs[j].bf16) rc = convert_bf16(&rec->outs[j].t, &rec->outs[j].bf16, false);
    for (int k = 0; k < rec->n_saves && rc == REMAT_OK; k++)
        if (rec->saves[k].bf16) rc = convert_bf16(&rec->saves[k].t, &rec->saves[k].bf16, false);
    if (rc) return rm_err_prefix(rc, op);
    if (!r->keep) rec->state = REC_CONSUMED;
    r->consumed_any = !r->keep;
    r->stats->ops_from_cache++;
    make_current(r, f, idx, n_in, inputs, true);
    f->prev_skip = rm_set_skip_mode(true);
    f->set_skip = true;
    return REMAT_OK;
}

static remat_status sac_begin(void *self, rm_op_frame *f, const char *op, int n_in,
                              remat_tensor *const *inputs, const char *tag) {
    sac_region *r = self;
    if (r->mode == MODE_FORWARD) return begin_forward(r, f, op, n_in, inputs, tag);
    return begin_recompute(r, f, op, n_in, inputs, tag);
}

/* rm_node_save with skip mode off, as the hooks expect in a real run (a
 * pack hook may run ops); the served op goes on in skip mode after it. If
 * the save ends the recomputation, the checkpoint's recompute hook turns
 * skip mode on for the rest of the function: end_recompute keeps it on. */
static remat_status save_through(remat_node *n, int slot, remat_tensor *t) {
    bool was = rm_set_skip_mode(false);
    int rc = rm_node_save(n, slot, t);
    rm_set_skip_mode(was);
    return rc;
}

static remat_status saver(void *self, remat_node *n, int slot, remat_tensor *t) {
    sac_region *r = self;
    sac_rec *rec = &r->recs[r->cur];
    int pos = r->save_pos++;
    if (!r->serving) {
        /* forward: remember what position pos was, then save as usual */
        if (!rec->inplace && !rec->is_tag) {
            if (pos >= rec->cap_saves) {
                int nc = rec->cap_saves ? rec->cap_saves * 2 : 4;
                while (nc <= pos) nc *= 2;
                sac_save_rec *ns = realloc(rec->saves, (size_t)nc * sizeof *ns);
                if (!ns)
                    return rm_err(REMAT_ENOMEM, "%s: out of memory recording a saved tensor",
                                  rec->op);
                memset(ns + rec->cap_saves, 0, (size_t)(nc - rec->cap_saves) * sizeof *ns);
                rec->saves = ns;
                rec->cap_saves = nc;
            }
            if (pos >= rec->n_saves) rec->n_saves = pos + 1;
            sac_save_rec *s = &rec->saves[pos];
            memset(s, 0, sizeof *s);
            if (!t) {
                s->kind = SAVE_NONE;
            } else if (shares_input(r, t)) {
                s->kind = SAVE_INPUT;
            } else {
                s->kind = SAVE_OWN;
                s->dev = t->storage->device;
                s->t = alias_of(t);
                if (!s->t)
                    return rm_err(REMAT_ENOMEM,
                                  "%s: out of memory recording a saved "
                                  "tensor",
                                  rec->op);
            }
        }
        return rm_node_save(n, slot, t);
    }
    /* recomputation of a cached op: the forward's tensor at the same position */
    if (pos >= rec->n_saves) {
        defer(r, REMAT_EDETERMINISM,
              "remat_checkpoint (selective): %s (op %d of the region) "
              "saved more tensors during recomputation than during the forward (%d)",
              rec->op, r->cur, rec->n_saves);
        return save_through(n, slot, t);
    }
    sac_save_rec *s = &rec->saves[pos];
    switch (s->kind) {
    case SAVE_NONE:
    case SAVE_INPUT:
        if (t && !t->storage->data)
            defer(r, REMAT_EDETERMINISM,
                  "remat_checkpoint (selective): %s (op %d of the region) "
                  "saved a tensor at position %d that was one of its inputs in the forward but "
                  "is not during recomputation",
                  rec->op, r->cur, pos);
        return save_through(n, slot, t);
    case SAVE_OWN: return save_through(n, slot, s->t);
    case SAVE_OUT_VIEW: {
        remat_tensor *o = s->out_idx < rec->n_out ? rec->outs[s->out_idx].t : NULL;
        if (!o) {
            defer(r, REMAT_ESTATE,
                  "remat_checkpoint (selective): the cached output %d of %s "
                  "(op %d of the region) is missing",
                  s->out_idx, rec->op, r->cur);
            return save_through(n, slot, t);
        }
        remat_tensor *v =
            rm_tensor_alloc(o->storage, s->offset, s->ndim, s->shape, s->strides, s->dtype);
        if (!v) return rm_err(REMAT_ENOMEM, "%s: out of memory", rec->op);
        v->is_view = true;
        int rc = save_through(n, slot, v);
        rm_release(v);
        return rc;
    }
    }
    return save_through(n, slot, t);
}

static void end_forward(sac_region *r, remat_status status, int n_out, remat_tensor *const *outs) {
    sac_rec *rec = &r->recs[r->cur];
    if (status != REMAT_OK || rec->inplace || rec->is_tag) {
        rec_free(rec);
        rec->state = REC_DROPPED;
        return;
    }
    if (n_out > 0) {
        rec->outs = calloc((size_t)n_out, sizeof *rec->outs);
        if (!rec->outs) {
            defer(r, REMAT_ENOMEM,
                  "remat_checkpoint (selective): out of memory recording the "
                  "outputs of %s",
                  rec->op);
            rec_free(rec);
            rec->state = REC_DROPPED;
            return;
        }
        rec->n_out = n_out;
    }
    for (int j = 0; j < n_out; j++) {
        remat_tensor *o = outs[j];
        if (!o || shares_input(r, o)) continue;
        /* one alias per storage: a second output on the same storage is
         * served through the first one's storage anyway */
        bool dup = false;
        for (int k = 0; k < j; k++) dup = dup || (outs[k] && outs[k]->storage == o->storage);
        sac_out_rec *or_ = &rec->outs[j];
        or_->t = alias_of(o);
        if (!or_->t) {
            defer(r, REMAT_ENOMEM,
                  "remat_checkpoint (selective): out of memory caching the "
                  "output of %s",
                  rec->op);
            continue;
        }
        or_->key = dup ? NULL : o->storage;
        or_->dev = o->storage->device;
        or_->version = remat_version(o);
    }
    /* saves that view an output are served through the output */
    for (int k = 0; k < rec->n_saves; k++) {
        sac_save_rec *s = &rec->saves[k];
        if (s->kind != SAVE_OWN || !s->t) continue;
        for (int j = 0; j < rec->n_out; j++) {
            remat_tensor *o = rec->outs[j].t;
            if (!o || o->storage != s->t->storage) continue;
            s->kind = SAVE_OUT_VIEW;
            s->out_idx = j;
            s->offset = s->t->offset;
            s->ndim = s->t->ndim;
            memcpy(s->shape, s->t->shape, sizeof s->shape);
            memcpy(s->strides, s->t->strides, sizeof s->strides);
            s->dtype = s->t->dtype;
            rm_release_p(&s->t);
            break;
        }
    }
    if (rec->state == REC_CACHED) {
        rec_cache(r, rec);
    } else if (rec_holds_anything(rec)) {
        rec->held = true;
        r->pending[r->n_pending++] = r->cur; /* capacity reserved in begin_forward */
    } else {
        rec->state = REC_DROPPED;
    }
}

static bool adopt(remat_tensor *y, const remat_tensor *c) {
    if (y->ndim != c->ndim || y->dtype != c->dtype ||
        memcmp(y->shape, c->shape, sizeof(int64_t) * (size_t)y->ndim) != 0 ||
        !same_device(y->storage->device, c->storage->device))
        return false;
    rm_storage *old = y->storage;
    rm_storage_retain(c->storage);
    y->storage = c->storage;
    y->offset = c->offset;
    memcpy(y->strides, c->strides, sizeof y->strides);
    rm_storage_release(old);
    return true;
}

static void end_recompute(sac_region *r, rm_op_frame *f, remat_status status, int n_out,
                          remat_tensor *const *outs) {
    sac_rec *rec = &r->recs[r->cur];
    if (f->set_skip) rm_set_skip_mode(f->prev_skip || remat_recomputation_stopped(r->recomp));
    if (status == REMAT_OK) {
        for (int j = 0; j < n_out; j++) {
            remat_tensor *y = outs[j];
            if (!y || y->storage->data) continue; /* real: a view of a real input */
            const remat_tensor *c = j < rec->n_out ? rec->outs[j].t : NULL;
            if (c && adopt(y, c)) continue;
            char b1[200], b2[200];
            defer(r, REMAT_EDETERMINISM,
                  "remat_checkpoint (selective): output %d of %s (op %d "
                  "of the region) is %s during recomputation but the cached one is %s",
                  j, rec->op, r->cur, rm_tensor_str(y, b1, sizeof b1),
                  c ? rm_tensor_str(c, b2, sizeof b2) : "missing");
        }
    }
    /* consumed: the recomputed graph and the checkpoint's placeholders hold
     * what is still needed (kept for the next recomputation under create_graph) */
    if (!r->keep) rec_release(rec);
}

static void sac_end(void *self, rm_op_frame *f, remat_status status, int n_out,
                    remat_tensor *const *outs) {
    sac_region *r = self;
    rm_saver_set(r->prev_saver, r->prev_saver_self, NULL, NULL);
    if (r->serving) end_recompute(r, f, status, n_out, outs);
    else end_forward(r, status, n_out, outs);
    r->cur = -1;
    r->serving = false;
    r->cur_in = NULL;
    r->cur_n_in = 0;
}

static const rm_interceptor k_sac_interceptor = {sac_wants, sac_begin, sac_end};

/* ---- the context pair ------------------------------------------------------------------ */
static void enter(sac_region *r, int mode) {
    r->mode = mode;
    r->stopped = false;
    r->consumed_any = false;
    r->next_index = 0;
    r->cur = -1;
    r->base_depth = rm_op_depth();
    r->bid = remat_current_backward_id();
    r->prev_icpt = rm_interceptor_set((rm_icpt_ref){&k_sac_interceptor, r});
}

static remat_status leave(sac_region *r, remat_status status) {
    /* contexts nest strictly (the checkpoint enters and exits around one call) */
    rm_interceptor_set(r->prev_icpt);
    r->prev_icpt = (rm_icpt_ref){0};
    r->mode = MODE_IDLE;
    if (r->err) {
        int e = r->err;
        r->err = 0;
        if (status == REMAT_OK) return rm_err(e, "%s", r->errmsg);
    }
    return status;
}

static remat_status ctx_forward_enter(void *state) {
    sac_region *r = state;
    if (r->forward_done)
        return rm_err(REMAT_ESTATE, "remat_checkpoint (selective): a selective-checkpoint context "
                                    "pair serves one checkpoint call; create a new pair per call");
    enter(r, MODE_FORWARD);
    return REMAT_OK;
}

/* Whether an output of rec was modified in place since it was cached. */
static bool rec_mutated(const sac_rec *rec) {
    for (int j = 0; j < rec->n_out; j++)
        if (rec->outs[j].t && !rec->outs[j].bf16 &&
            remat_version(rec->outs[j].t) != rec->outs[j].version)
            return true;
    return false;
}

/* SAVE_BF16 records: when the forward ends (the function has used every output), their
 * eligible f32 tensors become bf16 copies, one at a time, each f32 storage freed unless
 * something outside the region holds it. Which tensors convert is decided first, so that
 * converting one does not make another (that shared its storage) look alone. A record
 * whose output was modified in place stays f32: the recomputation reports it
 * (REMAT_EVERSION), as for SAVE. */
static void compress_cached(sac_region *r) {
    for (int i = 0; i < r->n_recs && !r->err; i++) {
        sac_rec *rec = &r->recs[i];
        if (rec->state != REC_CACHED || !rec->bf16 || rec->offload || rec_mutated(rec)) continue;
        for (int j = 0; j < rec->n_out; j++) rec->outs[j].bf16 = bf16_eligible(rec, rec->outs[j].t);
        for (int k = 0; k < rec->n_saves; k++)
            rec->saves[k].bf16 =
                rec->saves[k].kind == SAVE_OWN && bf16_eligible(rec, rec->saves[k].t);
        int rc = REMAT_OK;
        for (int j = 0; j < rec->n_out && !rc; j++) {
            sac_out_rec *o = &rec->outs[j];
            if (!o->bf16) continue;
            o->bf16 = false; /* set again once converted */
            rc = convert_bf16(&o->t, &o->bf16, true);
            o->key = NULL; /* no tag can name it any more (the forward has ended) */
        }
        for (int k = 0; k < rec->n_saves && !rc; k++) {
            sac_save_rec *s = &rec->saves[k];
            if (!s->bf16) continue;
            s->bf16 = false;
            rc = convert_bf16(&s->t, &s->bf16, true);
        }
        if (rc) {
            /* what was not converted stays f32 (its flag is clear): the cache is intact */
            for (int j = 0; j < rec->n_out; j++)
                if (rec->outs[j].bf16 && rec->outs[j].t->dtype != REMAT_BF16)
                    rec->outs[j].bf16 = false;
            for (int k = 0; k < rec->n_saves; k++)
                if (rec->saves[k].bf16 && rec->saves[k].t->dtype != REMAT_BF16)
                    rec->saves[k].bf16 = false;
            defer(r, rc,
                  "remat_checkpoint (selective): could not store the output of %s as bf16: %s",
                  rec->op, remat_last_error());
        }
        remat_sac_stats *st = r->stats;
        st->bytes_cached -= rec->bytes;
        rec->bytes = rec_bytes(rec);
        st->bytes_cached += rec->bytes;
        for (int j = 0; j < rec->n_out; j++) rec->compressed |= rec->outs[j].bf16;
        for (int k = 0; k < rec->n_saves; k++) rec->compressed |= rec->saves[k].bf16;
        if (rec->compressed) st->ops_bf16++;
    }
}

static remat_status ctx_forward_exit(void *state, remat_status status) {
    sac_region *r = state;
    release_dead_pending(r, true);
    if (status == REMAT_OK) compress_cached(r);
    r->forward_done = true;
    return leave(r, status);
}

static remat_status ctx_recompute_enter(void *state) {
    enter(state, MODE_RECOMPUTE);
    ((sac_region *)state)->keep = rm_backward_creates_graph();
    return REMAT_OK;
}

static void ctx_recompute_attach(void *state, const remat_recomputation *recomp) {
    ((sac_region *)state)->recomp = recomp;
}

static remat_status ctx_recompute_exit(void *state, remat_status status) {
    sac_region *r = state;
    /* Entries this recomputation did not reach (it stopped early) can never
     * be served: any later recomputation fails at the first entry this one
     * consumed ("backward an extra time"), which comes before them. */
    if (r->consumed_any)
        for (int i = 0; i < r->n_recs; i++)
            if (r->recs[i].state == REC_CACHED) {
                rec_release(&r->recs[i]);
                r->recs[i].state = REC_DROPPED;
            }
    return leave(r, status);
}

static void ctx_destroy(void *state) {
    sac_region *r = state;
    if (!r) return;
    for (int i = 0; i < r->n_recs; i++) rec_free(&r->recs[i]);
    free(r->recs);
    free(r->pending);
    remat_policy_release(r->policy);
    free(r);
}

remat_status remat_create_selective_checkpoint_contexts(remat_checkpoint_contexts *pair,
                                                        remat_policy *policy,
                                                        bool allow_cache_entry_mutation,
                                                        remat_sac_stats *stats) {
    const char *call = "remat_create_selective_checkpoint_contexts";
    if (!pair) return rm_err(REMAT_EINVAL, "%s: pair must not be NULL", call);
    memset(pair, 0, sizeof *pair);
    if (!policy)
        return rm_err(REMAT_EINVAL,
                      "%s: policy must not be NULL (make one with "
                      "remat_policy_from_fn, remat_policy_from_ops or a preset)",
                      call);
    sac_region *r = calloc(1, sizeof *r);
    if (!r) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    r->policy = remat_policy_retain(policy);
    r->allow_mutation = allow_cache_entry_mutation;
    r->stats = stats ? stats : &r->own_stats;
    r->cur = -1;
    *pair = (remat_checkpoint_contexts){.forward_enter = ctx_forward_enter,
                                        .forward_exit = ctx_forward_exit,
                                        .recompute_enter = ctx_recompute_enter,
                                        .recompute_exit = ctx_recompute_exit,
                                        .destroy = ctx_destroy,
                                        .state = r,
                                        .recompute_attach = ctx_recompute_attach};
    return REMAT_OK;
}

remat_status remat_sac_context_fn(void *config, remat_checkpoint_contexts *pair) {
    const remat_sac_config *c = config;
    if (!c)
        return rm_err(REMAT_EINVAL, "remat_sac_context_fn: context_fn_data must point to a "
                                    "remat_sac_config, got NULL");
    if (!c->policy)
        return rm_err(REMAT_EINVAL, "remat_sac_context_fn: the remat_sac_config has no policy");
    return remat_create_selective_checkpoint_contexts(pair, c->policy,
                                                      c->allow_cache_entry_mutation, c->stats);
}

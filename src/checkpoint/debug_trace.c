/* src/checkpoint/debug_trace.c — checkpoint debug mode (PyTorch: debug=True,
 * _get_debug_context_and_cb): the ops run in the original forward and in
 * the recomputation, each with its call site, and the report that a
 * determinism error shows.
 *
 * Ops are seen through the op observer (rm_set_op_observer): every public
 * op announces itself with rm_op_enter. The call site is a raw backtrace
 * (glibc's backtrace()) taken at that moment and symbolised only when a
 * report is built, so debug mode costs one backtrace per op. Function names
 * appear for symbols in the dynamic symbol table (link executables with
 * -rdynamic); otherwise "binary(+0xoffset)", which addr2line resolves to
 * file:line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GLIBC__)
#include <execinfo.h>
#define CK_HAVE_BACKTRACE 1
#else
#define CK_HAVE_BACKTRACE 0
#endif

#include "ck.h"
#include "io/text.h"

void ck_trace_reset(ck_trace *t) {
    t->n = 0;
    t->overflow = false;
}

void ck_trace_free(ck_trace *t) {
    free(t->e);
    t->e = NULL;
    t->n = t->cap = 0;
}

static void observe(void *ud, const char *op) {
    ck_observe *o = ud;
    if (o->prev) o->prev(o->prev_ud, op);
    if (o->mute && *o->mute) return;
    ck_trace *t = o->trace;
    ck_trace_ent *ne = rm_grow(t->e, &t->cap, t->n, 64, sizeof *ne);
    if (!ne) {
        t->overflow = true;
        return;
    }
    t->e = ne;
    ck_trace_ent *e = &t->e[t->n++];
    snprintf(e->op, sizeof e->op, "%s", op ? op : "?");
    e->n_frames = 0;
#if CK_HAVE_BACKTRACE
    /* frames: observe, rm_op_enter, then the op and its callers */
    void *buf[CK_TRACE_DEPTH + 2];
    int n = backtrace(buf, CK_TRACE_DEPTH + 2);
    for (int i = 2; i < n; i++) e->frames[e->n_frames++] = buf[i];
#endif
}

void ck_observe_begin(ck_observe *o, ck_trace *trace, const bool *mute) {
    o->trace = trace;
    o->mute = mute;
    rm_set_op_observer(observe, o, &o->prev, &o->prev_ud);
}

void ck_observe_end(ck_observe *o) { rm_set_op_observer(o->prev, o->prev_ud, NULL, NULL); }

/* ---- report -------------------------------------------------------------------------- */
static RM_TLS char *tls_report;

const char *remat_checkpoint_debug_report(void) { return tls_report ? tls_report : ""; }

static void sites(rm_text *b, const char *label, const ck_trace *t) {
    rm_text_printf(
        b,
        "\n+------------------------------------------------------------------------------+\n"
        "| Call sites of the ops that ran in the %-39s|\n"
        "+------------------------------------------------------------------------------+\n",
        label);
    for (int i = 0; i < t->n; i++) {
        const ck_trace_ent *e = &t->e[i];
        rm_text_printf(b, "%s   (%d of %d in %s)\n", e->op, i + 1, t->n, label);
#if CK_HAVE_BACKTRACE
        char **sym = e->n_frames ? backtrace_symbols(e->frames, e->n_frames) : NULL;
        /* When symbols are known (-rdynamic), show the caller's frames only:
         * after the op's own frames (remat_*, rm_*), up to the checkpoint
         * machinery (ck_call_fn). */
        int from = 0, to = e->n_frames;
        if (sym) {
            for (int k = 0; k < e->n_frames && k < 4; k++)
                if (strstr(sym[k], "(remat_") || strstr(sym[k], "(rm_")) from = k + 1;
            for (int k = from; k < e->n_frames; k++)
                if (strstr(sym[k], "(ck_call_fn")) {
                    to = k;
                    break;
                }
            if (from >= to) from = 0;
        }
        for (int k = from; k < to; k++) {
            if (sym) rm_text_printf(b, "    at %s\n", sym[k]);
            else rm_text_printf(b, "    at %p\n", e->frames[k]);
        }
        free(sym);
#else
        rm_text_printf(b, "    (no backtraces on this platform)\n");
#endif
    }
    if (t->overflow) rm_text_printf(b, "(trace incomplete: out of memory)\n");
}

remat_status ck_debug_error(remat_status status, const char *err, const ck_trace *fwd,
                            const ck_trace *rec) {
    rm_text b = {.grow = true};
    rm_text_printf(
        &b,
        "%s\n\n"
        "remat_checkpoint debug report: an error happened while unpacking tensors; showing "
        "the ops of the latest computation because debug is on (debug = REMAT_OPT_TRUE or "
        "remat_set_checkpoint_debug(REMAT_OPT_TRUE)).\n"
        "ERROR: detected non-determinism while running activation checkpointing. You are "
        "seeing this error because you passed debug=true to checkpoint and the tensors saved "
        "during the original forward differ from those saved during recomputation. This "
        "can happen if different ops ran in the original forward and in the recomputation: "
        "compare the two op lists below to see where they differ, then look up the call "
        "site of each op (printed further down in execution order). With early stop on, "
        "the recomputation ends at the last saved tensor, so its list may be shorter.\n\n"
        "Ops executed during the original forward (left) and during recomputation (right):\n",
        err);
    int n = fwd->n > rec->n ? fwd->n : rec->n;
    rm_text_printf(&b, "  %4s  %-32s  %-32s\n", "#", "original forward", "recomputation");
    for (int i = 0; i < n; i++) {
        const char *a = i < fwd->n ? fwd->e[i].op : "-";
        const char *r = i < rec->n ? rec->e[i].op : "-";
        bool diff = i >= fwd->n || i >= rec->n || strcmp(a, r) != 0;
        rm_text_printf(&b, "  %4d  %-32s  %-32s%s\n", i + 1, a, r, diff ? "  <-- differs" : "");
    }
    sites(&b, "original forward", fwd);
    sites(&b, "recomputation", rec);
    if (b.oom || !b.s) {
        free(b.s);
        return rm_err(status, "%s\n(remat_checkpoint debug report: out of memory)", err);
    }
    free(tls_report);
    tls_report = b.s;
    /* The error message has a fixed capacity; the report may not fit. */
    const size_t fit = 15000; /* below the 16 KiB message capacity */
    if (b.len <= fit) return rm_err(status, "%s", b.s);
    return rm_err(status,
                  "%.*s\n... (report truncated: the full text is in "
                  "remat_checkpoint_debug_report())",
                  (int)fit, b.s);
}

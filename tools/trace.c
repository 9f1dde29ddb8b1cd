/* tools/trace.c — recording allocator events of a step (see trace.h). */
#include "trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models.h"
#include "remat/remat.h"

const char *phase_name(phase p) {
    switch (p) {
    case PH_FORWARD: return "forward";
    case PH_BACKWARD: return "backward";
    case PH_RECOMPUTE: return "recompute";
    case PH_OPTIMIZER: return "optimizer";
    default: return "other";
    }
}

/* capacity trace_begin reserves: a 12-layer GPT step makes ~850 memory events
 * (~1,200 checkpointed per block), so growth past these is rare */
#define TRACE_RESERVE_EVENTS 16384
#define TRACE_RESERVE_SPANS 1024

static phase current_phase(const trace *tr) {
    if (tr->recompute_depth > 0) return PH_RECOMPUTE;
    if (remat_in_backward()) return PH_BACKWARD;
    return tr->top;
}

static void push_span(trace *tr, char ph, phase p, const char *name) {
    if (tr->ns == tr->caps) {
        size_t cap = tr->caps ? tr->caps * 2 : 256;
        span_event *sp = realloc(tr->sp, cap * sizeof *sp);
        if (!sp) {
            tr->oom = true;
            return;
        }
        tr->sp = sp;
        tr->caps = cap;
    }
    span_event *e = &tr->sp[tr->ns++];
    e->t = util_now() - tr->t0;
    e->ph = ph;
    e->phase = (uint8_t)p;
    snprintf(e->name, sizeof e->name, "%s", name);
}

static remat_device g_device; /* whose allocations are traced: cpu unless trace_device */

void trace_device(remat_device device) { g_device = device; }

static void on_alloc(void *user_data, remat_device device, int64_t delta, size_t current) {
    trace *tr = user_data;
    if (device.type != g_device.type || device.index != g_device.index) return;
    /* RSS is read outside the lock: it is a syscall */
    size_t rss = tr->sample_rss ? util_current_rss_bytes() : 0;
    pthread_mutex_lock(&tr->lock);
    if (tr->n == tr->cap) {
        size_t cap = tr->cap ? tr->cap * 2 : 4096;
        mem_event *ev = realloc(tr->ev, cap * sizeof *ev);
        if (!ev) {
            tr->oom = true;
            pthread_mutex_unlock(&tr->lock);
            return;
        }
        tr->ev = ev;
        tr->cap = cap;
    }
    mem_event *e = &tr->ev[tr->n++];
    e->t = util_now() - tr->t0;
    e->delta = delta;
    e->current = current;
    e->rss = rss;
    e->phase = (uint8_t)current_phase(tr);
    if (current > tr->peak_current) tr->peak_current = current;
    if (rss > tr->peak_rss) tr->peak_rss = rss;
    pthread_mutex_unlock(&tr->lock);
}

static void on_block(void *user_data, int layer, bool enter, bool recompute) {
    trace *tr = user_data;
    char name[40];
    snprintf(name, sizeof name, "%sblock %d", recompute ? "recompute " : "", layer);
    pthread_mutex_lock(&tr->lock);
    if (enter) {
        if (recompute) {
            tr->recompute_depth++;
            tr->n_recomputed_blocks++;
        }
        push_span(tr, 'B', recompute ? PH_RECOMPUTE : current_phase(tr), name);
    } else {
        push_span(tr, 'E', recompute ? PH_RECOMPUTE : current_phase(tr), name);
        if (recompute) tr->recompute_depth--;
    }
    pthread_mutex_unlock(&tr->lock);
}

void trace_begin(trace *tr, bool sample_rss) {
    memset(tr, 0, sizeof *tr);
    pthread_mutex_init(&tr->lock, NULL);
    tr->sample_rss = sample_rss;
    tr->top = PH_OTHER;
    tr->start_current = tr->peak_current = remat_cpu_current_bytes();
    /* room for a typical step's events, taken before the heap peak starts:
     * the timeline's own growth would otherwise count as the step's */
    tr->ev = malloc(TRACE_RESERVE_EVENTS * sizeof *tr->ev);
    tr->cap = tr->ev ? TRACE_RESERVE_EVENTS : 0;
    tr->sp = malloc(TRACE_RESERVE_SPANS * sizeof *tr->sp);
    tr->caps = tr->sp ? TRACE_RESERVE_SPANS : 0;
    if (sample_rss) {
        tr->hwm = util_reset_rss_hwm();
        tr->start_rss = tr->peak_rss = util_current_rss_bytes();
        tr->heap = util_heap_peak_reset(&tr->start_heap);
    }
    tr->t0 = util_now();
    remat_set_alloc_observer(on_alloc, tr);
    models_set_block_hook(on_block, tr);
}

void trace_end(trace *tr) {
    remat_set_alloc_observer(NULL, NULL);
    models_set_block_hook(NULL, NULL);
    if (tr->sample_rss) {
        size_t rss = util_current_rss_bytes();
        if (rss > tr->peak_rss) tr->peak_rss = rss;
        /* a peak between two allocator events (pages touched, nothing
         * allocated) is in the kernel's high-water mark */
        long hwm_kb = tr->hwm ? util_proc_status_kb("VmHWM") : -1;
        if (hwm_kb > 0 && (size_t)hwm_kb * 1024 > tr->peak_rss) tr->peak_rss = (size_t)hwm_kb * 1024;
        if (tr->heap) {
            int64_t pk = util_heap_peak_bytes();
            tr->heap_growth = pk > tr->start_heap ? (size_t)(pk - tr->start_heap) : 0;
        }
    }
    tr->t_end = util_now() - tr->t0;
}

void trace_free(trace *tr) {
    free(tr->ev);
    free(tr->sp);
    pthread_mutex_destroy(&tr->lock);
    memset(tr, 0, sizeof *tr);
}

void trace_phase(trace *tr, phase p, bool begin) {
    pthread_mutex_lock(&tr->lock);
    if (begin) {
        tr->top = p;
        push_span(tr, 'B', p, phase_name(p));
    } else {
        push_span(tr, 'E', p, phase_name(p));
        tr->top = PH_OTHER;
    }
    pthread_mutex_unlock(&tr->lock);
}

/* ---- Chrome trace ------------------------------------------------------------------- */
void trace_chrome_events(const trace *tr, util_str *out, int pid, const char *label, bool *first) {
#define SEP() util_str_printf(out, "%s\n", *first ? "" : ","), *first = false
    SEP();
    util_str_printf(out, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,"
                         "\"args\":{\"name\":\"",
                    pid);
    util_str_json_escaped(out, label);
    util_str_printf(out, "\"}}");
    SEP();
    util_str_printf(out, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,"
                         "\"args\":{\"name\":\"step\"}}",
                    pid);
    /* counters start at the trace's baseline so the plot starts where the step did */
    SEP();
    util_str_printf(out,
                    "{\"name\":\"memory\",\"ph\":\"C\",\"ts\":0,\"pid\":%d,\"tid\":1,"
                    "\"args\":{\"allocated_bytes\":%zu}}",
                    pid, tr->start_current);
    size_t i = 0, j = 0;
    /* merge the two time-ordered streams */
    while (i < tr->n || j < tr->ns) {
        bool take_span = j < tr->ns && (i >= tr->n || tr->sp[j].t <= tr->ev[i].t);
        SEP();
        if (take_span) {
            const span_event *e = &tr->sp[j++];
            util_str_printf(out, "{\"name\":\"");
            util_str_json_escaped(out, e->name);
            util_str_printf(out,
                            "\",\"cat\":\"%s\",\"ph\":\"%c\",\"ts\":%.3f,\"pid\":%d,\"tid\":1}",
                            phase_name((phase)e->phase), e->ph, e->t * 1e6, pid);
        } else {
            const mem_event *e = &tr->ev[i++];
            util_str_printf(out,
                            "{\"name\":\"memory\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%d,\"tid\":1,"
                            "\"args\":{\"allocated_bytes\":%zu",
                            e->t * 1e6, pid, e->current);
            if (tr->sample_rss) util_str_printf(out, ",\"rss_bytes\":%zu", e->rss);
            util_str_printf(out, "}}");
        }
    }
#undef SEP
}

bool trace_write_chrome(const char *path, int n, const trace *const *traces,
                        const char *const *labels) {
    util_str out = {0};
    bool first = true;
    util_str_printf(&out, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
    for (int k = 0; k < n; k++) trace_chrome_events(traces[k], &out, k + 1, labels[k], &first);
    util_str_printf(&out, "\n]}\n");
    bool ok = !out.oom;
    FILE *f = ok ? fopen(path, "w") : NULL;
    if (f) {
        ok = fwrite(out.s, 1, out.len, f) == out.len;
        ok = (fclose(f) == 0) && ok;
    } else {
        ok = false;
    }
    util_str_free(&out);
    return ok;
}

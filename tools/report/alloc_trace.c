/* tools/report/alloc_trace.c — recording allocator events of a step (see trace.h). */
#include "alloc_trace.h"

#include "io/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat/remat.h"
#include "train/models.h"

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

/* Whether the traced device has a caching pool whose reserved bytes can be read. */
static bool device_has_reserved(void) {
    return g_device.type != REMAT_CPU && g_device.type == remat_device_type_id("cuda");
}

static void on_alloc(void *user_data, remat_device device, int64_t delta, size_t current) {
    trace *tr = user_data;
    if (device.type != g_device.type || device.index != g_device.index) return;
    /* RSS is read outside the lock: it is a syscall */
    size_t rss = tr->sample_rss ? util_current_rss_bytes() : 0;
    /* the pool's own lock is not held while the registry calls its observer */
    size_t reserved = tr->has_reserved ? remat_cuda_memory_reserved(device.index) : 0;
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
    e->reserved = reserved;
    if (reserved > tr->peak_reserved) tr->peak_reserved = reserved;
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
    /* the traced device's bytes (cpu unless --device), not always the cpu's */
    tr->start_current = tr->peak_current = util_current_bytes(g_device);
    tr->has_reserved = device_has_reserved();
    if (tr->has_reserved)
        tr->start_reserved = tr->peak_reserved = remat_cuda_memory_reserved(g_device.index);
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
        if (hwm_kb > 0 && (size_t)hwm_kb * 1024 > tr->peak_rss)
            tr->peak_rss = (size_t)hwm_kb * 1024;
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
/* One event: {"name":..., "ph":..., "ts":..., "pid":..., "tid":1, ...} left open. */
static void event(json *j, const char *name, const char *ph, double ts_us, int pid) {
    json_object(j, NULL);
    json_str(j, "name", name);
    json_str(j, "ph", ph);
    if (ts_us >= 0) json_fixed(j, "ts", ts_us, 3);
    json_int(j, "pid", pid);
    json_int(j, "tid", 1);
}

static void memory_event(json *j, double ts_us, int pid, const trace *tr, size_t current,
                         size_t rss, size_t reserved) {
    event(j, "memory", "C", ts_us, pid);
    json_object(j, "args");
    json_uint(j, "allocated_bytes", current);
    if (tr->sample_rss) json_uint(j, "rss_bytes", rss);
    if (tr->has_reserved) json_uint(j, "reserved_bytes", reserved);
    json_end(j);
    json_end(j);
}

void trace_chrome_events(const trace *tr, json *j, int pid, const char *label) {
    event(j, "process_name", "M", -1, pid);
    json_object(j, "args");
    json_str(j, "name", label);
    json_end(j);
    json_end(j);
    event(j, "thread_name", "M", -1, pid);
    json_object(j, "args");
    json_str(j, "name", "step");
    json_end(j);
    json_end(j);
    /* counters start at the trace's baseline so the plot starts where the step did */
    memory_event(j, 0, pid, tr, tr->start_current, tr->start_rss, tr->start_reserved);
    size_t i = 0, k = 0;
    /* merge the two time-ordered streams */
    while (i < tr->n || k < tr->ns) {
        bool take_span = k < tr->ns && (i >= tr->n || tr->sp[k].t <= tr->ev[i].t);
        if (take_span) {
            const span_event *e = &tr->sp[k++];
            char ph[2] = {e->ph, '\0'};
            json_object(j, NULL);
            json_str(j, "name", e->name);
            json_str(j, "cat", phase_name((phase)e->phase));
            json_str(j, "ph", ph);
            json_fixed(j, "ts", e->t * 1e6, 3);
            json_int(j, "pid", pid);
            json_int(j, "tid", 1);
            json_end(j);
        } else {
            const mem_event *e = &tr->ev[i++];
            memory_event(j, e->t * 1e6, pid, tr, e->current, e->rss, e->reserved);
        }
    }
}

bool trace_write_chrome(const char *path, int n, const trace *const *traces,
                        const char *const *labels) {
    util_str out = {0};
    json j;
    json_start(&j, &out);
    json_object(&j, NULL);
    json_str(&j, "displayTimeUnit", "ms");
    json_array(&j, "traceEvents");
    for (int k = 0; k < n; k++) trace_chrome_events(traces[k], &j, k + 1, labels[k]);
    json_end(&j);
    json_end(&j);
    util_str_printf(&out, "\n");
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

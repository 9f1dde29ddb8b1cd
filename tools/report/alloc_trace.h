/*
 * tools/report/alloc_trace.h — the memory timeline of one step.
 *
 * While a trace is active it receives every allocator event
 * (remat_set_alloc_observer) with a timestamp, the allocator's current
 * bytes, optionally the process's current RSS, and the phase the step is
 * in: forward, backward, recompute (a block running while
 * remat_in_backward() is true — a checkpoint recomputing it) or optimizer.
 * Phases and blocks are also recorded as begin/end spans.
 *
 * Export: Chrome-trace JSON ("C" counter events for memory, "B"/"E" for
 * phases and blocks; chrome://tracing or ui.perfetto.dev) and SVG (svg.h).
 */
#ifndef REMAT_TOOLS_TRACE_H
#define REMAT_TOOLS_TRACE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cli/util.h"
#include "io/json.h"

typedef enum phase { PH_OTHER = 0, PH_FORWARD, PH_BACKWARD, PH_RECOMPUTE, PH_OPTIMIZER } phase;
const char *phase_name(phase p);

typedef struct mem_event {
    double t;        /* seconds since trace_begin */
    int64_t delta;   /* bytes, + alloc / - free */
    size_t current;  /* allocator bytes after the event */
    size_t rss;      /* process RSS at the event (0 when not sampled) */
    size_t reserved; /* the traced device's reserved bytes (cuda: its caching pool's
                        segments); 0 for cpu */
    uint8_t phase;
} mem_event;

typedef struct span_event {
    double t;
    char ph;       /* 'B' or 'E' */
    uint8_t phase; /* phase the span stands for */
    char name[40];
} span_event;

typedef struct trace {
    pthread_mutex_t lock;
    double t0, t_end;
    bool sample_rss;
    mem_event *ev;
    size_t n, cap;
    span_event *sp;
    size_t ns, caps;
    phase top;                            /* current top-level phase */
    int recompute_depth;                  /* > 0 while a block is being recomputed */
    size_t start_current, peak_current;   /* allocator bytes at start, max seen */
    size_t start_rss, peak_rss;           /* RSS at start, max seen (sampled, and the
                                           kernel's high-water mark where available) */
    bool has_reserved;                    /* the device reports reserved bytes (cuda) */
    size_t start_reserved, peak_reserved; /* its reserved bytes at start, max seen */
    bool hwm;                             /* the high-water mark was reset at start */
    bool heap;                            /* heap counters preloaded (util_heap_peak_reset) */
    int64_t start_heap;                   /* heap bytes live at start */
    size_t heap_growth;                   /* heap peak over the step - start_heap */
    int64_t n_recomputed_blocks;
    bool oom;
} trace;

/* Starts recording (installs the allocator observer and the block hook).
 * One trace at a time. */
void trace_begin(trace *tr, bool sample_rss);
/* The device whose allocations every trace records (cpu by default; the program's
 * --device). */
void trace_device(remat_device device);
/* Stops recording (removes the observers); the data stays until trace_free. */
void trace_end(trace *tr);
void trace_free(trace *tr);
/* Marks the start / end of a top-level phase (forward, backward, optimizer). */
void trace_phase(trace *tr, phase p, bool begin);

/* Appends the trace's events to the open Chrome-trace "traceEvents" array
 * of j, as process `pid` named `label`. */
void trace_chrome_events(const trace *tr, json *j, int pid, const char *label);
/* Writes a whole Chrome-trace file of n traces. Returns false on I/O error. */
bool trace_write_chrome(const char *path, int n, const trace *const *traces,
                        const char *const *labels);

#endif /* REMAT_TOOLS_TRACE_H */

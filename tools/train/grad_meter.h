/*
 * tools/train/grad_meter.h — the bytes of parameter gradients live at the
 * allocator's peak, exactly, so that `remat bench` can report activation
 * bytes (step bytes minus these; docs/autocast.md "Memory").
 *
 * While a meter runs it sees every allocation and free of its device with
 * its address (remat_set_alloc_event_observer) and numbers the events. The
 * allocator's peak is the event at which its current bytes first reached
 * their maximum since grad_meter_begin (the moment the allocator's own
 * peak counter was last raised). A buffer is a parameter gradient when it
 * is, at any time during the metered span, a gradient the engine holds for
 * one of the parameters (remat_set_leaf_grad_observer: each contribution as
 * a backward node hands it over, its dtype-converted copy, the running sum)
 * or the parameter's .grad at grad_meter_end. So a dW that linear's
 * backward has made but not yet returned counts as a gradient at a peak
 * inside that backward, and so does the head's contribution to a tied
 * embedding, waiting in the engine for the embedding's. Buffers that
 * existed before the meter began are not counted (they are not part of
 * what the step adds). Exact when remat allocates from one thread (as the
 * program does: kernels' threads take no tensor memory).
 */
#ifndef REMAT_TOOLS_GRAD_METER_H
#define REMAT_TOOLS_GRAD_METER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "remat/remat.h"

typedef struct grad_alloc {
    const char *ptr;
    size_t bytes;
    size_t born, died; /* event numbers; died = SIZE_MAX while live */
    bool grad;         /* a parameter's gradient at some point */
} grad_alloc;

typedef struct grad_meter {
    pthread_mutex_t lock;
    remat_device device;
    grad_alloc *a; /* the metered span's allocations, in order */
    size_t n, cap;
    size_t events;               /* events seen */
    size_t peak_event;           /* the event that set the peak (0: none above the start) */
    size_t start_bytes;          /* the device's current bytes at grad_meter_begin */
    size_t peak_bytes;           /* the maximum of its current bytes since then */
    bool oom;                    /* the meter could not record an allocation: figures unknown */
    size_t grad_at_peak;         /* grad_meter_end: gradient bytes live at peak_event */
    remat_tensor *const *params; /* borrowed */
    int n_params;
} grad_meter;

/* Starts metering `device` for the n parameters (borrowed until
 * grad_meter_end); installs the allocator's event observer and the
 * engine's leaf-gradient observer (one meter at a time). */
void grad_meter_begin(grad_meter *m, remat_device device, remat_tensor *const *params, int n);
/* Stops metering, marks the parameters' .grad buffers and sets
 * m->grad_at_peak. m->oom: the figure is unknown. */
void grad_meter_end(grad_meter *m);
/* Frees the meter's records (NULL-safe); m may be begun again. */
void grad_meter_free(grad_meter *m);

#endif /* REMAT_TOOLS_GRAD_METER_H */

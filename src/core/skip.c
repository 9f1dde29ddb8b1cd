/* src/core/skip.c — skip mode (src/core/core.h): while it is on, ops make
 * data-less outputs and run no kernels. Per thread. */
#include "core.h"

static RM_TLS bool tls_skip;

bool rm_skip_mode(void) { return tls_skip; }

bool rm_set_skip_mode(bool on) {
    bool prev = tls_skip;
    tls_skip = on;
    return prev;
}

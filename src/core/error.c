/* src/core/error.c — status names, the thread-local error message, warnings. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define RM_MSG_CAP 16384

static RM_TLS char tls_msg[RM_MSG_CAP];
static RM_TLS int tls_status; /* status the message was set with (0: none) */

/* Name and text of every status, indexed by its value; generated from
 * REMAT_STATUS_MAP (remat/error.h), the one list of codes. */
static const struct {
    const char *name;
    const char *text;
} k_status[] = {
#define STATUS_ENTRY(name, value, text) [value] = {"REMAT_" #name, text},
    REMAT_STATUS_MAP(STATUS_ENTRY)
#undef STATUS_ENTRY
};
#define N_STATUS ((int)(sizeof k_status / sizeof k_status[0]))

/* The list's values must be exactly 0..N-1: a gap would leave a NULL name
 * in the table, a duplicate would overwrite an entry. */
#define STATUS_COUNT(name, value, text) +1
_Static_assert(N_STATUS == 0 REMAT_STATUS_MAP(STATUS_COUNT),
               "REMAT_STATUS_MAP values must be distinct and run from 0 without gaps");
#undef STATUS_COUNT

const char *remat_status_name(remat_status status) {
    if (status < 0 || status >= N_STATUS) return "REMAT_E?";
    return k_status[status].name;
}

const char *remat_err_name(remat_status status) { return remat_status_name(status); }

const char *remat_strerror(remat_status status) {
    if (status < 0 || status >= N_STATUS) return "unknown status";
    return k_status[status].text;
}

const char *remat_last_error(void) { return tls_msg; }

void remat_clear_error(void) {
    tls_msg[0] = '\0';
    tls_status = REMAT_OK;
}

remat_status rm_last_status(void) { return tls_msg[0] ? tls_status : REMAT_OK; }

static remat_status vset(remat_status status, const char *fmt, va_list ap) {
    char tmp[RM_MSG_CAP];
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    memcpy(tls_msg, tmp, sizeof tmp);
    tls_status = status;
    return status;
}

remat_status remat_set_error(remat_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vset(status, fmt, ap);
    va_end(ap);
    return status;
}

remat_status rm_err_prefix(remat_status status, const char *call) {
    char tmp[RM_MSG_CAP];
    size_t k = strlen(call);
    if (k > RM_MSG_CAP / 4) k = RM_MSG_CAP / 4;
    memcpy(tmp, call, k);
    tmp[k++] = ':';
    tmp[k++] = ' ';
    size_t m = strnlen(tls_msg, RM_MSG_CAP - k - 1);
    memcpy(tmp + k, tls_msg, m);
    tmp[k + m] = '\0';
    memcpy(tls_msg, tmp, sizeof tmp);
    return status;
}

/* ---- logging ------------------------------------------------------------------- */
static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static remat_log_fn g_log_fn;
static void *g_log_ud;
/* Hashes of warnings already printed by the default logger. */
static uint64_t g_seen[1024];
static int g_n_seen;

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

void remat_set_log_callback(remat_log_fn fn, void *user_data) {
    pthread_mutex_lock(&g_log_lock);
    g_log_fn = fn;
    g_log_ud = user_data;
    pthread_mutex_unlock(&g_log_lock);
}

static void vwarn(const char *fmt, va_list ap) {
    char msg[RM_MSG_CAP];
    vsnprintf(msg, sizeof msg, fmt, ap);
    pthread_mutex_lock(&g_log_lock);
    remat_log_fn fn = g_log_fn;
    void *ud = g_log_ud;
    if (!fn) {
        uint64_t h = fnv1a(msg);
        bool seen = false;
        for (int i = 0; i < g_n_seen; i++)
            if (g_seen[i] == h) seen = true;
        if (!seen) {
            if (g_n_seen < (int)(sizeof g_seen / sizeof g_seen[0])) g_seen[g_n_seen++] = h;
            fprintf(stderr, "remat warning: %s\n", msg);
        }
        pthread_mutex_unlock(&g_log_lock);
        return;
    }
    pthread_mutex_unlock(&g_log_lock);
    fn(ud, REMAT_LOG_WARN, msg);
}

void remat_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vwarn(fmt, ap);
    va_end(ap);
}

void rm_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vwarn(fmt, ap);
    va_end(ap);
}

/*
 * remat/error.h — status codes, the thread-local error message, warnings.
 *
 * Every fallible remat call returns a remat_status. REMAT_OK (0) means
 * success; anything else is an error, and remat_last_error() then holds a
 * message in the terms of the failing call ("remat_add: cannot broadcast
 * a [2,3] with b [4]"). The library never aborts or exits on any input.
 *
 * Warnings (things that are allowed but probably not what you want) go to a
 * replaceable log callback. The default callback prints each distinct
 * warning once to stderr.
 */
#ifndef REMAT_ERROR_H
#define REMAT_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. Stable numbers; name with remat_err_name, describe with
 * remat_strerror. */
typedef enum remat_status {
    REMAT_OK = 0,
    REMAT_EINVAL = 1,       /* invalid argument (NULL, out-of-range dim, bad option) */
    REMAT_ESHAPE = 2,       /* shapes do not fit together */
    REMAT_EDTYPE = 3,       /* dtypes do not fit together or are unsupported */
    REMAT_EDEVICE = 4,      /* tensors on different devices / unknown device */
    REMAT_ENOMEM = 5,       /* an allocation failed */
    REMAT_ESTATE = 6,       /* call not valid in the current state (graph freed, ...) */
    REMAT_EVERSION = 7,     /* a saved tensor was modified in place */
    REMAT_ENOGRAD = 8,      /* gradient requested of something that does not require grad */
    REMAT_EDETERMINISM = 9, /* recomputation differed from the original forward */
    REMAT_EUNSUPPORTED = 10,/* feature not supported (combination of options, dtype) */
    REMAT_EIO = 11,         /* file could not be read or written */
    REMAT_EFORMAT = 12,     /* file or string has the wrong format */
    REMAT_ECALLBACK = 13    /* a user callback reported failure */
} remat_status;

/* Short constant-like name of a status, e.g. "REMAT_ESHAPE". Never NULL. */
const char *remat_err_name(int status);

/* One-line generic description of a status. Never NULL. */
const char *remat_strerror(int status);

/* The message of the last error raised on this thread (empty string if
 * none). Valid until the next remat call on this thread. Never NULL. */
const char *remat_last_error(void);

/* Clears this thread's last error message. */
void remat_clear_error(void);

/* Sets this thread's last error and returns `status`; for user callbacks
 * (custom functions, checkpointed functions) that want to fail with a
 * message of their own. printf-style. */
int remat_set_error(int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Log levels for the log callback. */
typedef enum remat_log_level { REMAT_LOG_WARN = 1, REMAT_LOG_INFO = 2 } remat_log_level;

/* A log callback receives every warning (already formatted). */
typedef void (*remat_log_fn)(void *user_data, remat_log_level level, const char *msg);

/* Replaces the process-wide log callback; NULL restores the default
 * (stderr, each distinct warning printed once). Not thread-safe against
 * concurrent warnings: set it at start-up. */
void remat_set_log_callback(remat_log_fn fn, void *user_data);

/* Emits a warning through the log callback. printf-style. */
void remat_warn(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif /* REMAT_ERROR_H */

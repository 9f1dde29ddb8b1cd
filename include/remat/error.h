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

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

/* ---- status codes ---------------------------------------------------------------
 * The one list of status codes: REMAT_STATUS_MAP(XX) calls XX(NAME, value,
 * text) once per code. The enum below, remat_status_name and
 * remat_strerror are all generated from it, so a code is added in exactly
 * one place. Numbers are stable (never reused or renumbered) and run from 0
 * without gaps; text is the one-line generic description remat_strerror
 * returns. */
#define REMAT_STATUS_MAP(XX)                                                                       \
    XX(OK, 0, "success")                                                                           \
    /* invalid argument (NULL, out-of-range dim, bad option) */                                    \
    XX(EINVAL, 1, "invalid argument")                                                              \
    /* shapes do not fit together */                                                               \
    XX(ESHAPE, 2, "shape mismatch")                                                                \
    /* dtypes do not fit together or are unsupported */                                            \
    XX(EDTYPE, 3, "dtype mismatch or unsupported dtype")                                           \
    /* tensors on different devices / unknown device */                                            \
    XX(EDEVICE, 4, "device mismatch or unknown device")                                            \
    /* an allocation failed */                                                                     \
    XX(ENOMEM, 5, "out of memory")                                                                 \
    /* call not valid in the current state (graph freed, ...) */                                   \
    XX(ESTATE, 6, "call not valid in the current state")                                           \
    /* a saved tensor was modified in place */                                                     \
    XX(EVERSION, 7, "saved tensor was modified by an in-place operation")                          \
    /* gradient requested of something that does not require grad */                               \
    XX(ENOGRAD, 8, "tensor does not require grad")                                                 \
    /* recomputation differed from the original forward */                                         \
    XX(EDETERMINISM, 9, "recomputation differed from the original forward")                        \
    /* feature not supported (combination of options, dtype, device) */                            \
    XX(EUNSUPPORTED, 10, "not supported")                                                          \
    /* file could not be read or written */                                                        \
    XX(EIO, 11, "input/output error")                                                              \
    /* file or string has the wrong format */                                                      \
    XX(EFORMAT, 12, "bad format")                                                                  \
    /* a user callback reported failure */                                                         \
    XX(ECALLBACK, 13, "user callback failed")

/* The codes as constants: REMAT_OK, REMAT_EINVAL, ... */
typedef enum remat_status_code {
#define REMAT_STATUS_ENUM_(name, value, text) REMAT_##name = (value),
    REMAT_STATUS_MAP(REMAT_STATUS_ENUM_)
#undef REMAT_STATUS_ENUM_
} remat_status_code;

/* The return type of every fallible call: holds one of the REMAT_* codes
 * above (REMAT_OK = 0 on success). An int, so that functions and user
 * callbacks written with `int` stay compatible. (REMAT_STATUS_CHECK is for
 * the library's own check, scripts/check_status.sh: there it is a distinct
 * integer type, so a definition that says `int` where its declaration says
 * remat_status fails to compile.) */
#ifndef REMAT_STATUS_CHECK
typedef int remat_status;
#else
typedef long remat_status;
#endif

/* Constant-like name of a status, e.g. "REMAT_ESHAPE"; "REMAT_E?" for a
 * value that is not a code. Never NULL; static storage. */
const char *remat_status_name(remat_status status);

/* The same as remat_status_name (the older name, kept). */
const char *remat_err_name(remat_status status);

/* One-line generic description of a status ("shape mismatch"); "unknown
 * status" for a value that is not a code. Never NULL; static storage. */
const char *remat_strerror(remat_status status);

/* The message of the last error raised on this thread (empty string if
 * none). Valid until the next remat call on this thread. Never NULL. */
const char *remat_last_error(void);

/* Clears this thread's last error message. */
void remat_clear_error(void);

/* Sets this thread's last error and returns `status`; for user callbacks
 * (custom functions, checkpointed functions) that want to fail with a
 * message of their own. printf-style. */
remat_status remat_set_error(remat_status status, const char *fmt, ...)
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

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif

/* Every public header includes this one, and so the version check. */
#include "remat/version.h"

#endif /* REMAT_ERROR_H */

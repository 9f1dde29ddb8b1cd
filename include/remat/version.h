/*
 * remat/version.h — the remat a program was compiled against, and the one
 * it runs with.
 *
 * REMAT_VERSION_* are the headers' version (CMakeLists.txt reads them from
 * here: one place), remat_version_number() and remat_version_string() the
 * library's. While the major version is 0, a minor version may change the
 * ABI (struct layouts such as remat_checkpoint_options, enum values,
 * signatures); the shared library's soname carries major.minor
 * (libremat.so.0.2 for every 0.2.x), so a program linked against another
 * minor version does not load, and a program whose headers and library
 * differ that way does not link: every file that includes a remat header
 * refers to a symbol named after the headers' ABI (remat_abi_0_2), which
 * only a library of that ABI defines ("undefined reference to
 * remat_abi_0_1" says the headers are 0.1's). A program that wants a clear
 * message instead (a plugin host, bindings that load remat at run time)
 * calls REMAT_VERSION_CHECK() at start-up.
 */
#ifndef REMAT_VERSION_H
#define REMAT_VERSION_H

#include "remat/error.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

#define REMAT_VERSION_MAJOR 0
#define REMAT_VERSION_MINOR 2
#define REMAT_VERSION_PATCH 0
/* 10000 * major + 100 * minor + patch (0.2.0 is 200) */
#define REMAT_VERSION_NUMBER                                                                       \
    (REMAT_VERSION_MAJOR * 10000 + REMAT_VERSION_MINOR * 100 + REMAT_VERSION_PATCH)

/* The library's version as REMAT_VERSION_NUMBER counts it. */
int remat_version_number(void);
/* The library's version as text, "0.2.0". Static storage. */
const char *remat_version_string(void);
/* REMAT_OK when a program compiled with headers of version
 * major.minor.patch can use this library: the same major version and, while
 * it is 0, the same minor one; from 1.0 on, a minor version no newer than
 * the library's (the patch never matters). Otherwise REMAT_EUNSUPPORTED,
 * and remat_last_error() names both versions. */
remat_status remat_version_check(int major, int minor, int patch);
/* remat_version_check of the headers this file is compiled with. */
#define REMAT_VERSION_CHECK()                                                                      \
    remat_version_check(REMAT_VERSION_MAJOR, REMAT_VERSION_MINOR, REMAT_VERSION_PATCH)

/* ---- the link-time check (see above) ---- */
#define REMAT_ABI_SYMBOL_(a, b) remat_abi_##a##_##b
#define REMAT_ABI_SYMBOL(a, b) REMAT_ABI_SYMBOL_(a, b)
/* Defined by the library (src/core/version.c); never read. */
extern const int REMAT_ABI_SYMBOL(REMAT_VERSION_MAJOR, REMAT_VERSION_MINOR);
#if (defined(__GNUC__) || defined(__clang__)) && !defined(REMAT_BUILDING_LIBRARY)
/* Each file that includes this refers to the ABI symbol (kept by `used`;
 * one pointer per file, in no code path). */
__attribute__((used)) static const int *const remat_abi_ref_ =
    &REMAT_ABI_SYMBOL(REMAT_VERSION_MAJOR, REMAT_VERSION_MINOR);
#endif

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_VERSION_H */

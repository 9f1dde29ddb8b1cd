/*
 * remat/export.h — which names the shared library exports.
 *
 * libremat is compiled with hidden visibility: only what a public header
 * declares between REMAT_BEGIN_PUBLIC and REMAT_END_PUBLIC (the remat_*
 * API) is exported, so the library's internal names cannot clash with a
 * program's. tests/exports.sh checks the exported list.
 */
#ifndef REMAT_EXPORT_H
#define REMAT_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define REMAT_BEGIN_PUBLIC _Pragma("GCC visibility push(default)")
#define REMAT_END_PUBLIC _Pragma("GCC visibility pop")
#else
#define REMAT_BEGIN_PUBLIC
#define REMAT_END_PUBLIC
#endif

#endif /* REMAT_EXPORT_H */

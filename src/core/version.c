/* src/core/version.c — the library's version (remat/version.h). */
#include <stdio.h>

#include "core/core.h"
#include "remat/version.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* What every program compiled with this ABI's headers refers to. */
const int REMAT_ABI_SYMBOL(REMAT_VERSION_MAJOR, REMAT_VERSION_MINOR) = REMAT_VERSION_NUMBER;

int remat_version_number(void) { return REMAT_VERSION_NUMBER; }

const char *remat_version_string(void) {
    return STR(REMAT_VERSION_MAJOR) "." STR(REMAT_VERSION_MINOR) "." STR(REMAT_VERSION_PATCH);
}

remat_status remat_version_check(int major, int minor, int patch) {
    bool ok = major == REMAT_VERSION_MAJOR &&
              (major == 0 ? minor == REMAT_VERSION_MINOR : minor <= REMAT_VERSION_MINOR);
    if (ok) return REMAT_OK;
    return rm_err(REMAT_EUNSUPPORTED,
                  "remat_version_check: this program was compiled with the headers of remat "
                  "%d.%d.%d but runs with the library %s, whose ABI differs: rebuild it against "
                  "the installed headers (or install the library it was built for)",
                  major, minor, patch, remat_version_string());
}

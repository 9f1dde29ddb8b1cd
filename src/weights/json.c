/* src/weights/json.c — JSON in and out for the weights files: parsing with
 * cJSON after the checks cJSON does not make (UTF-8, raw control
 * characters, NULs, trailing bytes), strings written escaped, and small
 * files read whole. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "io/text.h"
#include "io/utf8.h"
#include "weights/st.h"

/* Bytes of the text that JSON does not allow raw (control characters
 * outside whitespace) or that cJSON would cut a string at (a \u0000
 * escape): the offset of the first, or n. */
static size_t bad_json_byte(const unsigned char *h, size_t n, const char **why) {
    for (size_t i = 0; i < n; i++) {
        if (h[i] < 0x20 && h[i] != '\t' && h[i] != '\n' && h[i] != '\r') {
            *why = "a raw control character";
            return i;
        }
        if (h[i] == '\\' && i + 1 < n) {
            if (h[i + 1] == 'u' && i + 6 <= n && memcmp(h + i + 2, "0000", 4) == 0) {
                *why = "a \\u0000 escape (a NUL inside a string)";
                return i;
            }
            i++; /* the escaped character */
        }
    }
    return n;
}

remat_status rm_json_parse(const char *what, const char *text, size_t n, cJSON **out) {
    *out = NULL;
    size_t bad = rm_utf8_valid_prefix(text, n);
    if (bad < n) return rm_err(REMAT_EFORMAT, "%s is not valid UTF-8 (byte %zu)", what, bad);
    const char *why = NULL;
    bad = bad_json_byte((const unsigned char *)text, n, &why);
    if (bad < n) return rm_err(REMAT_EFORMAT, "%s has %s at byte %zu", what, why, bad);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, n, &end, false);
    if (!root)
        return rm_err(REMAT_EFORMAT, "%s is not valid JSON (error at byte %td of %zu)", what,
                      end && end >= text ? end - text : (ptrdiff_t)0, n);
    for (const char *p = end; p < text + n; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            return rm_err(REMAT_EFORMAT, "%s has bytes after its JSON value (byte %td)", what,
                          p - text);
        }
    *out = root;
    return REMAT_OK;
}

void rm_json_string(rm_text *t, const char *s) {
    rm_text_printf(t, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') rm_text_printf(t, "\\%c", *p);
        else if (*p == '\n') rm_text_printf(t, "\\n");
        else if (*p == '\t') rm_text_printf(t, "\\t");
        else if (*p == '\r') rm_text_printf(t, "\\r");
        else if (*p < 0x20) rm_text_printf(t, "\\u%04x", *p);
        else rm_text_printf(t, "%c", *p);
    }
    rm_text_printf(t, "\"");
}

remat_status rm_read_small_file(const char *path, size_t max, char **out, size_t *n) {
    *out = NULL;
    *n = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) return rm_err(REMAT_EIO, "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap + 1);
    remat_status rc = buf ? REMAT_OK : rm_err(REMAT_ENOMEM, "%s: out of memory", path);
    while (!rc) {
        if (len == cap) {
            if (cap >= max) {
                rc = rm_err(REMAT_EFORMAT, "'%s' is larger than %zu bytes", path, max);
                break;
            }
            cap = cap * 2 < max ? cap * 2 : max;
            char *nb = realloc(buf, cap + 1);
            if (!nb) {
                rc = rm_err(REMAT_ENOMEM, "%s: out of memory", path);
                break;
            }
            buf = nb;
        }
        size_t k = fread(buf + len, 1, cap - len, fp);
        len += k;
        if (k == 0) {
            if (ferror(fp)) rc = rm_err(REMAT_EIO, "cannot read '%s': %s", path, strerror(errno));
            break;
        }
    }
    fclose(fp);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[len] = '\0';
    *out = buf;
    *n = len;
    return REMAT_OK;
}

remat_status rm_temp_create(const char *call, const char *path, char **tmp, FILE **fp) {
    static atomic_uint serial;
    *fp = NULL;
    size_t len = strlen(path) + 48;
    *tmp = malloc(len);
    if (!*tmp) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    snprintf(*tmp, len, "%s.tmp-%ld-%u", path, (long)getpid(), atomic_fetch_add(&serial, 1));
    /* a new file of the usual permissions (0666 less the umask) */
    int fd = open(*tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) *fp = fdopen(fd, "wb");
    if (*fp) return REMAT_OK;
    remat_status rc = rm_err(REMAT_EIO, "%s: cannot create '%s': %s", call, *tmp, strerror(errno));
    if (fd >= 0) {
        close(fd);
        unlink(*tmp);
    }
    free(*tmp);
    *tmp = NULL;
    return rc;
}

remat_status rm_temp_close(const char *call, remat_status rc, FILE *fp, const char *tmp) {
    if (!rc && (fflush(fp) != 0 || fsync(fileno(fp)) != 0))
        rc = rm_err(REMAT_EIO, "%s: cannot write '%s': %s", call, tmp, strerror(errno));
    if (fclose(fp) != 0 && !rc)
        rc = rm_err(REMAT_EIO, "%s: cannot write '%s': %s", call, tmp, strerror(errno));
    if (rc) unlink(tmp);
    return rc;
}

remat_status rm_temp_finish(const char *call, remat_status rc, FILE *fp, char *tmp,
                            const char *path) {
    rc = rm_temp_close(call, rc, fp, tmp);
    if (!rc && rename(tmp, path) != 0) {
        rc = rm_err(REMAT_EIO, "%s: cannot rename '%s' to '%s': %s", call, tmp, path,
                    strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    return rc;
}

remat_status rm_write_file_atomic(const char *call, const char *path, const void *data, size_t n) {
    char *tmp = NULL;
    FILE *fp = NULL;
    remat_status rc = rm_temp_create(call, path, &tmp, &fp);
    if (rc) return rc;
    if (fwrite(data, 1, n, fp) != n)
        rc = rm_err(REMAT_EIO, "%s: cannot write '%s': %s", call, tmp, strerror(errno));
    return rm_temp_finish(call, rc, fp, tmp, path);
}

/* tools/io/outputs.c — output paths checked before a run, --save's claim (see outputs.h). */
#include "outputs.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "remat/remat.h"

typedef struct out_path {
    const char *flag, *path;
    bool dir;     /* --out: a directory, made if missing */
    bool regular; /* --save: a regular file only (it is replaced by a rename) */
} out_path;

/* path's directory (dirname) into buf. */
static void parent_of(const char *path, char *buf, size_t n) {
    snprintf(buf, n, "%s", path);
    char *d = dirname(buf);
    if (d != buf) memmove(buf, d, strlen(d) + 1);
}

static const char *kind_of(mode_t m) {
    return S_ISDIR(m)                 ? "a directory"
           : S_ISFIFO(m)              ? "a FIFO"
           : S_ISCHR(m) || S_ISBLK(m) ? "a device"
           : S_ISSOCK(m)              ? "a socket"
           : S_ISLNK(m)               ? "a symbolic link"
                                      : "not a regular file";
}

/* A directory that exists and that this process may create files in. */
static int writable_dir(const out_path *o, const char *dir) {
    struct stat st;
    if (stat(dir, &st) != 0)
        return remat_set_error(REMAT_EIO, "%s %s: the directory %s does not exist", o->flag,
                               o->path, dir);
    if (!S_ISDIR(st.st_mode))
        return remat_set_error(REMAT_EIO, "%s %s: %s is not a directory", o->flag, o->path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return remat_set_error(REMAT_EIO, "%s %s: cannot create files in %s: %s", o->flag, o->path,
                               dir, strerror(errno));
    return REMAT_OK;
}

static int check_one(const out_path *o) {
    char dir[4096];
    struct stat st;
    if (!*o->path) return remat_set_error(REMAT_EINVAL, "%s: empty path", o->flag);
    if (strlen(o->path) >= sizeof dir)
        return remat_set_error(REMAT_EINVAL, "%s: path too long", o->flag);
    int got = o->regular ? lstat(o->path, &st) : stat(o->path, &st);
    if (got == 0) {
        if (o->dir) {
            if (!S_ISDIR(st.st_mode))
                return remat_set_error(REMAT_EIO, "%s %s: is %s, not a directory", o->flag, o->path,
                                       kind_of(st.st_mode));
            return writable_dir(o, o->path);
        }
        if (S_ISDIR(st.st_mode) || (o->regular && !S_ISREG(st.st_mode)))
            return remat_set_error(REMAT_EIO, "%s %s: is %s; it must be a %sfile", o->flag, o->path,
                                   kind_of(st.st_mode), o->regular ? "regular " : "");
        if (access(o->path, W_OK) != 0)
            return remat_set_error(REMAT_EIO, "%s %s: not writable: %s", o->flag, o->path,
                                   strerror(errno));
        /* --save replaces the file by a rename in its directory */
        if (o->regular) parent_of(o->path, dir, sizeof dir);
        return o->regular ? writable_dir(o, dir) : REMAT_OK;
    }
    if (errno != ENOENT)
        return remat_set_error(REMAT_EIO, "%s %s: %s", o->flag, o->path, strerror(errno));
    parent_of(o->path, dir, sizeof dir);
    if (o->dir) /* made with its parents: the nearest existing ancestor must take them */
        while (stat(dir, &st) != 0 && errno == ENOENT && strcmp(dir, ".") != 0 &&
               strcmp(dir, "/") != 0) {
            char up[4096];
            parent_of(dir, up, sizeof up);
            memcpy(dir, up, strlen(up) + 1);
        }
    return writable_dir(o, dir);
}

/* Whether a and b name one file: the same text, or the same existing inode. */
static bool same_file(const char *a, const char *b) {
    if (strcmp(a, b) == 0) return true;
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

int outputs_check(const config *c, command cmd) {
    out_path o[5];
    int n = 0;
    if (cmd == CMD_TRAIN) {
        if (c->export_dir) o[n++] = (out_path){"--export", c->export_dir, true, false};
        if (c->save) o[n++] = (out_path){"--save", c->save, false, true};
        if (c->log) o[n++] = (out_path){"--log", c->log, false, false};
        if (c->trace) o[n++] = (out_path){"--trace", c->trace, false, false};
        if (c->timeline) o[n++] = (out_path){"--timeline", c->timeline, false, false};
    } else if (cmd == CMD_BENCH) {
        if (c->out_dir) o[n++] = (out_path){"--out", c->out_dir, true, false};
        if (c->svg) o[n++] = (out_path){"--svg", c->svg, false, false};
        if (c->svg_pareto) o[n++] = (out_path){"--svg-pareto", c->svg_pareto, false, false};
        if (c->trace) o[n++] = (out_path){"--trace", c->trace, false, false};
    }
    for (int i = 0; i < n; i++) {
        int rc = check_one(&o[i]);
        if (rc) return rc;
        for (int j = 0; j < i; j++)
            if (same_file(o[i].path, o[j].path))
                return remat_set_error(REMAT_EINVAL, "%s and %s name the same file (%s)", o[j].flag,
                                       o[i].flag, o[i].path);
        if (c->data && cmd == CMD_TRAIN && same_file(o[i].path, c->data))
            return remat_set_error(REMAT_EINVAL,
                                   "%s %s is the --data file: it would be overwritten", o[i].flag,
                                   o[i].path);
        if (c->init_from && cmd == CMD_TRAIN && same_file(o[i].path, c->init_from))
            return remat_set_error(REMAT_EINVAL,
                                   "%s %s is the --init-from directory: the model would be "
                                   "overwritten",
                                   o[i].flag, o[i].path);
        if (c->resume && cmd == CMD_TRAIN && o[i].path != c->save &&
            same_file(o[i].path, c->resume))
            return remat_set_error(REMAT_EINVAL,
                                   "%s %s is the --resume file: it would be overwritten", o[i].flag,
                                   o[i].path);
    }
    return REMAT_OK;
}

int outputs_claim(output_claim *cl, const char *path) {
    *cl = (output_claim){-1, NULL};
    if (!path) return REMAT_OK;
    size_t n = strlen(path) + 6;
    cl->lock = malloc(n);
    if (!cl->lock) return remat_set_error(REMAT_ENOMEM, "remat: out of memory");
    snprintf(cl->lock, n, "%s.lock", path);
    cl->fd = open(cl->lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (cl->fd < 0) {
        int rc = remat_set_error(REMAT_EIO, "--save %s: cannot create %s: %s", path, cl->lock,
                                 strerror(errno));
        free(cl->lock);
        cl->lock = NULL;
        return rc;
    }
    if (flock(cl->fd, LOCK_EX | LOCK_NB) != 0) {
        char who[32] = "";
        ssize_t got = pread(cl->fd, who, sizeof who - 1, 0);
        who[got > 0 ? got : 0] = '\0';
        who[strcspn(who, "\n")] = '\0';
        int rc = remat_set_error(
            REMAT_EIO,
            "--save %s: another run (process %s) is saving to this file; give each run its own "
            "--save path",
            path, *who ? who : "unknown");
        close(cl->fd);
        free(cl->lock);
        *cl = (output_claim){-1, NULL};
        return rc;
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(cl->fd, 0) == 0 && pwrite(cl->fd, pid, (size_t)len, 0) != len) {
        /* the pid is only for the other run's message */
    }
    return REMAT_OK;
}

void outputs_release(output_claim *cl) {
    if (!cl || cl->fd < 0) return;
    unlink(cl->lock); /* while holding it: a run starting later makes a new one */
    close(cl->fd);
    free(cl->lock);
    *cl = (output_claim){-1, NULL};
}

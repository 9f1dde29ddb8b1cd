/* src/weights/hf_dir.c — Hugging Face model directories (remat/hf.h): the
 * weights of one read by name, and a directory written whole (config.json
 * and model.safetensors). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "remat/hf.h"
#include "weights/st.h"

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

remat_status remat_hf_load_weights(remat_params *params, const char *dir,
                                   const remat_load_options *opts) {
    static const char *call = "remat_hf_load_weights";
    if (!params || !dir)
        return rm_err(REMAT_EINVAL, "%s: %s is NULL", call, !params ? "params" : "dir");
    char single[4096], index[4096], bin[4096];
    if (snprintf(single, sizeof single, "%s/model.safetensors", dir) >= (int)sizeof single ||
        snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir) >= (int)sizeof index)
        return rm_err(REMAT_EINVAL, "%s: the directory's path is too long", call);
    snprintf(bin, sizeof bin, "%s/pytorch_model.bin", dir);
    const char *path = is_file(single) ? single : is_file(index) ? index : NULL;
    if (!path) {
        struct stat st;
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
            return rm_err(REMAT_EIO, "%s: '%s' is not a directory", call, dir);
        if (is_file(bin))
            return rm_err(REMAT_EIO,
                          "%s: '%s' has pytorch_model.bin but no model.safetensors: remat reads "
                          "safetensors only (convert it in Python: model.save_pretrained(dir, "
                          "safe_serialization=True))",
                          call, dir);
        return rm_err(REMAT_EIO,
                      "%s: '%s' has neither model.safetensors nor "
                      "model.safetensors.index.json",
                      call, dir);
    }
    remat_status rc = remat_safetensors_load(params, path, opts);
    return rc ? rm_err_prefix(rc, call) : REMAT_OK;
}

remat_status remat_hf_export(const char *dir, const remat_model_config *c,
                             const remat_hf_extra *extra, const remat_params *params) {
    static const char *call = "remat_hf_export";
    if (!dir || !c || !params)
        return rm_err(REMAT_EINVAL, "%s: %s is NULL", call, !dir ? "dir" : !c ? "c" : "params");
    char cfg[4096], weights[4096];
    if (snprintf(cfg, sizeof cfg, "%s/config.json", dir) >= (int)sizeof cfg ||
        snprintf(weights, sizeof weights, "%s/model.safetensors", dir) >= (int)sizeof weights)
        return rm_err(REMAT_EINVAL, "%s: the directory's path is too long", call);
    struct stat st;
    if (mkdir(dir, 0777) != 0 && !(errno == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode)))
        return rm_err(REMAT_EIO, "%s: cannot create the directory '%s': %s", call, dir,
                      strerror(errno == EEXIST ? ENOTDIR : errno));
    /* (a sharded checkpoint already there stays: model.safetensors is read
     * before an index, by remat_hf_load_weights as by transformers) */
    remat_status rc = remat_hf_config_write(c, extra, cfg);
    static const char *const meta[] = {"format", "pt"};
    if (!rc) rc = remat_safetensors_save(weights, params, 1, meta);
    return rc ? rm_err_prefix(rc, call) : REMAT_OK;
}

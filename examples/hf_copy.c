/* examples/hf_copy.c — a Hugging Face model directory read into remat and
 * written back (remat/hf.h):
 *
 *     example_hf_copy IN_DIR OUT_DIR
 *
 * Reads IN_DIR/config.json, makes a zeroed parameter for every tensor of
 * its checkpoint (model.safetensors or a sharded one), loads the weights
 * into them by name (remat_hf_load_weights, all or nothing), and exports
 * config and weights as OUT_DIR. scripts/gen_hf_dir_fixtures.py runs it and
 * loads OUT_DIR with transformers.AutoModelForCausalLM.from_pretrained. A
 * program of its own would make the parameters from the config (the model
 * families' builders) rather than from the file. */
#include <stdio.h>
#include <sys/stat.h>

#include <remat/remat.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s IN_DIR OUT_DIR\n", argv[0]);
        return 2;
    }
    remat_model_config c;
    remat_hf_extra x;
    remat_params *file = NULL, *params = NULL;
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/model.safetensors", argv[1]);
    if (stat(path, &st) != 0)
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", argv[1]);
    int rc = remat_hf_config_read(&c, &x, argv[1]);
    /* the names and shapes of the checkpoint's tensors */
    if (!rc) rc = remat_safetensors_read(&file, path, x.dtype);
    if (!rc) rc = remat_params_new(&params);
    for (int64_t i = 0; !rc && i < remat_params_count(file); i++) {
        remat_tensor *t = remat_params_tensor(file, i), *z = NULL;
        rc =
            remat_zeros(&z, remat_ndim(t), remat_shape(t), remat_tensor_dtype(t), REMAT_DEVICE_CPU);
        if (!rc) rc = remat_params_add(params, remat_params_name(file, i), z);
        remat_release(z);
    }
    if (!rc) rc = remat_hf_load_weights(params, argv[1], NULL);
    if (!rc) rc = remat_hf_export(argv[2], &c, &x, params);
    if (rc) fprintf(stderr, "%s: %s\n", remat_status_name(rc), remat_last_error());
    remat_params_free(file);
    remat_params_free(params);
    return rc ? 1 : 0;
}

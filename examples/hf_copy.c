/* examples/hf_copy.c — a Hugging Face model directory read into remat's
 * model and written back (remat/hf.h, remat/models.h):
 *
 *     example_hf_copy IN_DIR OUT_DIR [MAX_SHARD_BYTES]
 *
 * Reads IN_DIR/config.json, builds the model it describes
 * (remat_model_create), loads the weights into the model's parameters by
 * name (remat_hf_load_weights, all or nothing: model.safetensors or a
 * sharded checkpoint, with or without the base model's prefix), and exports
 * config and weights as OUT_DIR, in shards of at most MAX_SHARD_BYTES when
 * given (remat_hf_export_sharded). scripts/gen_hf_dir_fixtures.py runs it
 * and loads OUT_DIR with transformers.AutoModelForCausalLM.from_pretrained. */
#include <stdio.h>
#include <stdlib.h>

#include <remat/remat.h>

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s IN_DIR OUT_DIR [MAX_SHARD_BYTES]\n", argv[0]);
        return 2;
    }
    int64_t max_shard = argc == 4 ? strtoll(argv[3], NULL, 10) : REMAT_HF_MAX_SHARD_BYTES;
    remat_model_config c;
    remat_hf_extra x;
    remat_model *m = NULL;
    remat_params *params = NULL;
    int rc = remat_hf_config_read(&c, &x, argv[1]);
    if (!rc) rc = remat_model_create(&m, &c, REMAT_DEVICE_CPU);
    if (!rc) rc = remat_model_params(m, false, &params);
    if (!rc) rc = remat_hf_load_weights(params, argv[1], NULL);
    if (!rc) rc = remat_hf_export_sharded(argv[2], &c, &x, params, max_shard);
    if (rc) fprintf(stderr, "%s: %s\n", remat_status_name(rc), remat_last_error());
    remat_params_free(params);
    remat_model_free(m);
    return rc ? 1 : 0;
}

/* config.json (+ generation_config.json) of a model directory:
 * sp_config_load and the getters the model families use.
 *
 * Input: config.json, optionally a NUL byte and generation_config.json.
 * Invariants on success: the sizes are in their documented ranges, heads
 * divide evenly, head_dim and the rotary dimension are even and positive,
 * at most SP_MAX_EOS distinct eos ids. */
#include "fuzz_common.h"

#include <math.h>

#include "artifacts/config.h"

static const char *const modules[] = {
    "model.layers.0.self_attn.q_proj", "lm_head", "model.embed_tokens", "bits", "group_size",
};

static void check_config(const sp_model_config *cfg) {
    FUZZ_CHECK(cfg->model_type[0] && cfg->json && cfg->root, "model_type / json");
    FUZZ_CHECK(cfg->hidden_size >= 1 && cfg->n_layers >= 1 && cfg->intermediate_size >= 1 &&
                   cfg->vocab_size >= 1,
               "sizes %d %d %d %d", cfg->hidden_size, cfg->n_layers, cfg->intermediate_size,
               cfg->vocab_size);
    FUZZ_CHECK(cfg->n_heads >= 1 && cfg->n_kv_heads >= 1 && cfg->n_heads % cfg->n_kv_heads == 0,
               "heads %d / %d", cfg->n_heads, cfg->n_kv_heads);
    FUZZ_CHECK(cfg->head_dim >= 2 && cfg->head_dim % 2 == 0, "head_dim %d", cfg->head_dim);
    FUZZ_CHECK(cfg->rope.rotary_dim >= 2 && cfg->rope.rotary_dim <= cfg->head_dim &&
                   cfg->rope.rotary_dim % 2 == 0,
               "rotary_dim %d of %d", cfg->rope.rotary_dim, cfg->head_dim);
    FUZZ_CHECK(cfg->rope.factor > 0 && isfinite(cfg->rope.factor), "rope factor %g",
               cfg->rope.factor);
    FUZZ_CHECK(cfg->n_eos >= 0 && cfg->n_eos <= SP_MAX_EOS, "%d eos ids", cfg->n_eos);
    for (int i = 0; i < cfg->n_eos; i++) {
        FUZZ_CHECK(cfg->eos_ids[i] >= 0, "eos id %d", (int)cfg->eos_ids[i]);
        for (int k = 0; k < i; k++)
            FUZZ_CHECK(cfg->eos_ids[i] != cfg->eos_ids[k], "eos id %d twice", (int)cfg->eos_ids[i]);
    }
    for (size_t i = 0; i < sizeof modules / sizeof *modules; i++) {
        int bits = 0, group = 0;
        bool mxfp4 = false;
        sp_config_quant_rule(cfg, modules[i], &bits, &group, &mxfp4);
        (void)sp_config_int(cfg, modules[i], 0);
        (void)sp_config_num(cfg, modules[i], 0);
        (void)sp_config_bool(cfg, modules[i], false);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char *config, *generation;
    if (!config) {
        config = fuzz_path("config.json");
        generation = fuzz_path("generation_config.json");
    }
    char *parts[2];
    fuzz_split(data, size, parts, 2);
    fuzz_write_or_remove(config, parts[0]);
    fuzz_write_or_remove(generation, parts[1]);
    sp_model_config cfg;
    spindle_error err = {0};
    spindle_status st = sp_config_load(fuzz_scratch_dir(), &cfg, &err);
    if (st == SPINDLE_OK) {
        check_config(&cfg);
        sp_config_free(&cfg);
    } else {
        fuzz_check_error(st, &err);
    }
    fuzz_free_parts(parts, 2);
    return 0;
}

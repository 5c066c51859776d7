/* adapter_config.json of a LoRA adapter (PEFT or mlx-lm):
 * sp_adapter_config_parse.
 *
 * Input: the JSON text. Invariants on success: rank in 1..SP_LORA_MAX_RANK,
 * a finite scale, at least one target module and none outside the known
 * ones; the same text parses to the same result twice. */
#include "fuzz_common.h"

#include <math.h>

#include "artifacts/adapter_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sp_adapter_config cfg, again;
    spindle_error err = {0};
    spindle_status st = sp_adapter_config_parse((const char *)data, size,
                                                "adapter_config.json", &cfg,
                                                &err);
    if (st != SPINDLE_OK) {
        fuzz_check_error(st, &err);
        return 0;
    }
    FUZZ_CHECK(cfg.format == SP_ADAPTER_PEFT || cfg.format == SP_ADAPTER_MLX,
               "format %d", (int)cfg.format);
    FUZZ_CHECK(cfg.rank >= 1 && cfg.rank <= SP_LORA_MAX_RANK, "rank %d", cfg.rank);
    FUZZ_CHECK(isfinite(cfg.scale), "scale %g", cfg.scale);
    FUZZ_CHECK(cfg.targets && !(cfg.targets & ~SP_LORA_ALL_MODULES),
               "targets %#x", cfg.targets);
    FUZZ_CHECK(sp_adapter_config_parse((const char *)data, size, "again",
                                       &again, &err) == SPINDLE_OK &&
                   !memcmp(&cfg, &again, sizeof cfg),
               "a second parse differs");
    for (int m = 0; m < SP_LORA_N_MODULES; m++)
        FUZZ_CHECK(sp_lora_module_from_name(sp_lora_module_name((sp_lora_module)m)) == m,
                   "module %d name round trip", m);
    return 0;
}

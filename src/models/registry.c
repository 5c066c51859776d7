/* The architectures Spindle knows, by config.json model_type. Adding a
 * family is one line in `archs`: the GGUF tables and the supported list
 * are derived from it. */
#include "models/model.h"
#include "models/registry.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

extern const sp_arch sp_arch_llama, sp_arch_mistral, sp_arch_qwen2,
    sp_arch_qwen3, sp_arch_qwen3_moe, sp_arch_gemma3_text, sp_arch_gemma4_text,
    sp_arch_smollm3,
    sp_arch_phi3, sp_arch_olmo2, sp_arch_olmo3, sp_arch_granite,
    sp_arch_ministral3, sp_arch_mistral3, sp_arch_qwen3_5_text,
    sp_arch_qwen3_5, sp_arch_qwen3_5_moe_text, sp_arch_qwen3_5_moe,
    sp_arch_qwen3_next, sp_arch_gpt_oss, sp_arch_lfm2, sp_arch_bert,
    sp_arch_xlm_roberta, sp_arch_deepseek_v3, sp_arch_glm4_moe_lite,
    sp_arch_glm4_moe,
    sp_arch_kimi_k2, sp_arch_llada, sp_arch_dream;

static const sp_arch *const archs[] = {
    &sp_arch_llama, &sp_arch_mistral, &sp_arch_qwen2, &sp_arch_qwen3,
    &sp_arch_qwen3_moe, &sp_arch_gemma3_text, &sp_arch_gemma4_text,
    &sp_arch_smollm3, &sp_arch_phi3,
    &sp_arch_olmo2, &sp_arch_olmo3, &sp_arch_granite, &sp_arch_ministral3,
    &sp_arch_mistral3, &sp_arch_qwen3_5_text, &sp_arch_qwen3_5,
    &sp_arch_qwen3_5_moe_text, &sp_arch_qwen3_5_moe, &sp_arch_qwen3_next,
    &sp_arch_gpt_oss, &sp_arch_lfm2, &sp_arch_bert,
    &sp_arch_xlm_roberta, &sp_arch_deepseek_v3, &sp_arch_glm4_moe_lite,
    &sp_arch_glm4_moe,
    &sp_arch_kimi_k2, &sp_arch_llada, &sp_arch_dream,
};
#define N_ARCHS (sizeof archs / sizeof *archs)

/* Derived once (the library may be entered from several threads). */
static const sp_gguf_family *gguf_families[N_ARCHS + 1];
static char supported[1024];
static pthread_once_t derived_once = PTHREAD_ONCE_INIT;

static void derive(void) {
    size_t n = 0, used = 0;
    for (size_t i = 0; i < N_ARCHS; i++) {
        if (archs[i]->gguf) gguf_families[n++] = archs[i]->gguf;
        if (used < sizeof supported)
            used += (size_t)snprintf(supported + used, sizeof supported - used,
                                     "%s%s", i ? ", " : "",
                                     archs[i]->model_type);
    }
}

const sp_arch *sp_find_arch(const char *model_type) {
    for (size_t i = 0; i < N_ARCHS; i++)
        if (!strcmp(archs[i]->model_type, model_type)) return archs[i];
    return NULL;
}

const char *sp_supported_archs(void) {
    pthread_once(&derived_once, derive);
    return supported;
}

const sp_gguf_family *const *sp_gguf_families(void) {
    pthread_once(&derived_once, derive);
    return gguf_families;
}

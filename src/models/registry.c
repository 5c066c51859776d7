/* The architectures Spindle knows, by config.json model_type. */
#include "models/model.h"

#include <string.h>

extern const sp_arch sp_arch_llama, sp_arch_mistral, sp_arch_qwen2,
    sp_arch_qwen3, sp_arch_gemma3_text;

static const sp_arch *const archs[] = {
    &sp_arch_llama, &sp_arch_mistral, &sp_arch_qwen2, &sp_arch_qwen3,
    &sp_arch_gemma3_text,
};

const sp_arch *sp_find_arch(const char *model_type) {
    for (size_t i = 0; i < sizeof archs / sizeof *archs; i++)
        if (!strcmp(archs[i]->model_type, model_type)) return archs[i];
    return NULL;
}

const char *sp_supported_archs(void) {
    return "llama, mistral, qwen2, qwen3, gemma3_text";
}

/* The model families' GGUF tables, for code that reads GGUF files on the
 * families' behalf (the loader, the converter). */
#ifndef SP_MODELS_REGISTRY_H
#define SP_MODELS_REGISTRY_H

#include "artifacts/gguf_model.h"

/* Every registered family's sp_gguf_family, NULL-terminated; static. */
const sp_gguf_family *const *sp_gguf_families(void);

#endif

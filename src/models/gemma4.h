/* Gemma 4 text models: what gemma4.c and its GGUF form (gemma4_gguf.c)
 * share. */
#ifndef SP_MODELS_GEMMA4_H
#define SP_MODELS_GEMMA4_H

#include "artifacts/gguf_model.h"

/* llama.cpp's "gemma4" files: tensor names, metadata keys and the config
 * hook that turns them into gemma4_text's config.json. */
extern const sp_gguf_family sp_gemma4_gguf;

#endif

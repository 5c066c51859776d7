/* The sentence-transformers files of an embedding model directory, parsed:
 * modules.json, the Pooling module's config.json, sentence_bert_config.json
 * and config_sentence_transformers.json. Each parser takes the file's text
 * and a label (its path) for one-line errors; they are pure functions, the
 * fuzzer's entry points (tests/fuzz/fuzz_st_config.c). */
#ifndef SP_EMBEDDING_ST_CONFIG_H
#define SP_EMBEDDING_ST_CONFIG_H

#include "spindle.h"

typedef enum sp_pooling {
    SP_POOL_MEAN = 0,
    SP_POOL_CLS,
    SP_POOL_LAST
} sp_pooling;

typedef struct sp_st_config {
    bool has_modules;         /* modules.json was there */
    char *pooling_path;       /* the Pooling module's folder; owned */
    bool normalize;           /* a Normalize module follows the pooling */
    sp_pooling pooling;
    int max_seq_length;       /* 0: none given */
    /* Named prompts, and the name of the default one (NULL: none). */
    char **prompt_names, **prompt_texts;
    int n_prompts;
    char *default_prompt;
} sp_st_config;

/* modules.json: a list of {type, path} modules, which must be a
 * Transformer, then a Pooling (its path kept), then optionally Normalize;
 * any other module (Dense, ...) is refused by name. */
spindle_status sp_st_parse_modules(const char *text, const char *label,
                                   sp_st_config *cfg, spindle_error *err);
/* The Pooling config: exactly one supported pooling_mode_* true (mean,
 * cls, lasttoken), word_embedding_dimension == hidden when given. */
spindle_status sp_st_parse_pooling(const char *text, const char *label,
                                   int hidden, sp_st_config *cfg,
                                   spindle_error *err);
/* sentence_bert_config.json: max_seq_length (positive integer) if given. */
spindle_status sp_st_parse_sbert(const char *text, const char *label,
                                 sp_st_config *cfg, spindle_error *err);
/* config_sentence_transformers.json: prompts {name: text} and
 * default_prompt_name (which must name one of them). */
spindle_status sp_st_parse_prompts(const char *text, const char *label,
                                   sp_st_config *cfg, spindle_error *err);

/* All of them from dir (absent files: their defaults). `encoder`: a bare
 * encoder without modules.json pools by mean; otherwise modules.json is
 * required. */
spindle_status sp_st_config_load(const char *dir, bool encoder, int hidden,
                                 sp_st_config *cfg, spindle_error *err);
void sp_st_config_free(sp_st_config *cfg);

/* The prompt text `name` names, or NULL. */
const char *sp_st_prompt(const sp_st_config *cfg, const char *name);

#endif

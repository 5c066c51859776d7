/* sentence-transformers' module files, as SentenceTransformer loads them.
 * Pure parsers, fuzzed by tests/fuzz/fuzz_st_modules.c. */
#include "embedding/st_config.h"
#include "base/error.h"
#include "base/mapped_file.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

static spindle_status parse_root(const char *text, const char *label,
                                 bool want_array, cJSON **out,
                                 spindle_error *err) {
    *out = cJSON_Parse(text);
    if (!*out)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: not valid JSON", label);
    if (want_array ? !cJSON_IsArray(*out) : !cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: not a JSON %s", label,
                       want_array ? "list" : "object");
    }
    return SPINDLE_OK;
}

/* The module kinds this engine runs, in the order they must come. */
enum { MOD_TRANSFORMER, MOD_POOLING, MOD_NORMALIZE, MOD_OTHER };

static int module_kind(const char *type) {
    if (ends_with(type, ".Transformer")) return MOD_TRANSFORMER;
    if (ends_with(type, ".Pooling")) return MOD_POOLING;
    if (ends_with(type, ".Normalize")) return MOD_NORMALIZE;
    return MOD_OTHER;
}

static spindle_status check_module_order(int i, int kind, int prev,
                                         const char *type, const char *label,
                                         spindle_error *err) {
    if (kind == MOD_OTHER)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: module %d of type '%s' is not supported "
                       "(Transformer, Pooling, Normalize)", label, i, type);
    if (kind != prev + 1)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: module %d ('%s') is out of place (expected "
                       "Transformer, Pooling, then optionally Normalize)",
                       label, i, type);
    return SPINDLE_OK;
}

spindle_status sp_st_parse_modules(const char *text, const char *label,
                                   sp_st_config *cfg, spindle_error *err) {
    cJSON *root;
    spindle_status st = parse_root(text, label, true, &root, err);
    if (st) return st;
    int prev = -1, i = 0;
    const cJSON *mod;
    cJSON_ArrayForEach(mod, root) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(mod, "type");
        const cJSON *path = cJSON_GetObjectItemCaseSensitive(mod, "path");
        if (!cJSON_IsString(type) || (path && !cJSON_IsString(path))) {
            st = sp_fail(err, SPINDLE_ERR_FORMAT,
                         "%s: module %d needs a string 'type' (and 'path')",
                         label, i);
            break;
        }
        int kind = module_kind(type->valuestring);
        if ((st = check_module_order(i, kind, prev, type->valuestring, label,
                                     err)))
            break;
        if (kind == MOD_POOLING) {
            const char *p = path ? path->valuestring : "";
            if (strstr(p, "..") || p[0] == '/') {
                st = sp_fail(err, SPINDLE_ERR_FORMAT,
                             "%s: module %d's path '%s' leaves the model "
                             "directory", label, i, p);
                break;
            }
            free(cfg->pooling_path);
            if (!(cfg->pooling_path = strdup(p))) {
                st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
                break;
            }
        }
        if (kind == MOD_NORMALIZE) cfg->normalize = true;
        prev = kind;
        i++;
    }
    if (!st && prev < MOD_POOLING)
        st = sp_fail(err, SPINDLE_ERR_FORMAT,
                     "%s: no Pooling module after the Transformer", label);
    cJSON_Delete(root);
    if (!st) cfg->has_modules = true;
    return st;
}

spindle_status sp_st_parse_pooling(const char *text, const char *label,
                                   int hidden, sp_st_config *cfg,
                                   spindle_error *err) {
    cJSON *root;
    spindle_status st = parse_root(text, label, false, &root, err);
    if (st) return st;
    static const struct {
        const char *key;
        int mode;   /* -1: not supported */
    } modes[] = {
        {"pooling_mode_mean_tokens", SP_POOL_MEAN},
        {"pooling_mode_cls_token", SP_POOL_CLS},
        {"pooling_mode_lasttoken", SP_POOL_LAST},
        {"pooling_mode_max_tokens", -1},
        {"pooling_mode_mean_sqrt_len_tokens", -1},
        {"pooling_mode_weightedmean_tokens", -1},
    };
    int chosen = -2;
    for (size_t i = 0; i < sizeof modes / sizeof *modes && !st; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, modes[i].key);
        if (!v || cJSON_IsFalse(v) || cJSON_IsNull(v)) continue;
        if (!cJSON_IsTrue(v))
            st = sp_fail(err, SPINDLE_ERR_FORMAT, "%s: '%s' is not a boolean",
                         label, modes[i].key);
        else if (modes[i].mode < 0)
            st = sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                         "%s: '%s' is not supported (mean, cls, lasttoken)",
                         label, modes[i].key);
        else if (chosen != -2)
            st = sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                         "%s: more than one pooling mode is on", label);
        else
            chosen = modes[i].mode;
    }
    if (!st && chosen == -2)
        st = sp_fail(err, SPINDLE_ERR_FORMAT, "%s: no pooling mode is on",
                     label);
    const cJSON *dim = cJSON_GetObjectItemCaseSensitive(root,
                                                        "word_embedding_dimension");
    if (!st && dim && (!cJSON_IsNumber(dim) || dim->valuedouble != hidden))
        st = sp_fail(err, SPINDLE_ERR_FORMAT,
                     "%s: word_embedding_dimension is not the model's hidden "
                     "size %d", label, hidden);
    const cJSON *inc = cJSON_GetObjectItemCaseSensitive(root, "include_prompt");
    if (!st && inc && !cJSON_IsTrue(inc))
        st = sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                     "%s: include_prompt other than true is not supported",
                     label);
    if (!st) cfg->pooling = (sp_pooling)chosen;
    cJSON_Delete(root);
    return st;
}

spindle_status sp_st_parse_sbert(const char *text, const char *label,
                                 sp_st_config *cfg, spindle_error *err) {
    cJSON *root;
    spindle_status st = parse_root(text, label, false, &root, err);
    if (st) return st;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "max_seq_length");
    if (v && !cJSON_IsNull(v)) {
        double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
        if (!(d >= 1 && d <= 1 << 24 && d == floor(d)))
            st = sp_fail(err, SPINDLE_ERR_FORMAT,
                         "%s: max_seq_length is not a positive integer", label);
        else
            cfg->max_seq_length = (int)d;
    }
    cJSON_Delete(root);
    return st;
}

static spindle_status add_prompt(sp_st_config *cfg, const char *name,
                                 const char *text) {
    char **n = realloc(cfg->prompt_names,
                       (size_t)(cfg->n_prompts + 1) * sizeof *n);
    if (!n) return SPINDLE_ERR_MEMORY;
    cfg->prompt_names = n;
    char **t = realloc(cfg->prompt_texts,
                       (size_t)(cfg->n_prompts + 1) * sizeof *t);
    if (!t) return SPINDLE_ERR_MEMORY;
    cfg->prompt_texts = t;
    n[cfg->n_prompts] = strdup(name);
    t[cfg->n_prompts] = strdup(text);
    cfg->n_prompts++;
    return n[cfg->n_prompts - 1] && t[cfg->n_prompts - 1] ? SPINDLE_OK
                                                          : SPINDLE_ERR_MEMORY;
}

spindle_status sp_st_parse_prompts(const char *text, const char *label,
                                   sp_st_config *cfg, spindle_error *err) {
    cJSON *root;
    spindle_status st = parse_root(text, label, false, &root, err);
    if (st) return st;
    const cJSON *prompts = cJSON_GetObjectItemCaseSensitive(root, "prompts");
    if (prompts && !cJSON_IsNull(prompts) && !cJSON_IsObject(prompts))
        st = sp_fail(err, SPINDLE_ERR_FORMAT, "%s: 'prompts' is not an object",
                     label);
    const cJSON *p;
    if (!st && cJSON_IsObject(prompts))
        cJSON_ArrayForEach(p, prompts) {
            if (!cJSON_IsString(p)) {
                st = sp_fail(err, SPINDLE_ERR_FORMAT,
                             "%s: prompt '%s' is not a string", label,
                             p->string);
                break;
            }
            if (add_prompt(cfg, p->string, p->valuestring)) {
                st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
                break;
            }
        }
    const cJSON *def = cJSON_GetObjectItemCaseSensitive(root,
                                                        "default_prompt_name");
    if (!st && def && !cJSON_IsNull(def)) {
        if (!cJSON_IsString(def) || !sp_st_prompt(cfg, def->valuestring))
            st = sp_fail(err, SPINDLE_ERR_FORMAT,
                         "%s: default_prompt_name names no prompt", label);
        else if (!(cfg->default_prompt = strdup(def->valuestring)))
            st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    cJSON_Delete(root);
    return st;
}

const char *sp_st_prompt(const sp_st_config *cfg, const char *name) {
    for (int i = 0; name && i < cfg->n_prompts; i++)
        if (!strcmp(cfg->prompt_names[i], name)) return cfg->prompt_texts[i];
    return NULL;
}

typedef spindle_status (*st_parser)(const char *text, const char *label,
                                    sp_st_config *cfg, spindle_error *err);

/* Parse dir/name with `parse` if the file exists. */
static spindle_status load_optional(const char *dir, const char *name,
                                    st_parser parse, int hidden,
                                    sp_st_config *cfg, bool *found,
                                    spindle_error *err) {
    char *path = sp_path_join(dir, name);
    if (!path) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    spindle_status st = SPINDLE_OK;
    *found = sp_file_exists(path);
    if (*found) {
        char *text = NULL;
        size_t len;
        st = sp_read_text_file(path, &text, &len, err);
        if (!st)
            st = parse ? parse(text, path, cfg, err)
                       : sp_st_parse_pooling(text, path, hidden, cfg, err);
        free(text);
    }
    free(path);
    return st;
}

spindle_status sp_st_config_load(const char *dir, bool encoder, int hidden,
                                 sp_st_config *cfg, spindle_error *err) {
    memset(cfg, 0, sizeof *cfg);
    bool found;
    spindle_status st = load_optional(dir, "modules.json", sp_st_parse_modules,
                                      hidden, cfg, &found, err);
    if (!st && !found && !encoder)
        st = sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                     "%s has no modules.json: not an embedding model", dir);
    if (!st && found) {
        char *pool_dir = sp_path_join(dir, cfg->pooling_path);
        if (!pool_dir) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
        if (!st)
            st = load_optional(pool_dir, "config.json", NULL, hidden, cfg,
                               &found, err);
        if (!st && !found)
            st = sp_fail(err, SPINDLE_ERR_FORMAT,
                         "%s/config.json: the Pooling module's config is "
                         "missing", pool_dir);
        free(pool_dir);
    }
    if (!st)
        st = load_optional(dir, "sentence_bert_config.json", sp_st_parse_sbert,
                           hidden, cfg, &found, err);
    if (!st)
        st = load_optional(dir, "config_sentence_transformers.json",
                           sp_st_parse_prompts, hidden, cfg, &found, err);
    if (st) sp_st_config_free(cfg);
    return st;
}

void sp_st_config_free(sp_st_config *cfg) {
    if (!cfg) return;
    for (int i = 0; i < cfg->n_prompts; i++) {
        free(cfg->prompt_names[i]);
        free(cfg->prompt_texts[i]);
    }
    free(cfg->prompt_names);
    free(cfg->prompt_texts);
    free(cfg->default_prompt);
    free(cfg->pooling_path);
    memset(cfg, 0, sizeof *cfg);
}

/* Post-processors of tokenizer.json (HF `processors`) for single sequences
 * with add_special_tokens: TemplateProcessing, BertProcessing,
 * RobertaProcessing, ByteLevel (offsets only: no effect on ids), Sequence. */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#define SEQ_MARK (-2)

static spindle_status oom(spindle_error *err) {
    return sp_fail(err, SPINDLE_ERR_MEMORY, "tokenizer: out of memory");
}

static bool layout_push(sp_post *p, int32_t id) {
    int32_t *v = realloc(p->single, (p->n_single + 1) * sizeof *v);
    if (!v) return false;
    p->single = v;
    p->single[p->n_single++] = id;
    return true;
}

static spindle_status parse_template(const cJSON *j, sp_post *p, spindle_error *err) {
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(j, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(j, "special_tokens");
    if (!cJSON_IsArray(single))
        return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: TemplateProcessing without single template");
    const cJSON *it;
    cJSON_ArrayForEach(it, single) {
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
        if (seq) {
            if (!layout_push(p, SEQ_MARK)) return oom(err);
            continue;
        }
        const char *name = sp_json_str(sp, "id");
        const cJSON *def = name ? cJSON_GetObjectItemCaseSensitive(specials, name) : NULL;
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(def, "ids");
        if (!cJSON_IsArray(ids))
            return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: template special token '%.60s' is undefined",
                           name ? name : "");
        const cJSON *x;
        cJSON_ArrayForEach(x, ids) {
            if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble >= (1 << 26))
                return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: bad id for template token '%.60s'", name);
            if (!layout_push(p, (int32_t)x->valuedouble)) return oom(err);
        }
    }
    return SPINDLE_OK;
}

static spindle_status pair_id(const cJSON *j, const char *key, int32_t *id,
                              spindle_error *err) {
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(j, key);
    const cJSON *v = cJSON_GetArrayItem(pr, 1);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= (1 << 26))
        return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: post_processor %s is malformed", key);
    *id = (int32_t)v->valuedouble;
    return SPINDLE_OK;
}

spindle_status sp_post_parse(const cJSON *j, sp_post *p, spindle_error *err) {
    memset(p, 0, sizeof *p);
    if (!j || cJSON_IsNull(j)) return SPINDLE_OK;
    const char *t = sp_json_str(j, "type");
    if (!t) return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: post_processor without type");
    if (!strcmp(t, "ByteLevel")) return SPINDLE_OK;
    if (!strcmp(t, "TemplateProcessing")) {
        p->type = SP_POST_TEMPLATE;
        return parse_template(j, p, err);
    }
    if (!strcmp(t, "BertProcessing") || !strcmp(t, "RobertaProcessing")) {
        p->type = SP_POST_BERT;
        int32_t cls = -1, sep = -1;
        spindle_status st = pair_id(j, "cls", &cls, err);
        if (!st) st = pair_id(j, "sep", &sep, err);
        if (st) return st;
        if (!layout_push(p, cls) || !layout_push(p, SEQ_MARK) || !layout_push(p, sep)) return oom(err);
        return SPINDLE_OK;
    }
    if (!strcmp(t, "Sequence")) {
        p->type = SP_POST_SEQ;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "processors");
        if (!cJSON_IsArray(arr)) return sp_fail(err, SPINDLE_ERR_FORMAT, "tokenizer.json: Sequence post_processor without list");
        p->subs = calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof *p->subs);
        if (!p->subs) return oom(err);
        const cJSON *it;
        cJSON_ArrayForEach(it, arr) {
            spindle_status st = sp_post_parse(it, &p->subs[p->n_subs], err);
            p->n_subs++;
            if (st) return st;
        }
        return SPINDLE_OK;
    }
    return sp_fail(err, SPINDLE_ERR_UNSUPPORTED, "tokenizer.json: unsupported post_processor '%s'", t);
}

void sp_post_free(sp_post *p) {
    for (int i = 0; i < p->n_subs; i++) sp_post_free(&p->subs[i]);
    free(p->subs);
    free(p->single);
    memset(p, 0, sizeof *p);
}

spindle_status sp_post_apply(const sp_post *p, sp_ids *ids, spindle_error *err) {
    if (p->type == SP_POST_SEQ) {
        for (int i = 0; i < p->n_subs; i++) {
            spindle_status st = sp_post_apply(&p->subs[i], ids, err);
            if (st) return st;
        }
        return SPINDLE_OK;
    }
    if (p->type == SP_POST_NONE) return SPINDLE_OK;
    sp_ids out = {0};
    for (size_t i = 0; i < p->n_single; i++) {
        bool ok = true;
        if (p->single[i] == SEQ_MARK)
            for (size_t k = 0; k < ids->n && ok; k++) ok = sp_ids_push(&out, ids->v[k]);
        else ok = sp_ids_push(&out, p->single[i]);
        if (!ok) { free(out.v); return oom(err); }
    }
    free(ids->v);
    *ids = out;
    return SPINDLE_OK;
}

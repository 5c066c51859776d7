/* The variables transformers' apply_chat_template gives a chat template:
 * special tokens, normalized messages, tools, documents,
 * add_generation_prompt and extra keywords. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "template/jinja.h"

/* A message as transformers hands it to the template: keys whose value is
 * null dropped, and a reasoning text (reasoning_content, thinking or
 * reasoning, first non-null) copied to "thinking" (first key unless present)
 * and "reasoning_content", as {"thinking": r, **message,
 * "reasoning_content": r} orders them. */
static cJSON *normalize_message(const cJSON *msg, spindle_error *err) {
    if (!cJSON_IsObject(msg)) {
        sp_fail(err, SPINDLE_ERR_ARGUMENT, "chat messages must be JSON objects");
        return NULL;
    }
    static const char *const reasoning_keys[] = {"reasoning_content", "thinking", "reasoning"};
    const cJSON *reasoning = NULL;
    for (int i = 0; i < 3 && !reasoning; i++) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(msg, reasoning_keys[i]);
        if (r && !cJSON_IsNull(r)) reasoning = r;
    }
    cJSON *out = cJSON_CreateObject();
    if (!out) goto oom;
    if (reasoning && !cJSON_GetObjectItemCaseSensitive(msg, "thinking")) {
        cJSON *dup = cJSON_Duplicate(reasoning, true);
        if (!dup || !cJSON_AddItemToObject(out, "thinking", dup)) {
            cJSON_Delete(dup);
            goto oom;
        }
    }
    for (const cJSON *c = msg->child; c; c = c->next) {
        if (cJSON_IsNull(c) || !c->string) continue;
        const cJSON *src = c;
        if (reasoning && !strcmp(c->string, "reasoning_content")) src = reasoning;
        cJSON *dup = cJSON_Duplicate(src, true);
        if (!dup || !cJSON_AddItemToObject(out, c->string, dup)) {
            cJSON_Delete(dup);
            goto oom;
        }
    }
    if (reasoning && !cJSON_GetObjectItemCaseSensitive(out, "reasoning_content")) {
        cJSON *dup = cJSON_Duplicate(reasoning, true);
        if (!dup || !cJSON_AddItemToObject(out, "reasoning_content", dup)) {
            cJSON_Delete(dup);
            goto oom;
        }
    }
    return out;
oom:
    cJSON_Delete(out);
    sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory building chat messages");
    return NULL;
}

static bool put(cJSON *ctx, const char *key, cJSON *value) {
    if (!value) return false;
    cJSON_DeleteItemFromObjectCaseSensitive(ctx, key);
    if (!cJSON_AddItemToObject(ctx, key, value)) {
        cJSON_Delete(value);
        return false;
    }
    return true;
}

cJSON *sp_chat_build_context(const cJSON *messages, const cJSON *tools,
                             const cJSON *documents, bool add_generation_prompt,
                             const cJSON *extra,
                             const sp_chat_special_tokens *special,
                             spindle_error *err) {
    if (!cJSON_IsArray(messages)) {
        sp_fail(err, SPINDLE_ERR_ARGUMENT, "chat messages must be a JSON array");
        return NULL;
    }
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools)) {
        sp_fail(err, SPINDLE_ERR_ARGUMENT, "chat tools must be a JSON array");
        return NULL;
    }
    if (documents && !cJSON_IsNull(documents) && !cJSON_IsArray(documents)) {
        sp_fail(err, SPINDLE_ERR_ARGUMENT, "chat documents must be a JSON array");
        return NULL;
    }
    if (extra && !cJSON_IsNull(extra) && !cJSON_IsObject(extra)) {
        sp_fail(err, SPINDLE_ERR_ARGUMENT, "extra template variables must be a JSON object");
        return NULL;
    }
    cJSON *ctx = cJSON_CreateObject();
    cJSON *msgs = cJSON_CreateArray();
    bool ok = ctx && msgs;
    if (ok && special) {
        const char *names[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                               "pad_token", "cls_token", "mask_token"};
        const char *vals[] = {special->bos, special->eos, special->unk, special->sep,
                              special->pad, special->cls, special->mask};
        for (int i = 0; ok && i < 7; i++)
            if (vals[i]) ok = put(ctx, names[i], cJSON_CreateString(vals[i]));
    }
    /* Keyword arguments override the special tokens. */
    if (ok && extra && cJSON_IsObject(extra))
        for (const cJSON *c = extra->child; ok && c; c = c->next) {
            static const char *const reserved[] = {"messages", "tools", "documents",
                                                   "add_generation_prompt"};
            for (int i = 0; i < 4; i++)
                if (c->string && !strcmp(c->string, reserved[i])) {
                    cJSON_Delete(ctx);
                    cJSON_Delete(msgs);
                    sp_fail(err, SPINDLE_ERR_ARGUMENT,
                            "extra template variable '%s' is set by the chat itself", reserved[i]);
                    return NULL;
                }
            if (c->string) ok = put(ctx, c->string, cJSON_Duplicate(c, true));
        }
    for (const cJSON *m = messages->child; ok && m; m = m->next) {
        cJSON *nm = normalize_message(m, err);
        if (!nm) {
            cJSON_Delete(ctx);
            cJSON_Delete(msgs);
            return NULL;
        }
        cJSON_AddItemToArray(msgs, nm);
    }
    if (ok) {
        ok = cJSON_AddItemToObject(ctx, "messages", msgs);
        if (!ok) cJSON_Delete(msgs);
        msgs = NULL;
    }
    /* Absent tools/documents are None to the template (defined, none). */
    if (ok) ok = put(ctx, "tools", tools ? cJSON_Duplicate(tools, true) : cJSON_CreateNull());
    if (ok) ok = put(ctx, "documents", documents ? cJSON_Duplicate(documents, true) : cJSON_CreateNull());
    if (ok) ok = put(ctx, "add_generation_prompt", cJSON_CreateBool(add_generation_prompt));
    if (!ok) {
        cJSON_Delete(ctx);
        cJSON_Delete(msgs);
        sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory building the template context");
        return NULL;
    }
    return ctx;
}

/* Mark, in document order, the number nodes whose literal is a float. */
static void mark_floats(cJSON *node, const bool *is_float, size_t n, size_t *next) {
    for (; node; node = node->next) {
        if (cJSON_IsNumber(node)) {
            if (*next < n && is_float[*next]) node->type |= SP_JSON_FLOAT_FLAG;
            (*next)++;
        }
        mark_floats(node->child, is_float, n, next);
    }
}

cJSON *sp_json_parse(const char *text) {
    cJSON *root = cJSON_Parse(text);
    if (!root) return NULL;
    /* The numbers of valid JSON are the digit runs outside strings that do
     * not follow a letter or digit; cJSON keeps them in the same order. */
    size_t cap = 0, n = 0;
    bool *is_float = NULL;
    bool in_str = false;
    for (const char *p = text; *p; p++) {
        if (in_str) {
            if (*p == '\\' && p[1]) p++;
            else if (*p == '"') in_str = false;
            continue;
        }
        if (*p == '"') {
            in_str = true;
            continue;
        }
        if (*p == '-' || (*p >= '0' && *p <= '9')) {
            bool f = false;
            const char *q = p + 1;
            while (*q && strchr("0123456789.eE+-", *q)) {
                if (*q == '.' || *q == 'e' || *q == 'E') f = true;
                q++;
            }
            if (n == cap) {
                bool *v = realloc(is_float, (cap = cap ? cap * 2 : 64) * sizeof *v);
                if (!v) {
                    free(is_float);
                    return root; /* unmarked: integral floats read as ints */
                }
                is_float = v;
            }
            is_float[n++] = f;
            p = q - 1;
        }
    }
    size_t next = 0;
    mark_floats(root, is_float, n, &next);
    free(is_float);
    return root;
}

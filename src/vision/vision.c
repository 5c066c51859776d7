/* spindle_vision_*: an image file to an embeddings span (include/spindle/
 * vision.h). Gemma 3: decode, the processor's pre-processing
 * (preprocessor_config.json), the SigLIP tower, the projector; the prompt's
 * image markers expanded as Gemma3Processor expands them. */
#include "spindle.h"
#include "vision/gemma3_projector.h"
#include "vision/image.h"
#include "vision/image_cache.h"
#include "base/error.h"
#include "base/mapped_file.h"
#include "base/strbuf.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct spindle_vision {
    spindle_model *m;
    sp_vision_weights vw;
    sp_siglip tower;
    sp_gemma3_projector proj;
    sp_image_prep prep;
    sp_image_limits limits;
    sp_pool *pool;
    spindle_vision_info info;
    char identity[80];   /* the encoder's name and weights, for digests */
    /* One encode at a time (the pool and the tower's scratch); the cache
     * has its own lock, so a hit does not wait for another image. */
    pthread_mutex_t encode_lock;
    uint64_t encodes;     /* under encode_lock */
    sp_image_cache *cache;
};

static const cJSON *item(const cJSON *o, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

static int int_or(const cJSON *o, const char *key, int def) {
    const cJSON *v = item(o, key);
    return cJSON_IsNumber(v) ? v->valueint : def;
}

/* preprocessor_config.json's size, resample, rescale_factor, image_mean
 * and image_std over the defaults of Gemma 3's processor. */
static spindle_status read_processor(spindle_vision *v, spindle_error *err) {
    sp_image_prep *p = &v->prep;
    *p = (sp_image_prep){.width = v->tower.image_size,
                         .height = v->tower.image_size, .resample = 2,
                         .rescale = 1.0 / 255.0, .mean = {0.5f, 0.5f, 0.5f},
                         .std = {0.5f, 0.5f, 0.5f}};
    char *path = sp_path_join(v->m->dir, "preprocessor_config.json");
    if (!path) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    char *text = NULL;
    size_t len = 0;
    spindle_status st = sp_file_exists(path)
                            ? sp_read_text_file(path, &text, &len, err)
                            : SPINDLE_OK;
    cJSON *j = text ? cJSON_ParseWithLength(text, len) : NULL;
    if (text && !j)
        st = sp_fail(err, SPINDLE_ERR_FORMAT, "%s: not valid JSON", path);
    if (j) {
        const cJSON *size = item(j, "size");
        p->width = int_or(size, "width", p->width);
        p->height = int_or(size, "height", p->height);
        p->resample = int_or(j, "resample", p->resample);
        const cJSON *r = item(j, "rescale_factor");
        if (cJSON_IsNumber(r)) p->rescale = r->valuedouble;
        const char *keys[2] = {"image_mean", "image_std"};
        float *dst[2] = {p->mean, p->std};
        for (int k = 0; k < 2; k++) {
            const cJSON *a = item(j, keys[k]);
            for (int c = 0; c < 3 && cJSON_GetArraySize(a) == 3; c++)
                dst[k][c] = (float)cJSON_GetArrayItem(a, c)->valuedouble;
        }
        if (p->width != v->tower.image_size || p->height != v->tower.image_size ||
            p->resample < 1 || p->resample > 5 ||
            p->std[0] == 0.0f || p->std[1] == 0.0f || p->std[2] == 0.0f)
            st = sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                         "%s: size %dx%d, resample %d or image_std are not "
                         "what the vision tower (image_size %d) can take",
                         path, p->width, p->height, p->resample,
                         v->tower.image_size);
    }
    cJSON_Delete(j);
    free(text);
    free(path);
    return st;
}

static spindle_status read_tokens(spindle_vision *v, spindle_error *err) {
    const cJSON *root = v->m->cfg.root;
    const cJSON *text = item(root, "text_config");
    spindle_vision_info *in = &v->info;
    in->image_token = int_or(root, "image_token_index", 262144);
    in->begin_token = int_or(root, "boi_token_index", 255999);
    in->end_token = int_or(root, "eoi_token_index", 256000);
    in->tokens_per_image = int_or(root, "mm_tokens_per_image",
                                  int_or(text, "mm_tokens_per_image", 256));
    in->hidden_size = spindle_model_hidden_size(v->m);
    const int vocab = spindle_model_vocab_size(v->m);
    if (in->image_token < 0 || in->image_token >= vocab || in->begin_token < 0 ||
        in->begin_token >= vocab || in->end_token < 0 || in->end_token >= vocab)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: image_token_index, boi_token_index or "
                       "eoi_token_index is outside the vocabulary (%d)",
                       v->m->dir, vocab);
    return SPINDLE_OK;
}

static spindle_status bind(spindle_vision *v, spindle_error *err) {
    const cJSON *root = v->m->cfg.root;
    const cJSON *type = item(root, "model_type");
    const cJSON *vc = item(root, "vision_config");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "gemma3") ||
        !cJSON_IsObject(vc))
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: images are supported for Gemma 3 vision models "
                       "(model_type \"gemma3\" with a vision_config)", v->m->dir);
    spindle_status st = sp_vision_weights_init(
        &v->vw, v->m, "vision_tower.vision_model.post_layernorm.weight", err);
    if (!st) st = sp_siglip_load(&v->tower, &v->vw, vc, err);
    if (!st) st = read_tokens(v, err);
    /* The language model's embedding factor, as the family computes it for
     * safetensors: sqrt(hidden) rounded to bf16. */
    const float hidden_sqrt = sqrtf((float)v->info.hidden_size);
    const float embed_scale = sp_bf16_to_f32(sp_f32_to_bf16(hidden_sqrt));
    if (!st)
        st = sp_gemma3_projector_load(&v->proj, &v->vw, &v->tower,
                                      v->info.hidden_size,
                                      v->info.tokens_per_image, embed_scale, err);
    if (!st) st = read_processor(v, err);
    return st;
}

spindle_status spindle_vision_new(spindle_model *model,
                                  const spindle_vision_options *options,
                                  spindle_vision **out, spindle_error *err) {
    sp_error_clear(err);
    if (!model || !out) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    *out = NULL;
    spindle_vision_options o = options ? *options : (spindle_vision_options){0};
    spindle_vision *v = calloc(1, sizeof *v);
    if (!v) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    v->m = model;
    v->limits = (sp_image_limits){
        o.max_image_bytes ? o.max_image_bytes : SP_IMAGE_MAX_BYTES_DEFAULT,
        o.max_image_pixels > 0 ? o.max_image_pixels : SP_IMAGE_MAX_PIXELS_DEFAULT};
    pthread_mutex_init(&v->encode_lock, NULL);
    const size_t cache_bytes = o.cache_bytes < 0 ? 0
                               : o.cache_bytes ? (size_t)o.cache_bytes
                                               : SPINDLE_VISION_CACHE_BYTES_DEFAULT;
    v->cache = sp_image_cache_new(cache_bytes);
    spindle_status st = v->cache ? bind(v, err) : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    char fp[SPINDLE_FINGERPRINT_LEN + 1] = "";
    if (!st) st = spindle_model_fingerprint(model, fp, err);
    if (!st) {
        snprintf(v->identity, sizeof v->identity, "gemma3-siglip/%s", fp);
        v->pool = sp_pool_create(o.n_threads);
        if (!v->pool) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    if (st) {
        spindle_vision_free(v);
        return st;
    }
    *out = v;
    return SPINDLE_OK;
}

void spindle_vision_free(spindle_vision *v) {
    if (!v) return;
    sp_pool_destroy(v->pool);
    sp_image_cache_free(v->cache);
    pthread_mutex_destroy(&v->encode_lock);
    sp_gemma3_projector_free(&v->proj);
    sp_siglip_free(&v->tower);
    sp_vision_weights_free(&v->vw);
    free(v);
}

void spindle_vision_describe(const spindle_vision *v, spindle_vision_info *out) {
    if (out) *out = v ? v->info : (spindle_vision_info){0};
}

/* The rows of one image: decode, pre-process, tower, projector. Under
 * encode_lock. */
static spindle_status encode_rows(spindle_vision *v, const void *image, size_t n_bytes,
                                  float **rows, spindle_error *err) {
    sp_image img;
    spindle_status st = sp_image_decode(image, n_bytes, &v->limits, &img, err);
    if (st) return st;
    const sp_siglip *t = &v->tower;
    const size_t n_pixels = (size_t)3 * t->image_size * t->image_size;
    const size_t n_patch = (size_t)t->side * t->side * t->hidden;
    float *pixels = malloc((n_pixels + n_patch) * sizeof *pixels);
    float *out = malloc((size_t)v->info.tokens_per_image * v->info.hidden_size *
                        sizeof *out);
    if (!pixels || !out) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (!st) st = sp_image_preprocess(&img, &v->prep, pixels, err);
    sp_image_free(&img);
    float *patches = pixels ? pixels + n_pixels : NULL;
    if (!st) st = sp_siglip_forward(t, v->pool, pixels, patches, err);
    if (!st) st = sp_gemma3_projector_forward(&v->proj, v->pool, patches, out, err);
    free(pixels);
    if (st) {
        free(out);
        return st;
    }
    v->encodes++;
    *rows = out;
    return SPINDLE_OK;
}

spindle_status spindle_vision_encode(spindle_vision *v, const void *image,
                                     size_t n_bytes, float **rows,
                                     unsigned char digest[SPINDLE_SPAN_DIGEST_BYTES],
                                     spindle_error *err) {
    sp_error_clear(err);
    if (!v || !rows || !digest || (!image && n_bytes))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    *rows = NULL;
    const size_t n_floats = (size_t)v->info.tokens_per_image * v->info.hidden_size;
    /* The digest names the bytes and the encoder, so equal digests are
     * equal rows: the cache's key. */
    spindle_span_digest(image, n_bytes, v->identity, digest);
    if (sp_image_cache_get(v->cache, digest, n_floats, rows)) return SPINDLE_OK;
    pthread_mutex_lock(&v->encode_lock);
    /* Another call may have encoded the same image while this one waited. */
    spindle_status st = SPINDLE_OK;
    if (!sp_image_cache_get(v->cache, digest, n_floats, rows)) {
        st = encode_rows(v, image, n_bytes, rows, err);
        /* Kept before the lock is let go, so that a call waiting with the
         * same image finds it. */
        if (!st) sp_image_cache_put(v->cache, digest, *rows, n_floats);
    }
    pthread_mutex_unlock(&v->encode_lock);
    return st;
}

void spindle_vision_get_stats(spindle_vision *v, spindle_vision_stats *out) {
    *out = (spindle_vision_stats){0};
    if (!v) return;
    sp_image_cache_stats cs;
    sp_image_cache_stats_get(v->cache, &cs);
    pthread_mutex_lock(&v->encode_lock);
    out->encodes = v->encodes;
    pthread_mutex_unlock(&v->encode_lock);
    out->cache_hits = cs.hits;
    out->cache_evictions = cs.evictions;
    out->cache_bytes = cs.bytes;
    out->cache_entries = cs.entries;
}

spindle_status spindle_vision_expand_text(const spindle_vision *v,
                                          const spindle_tokenizer *tok,
                                          const char *text, char **out,
                                          int *n_images, spindle_error *err) {
    sp_error_clear(err);
    if (!v || !tok || !text || !out || !n_images)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    *out = NULL;
    *n_images = 0;
    const char *boi = spindle_tokenizer_id_to_token(tok, v->info.begin_token);
    const char *eoi = spindle_tokenizer_id_to_token(tok, v->info.end_token);
    const char *img = spindle_tokenizer_id_to_token(tok, v->info.image_token);
    if (!boi || !eoi || !img || !boi[0])
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "the tokenizer has no text for the image tokens %d, %d, %d",
                       v->info.begin_token, v->info.image_token, v->info.end_token);
    sp_strbuf b = {0};
    sp_strbuf_reserve(&b, strlen(text));
    const size_t boi_len = strlen(boi);
    for (const char *p = text, *hit; ; p = hit + boi_len) {
        hit = strstr(p, boi);
        sp_strbuf_add(&b, p, hit ? (size_t)(hit - p) : strlen(p));
        if (!hit) break;
        sp_strbuf_printf(&b, "\n\n%s", boi);
        for (int i = 0; i < v->info.tokens_per_image; i++) sp_strbuf_add(&b, img, strlen(img));
        sp_strbuf_printf(&b, "%s\n\n", eoi);
        ++*n_images;
    }
    if (b.oom || !b.p) {
        sp_strbuf_free(&b);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    *out = b.p;   /* spindle_free is free */
    return SPINDLE_OK;
}

spindle_status spindle_vision_prompt_spans(
    const spindle_vision *v, const int32_t *ids, int n_ids,
    float *const *rows, const unsigned char (*digests)[SPINDLE_SPAN_DIGEST_BYTES],
    int n_images, spindle_span **spans, int *n_spans, spindle_error *err) {
    sp_error_clear(err);
    if (!v || (!ids && n_ids) || !spans || !n_spans || n_images < 0 ||
        (n_images && (!rows || !digests)))
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    *spans = NULL;
    *n_spans = 0;
    const int32_t tok = v->info.image_token;
    const int per = v->info.tokens_per_image;
    spindle_span *s = calloc((size_t)2 * n_images + 1, sizeof *s);
    if (!s) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    int n = 0, image = 0;
    for (int i = 0; i < n_ids;) {
        int j = i;
        const bool is_image = ids[i] == tok;
        while (j < n_ids && (ids[j] == tok) == is_image) j++;
        if (is_image && (j - i != per || image == n_images)) {
            free(s);
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "the prompt's image tokens do not match the %d "
                           "images given (a run of %d, each image takes %d)",
                           n_images, j - i, per);
        }
        if (n == 2 * n_images + 1) {   /* more token runs than images allow */
            free(s);
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "the prompt's image tokens do not match the %d "
                           "images given", n_images);
        }
        s[n] = (spindle_span){.kind = SPINDLE_SPAN_TOKENS, .n = j - i,
                              .tokens = ids + i};
        if (is_image) {
            s[n].kind = SPINDLE_SPAN_EMBEDDINGS;
            s[n].embeddings = rows[image];
            memcpy(s[n].digest, digests[image], SPINDLE_SPAN_DIGEST_BYTES);
            s[n].flags = SPINDLE_SPAN_BIDIRECTIONAL;
            image++;
        }
        n++;
        i = j;
    }
    if (image != n_images) {
        free(s);
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "the prompt has %d image markers for %d images", image,
                       n_images);
    }
    *spans = s;
    *n_spans = n;
    return SPINDLE_OK;
}

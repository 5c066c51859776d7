/* spindle_model_describe: what `spindle info` prints, as JSON. */
#include "models/model.h"
#include "models/moe.h"
#include "base/error.h"
#include "compute/ggml/ggml_quants.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tally {
    int64_t params;
    int64_t bytes;
    int counts[8];          /* per sp_wtype */
    char quant[16][24];     /* distinct "4-bit g64" labels */
    int n_quant;
    int ggml[SP_GGML_TYPE_LIMIT]; /* SP_W_GGML weights per ggml type */
} tally;

static void count_weight(tally *t, const sp_weight *w) {
    t->params += w->rows * w->cols;
    t->bytes += (int64_t)sp_weight_nbytes(w);
    t->counts[w->type]++;
    if (w->type == SP_W_GGML && w->ggml_type < SP_GGML_TYPE_LIMIT)
        t->ggml[w->ggml_type]++;
    if (w->type != SP_W_AFFINE && w->type != SP_W_MXFP4) return;
    char label[24];
    if (w->type == SP_W_MXFP4)
        snprintf(label, sizeof label, "mxfp4");
    else
        snprintf(label, sizeof label, "%d-bit g%d", w->bits, w->group_size);
    for (int i = 0; i < t->n_quant; i++)
        if (!strcmp(t->quant[i], label)) return;
    if (t->n_quant < 16) strcpy(t->quant[t->n_quant++], label);
}

static void count_linear(tally *t, const sp_linear *l, int64_t *vec) {
    if (l->w.rows == 0) return;   /* absent in this architecture */
    count_weight(t, &l->w);
    if (l->bias) *vec += l->w.rows;
}

/* Names of the sp_wtype counts (GGML weights are counted per ggml type). */
static const char *wtype_name(int t) {
    static const char *names[] = {"F32", "F16", "BF16", "MLX affine", NULL,
                                  "MLX mxfp4"};
    return t >= 0 && t < (int)(sizeof names / sizeof *names) ? names[t] : NULL;
}

spindle_status spindle_model_describe(const spindle_model *m, char **json,
                                      spindle_error *err) {
    const sp_model_config *c = &m->cfg;
    tally t = {0};
    int64_t vec = 0;   /* elements of small float vectors (norms, biases) */
    /* MoE layers: what a token does not read (the experts it skips). */
    int64_t idle_params = 0, idle_bytes = 0;
    int moe_layers = 0;
    const sp_moe *moe = NULL;
    count_weight(&t, &m->embed);
    if (!m->tied) count_linear(&t, &m->lm_head, &vec);
    vec += c->hidden_size;
    for (int l = 0; l < c->n_layers; l++) {
        const sp_layer *L = &m->layers[l];
        const sp_linear *lin[] = {&L->q, &L->k, &L->v, &L->o,
                                  &L->gate, &L->up, &L->down};
        for (size_t i = 0; i < sizeof lin / sizeof *lin; i++)
            count_linear(&t, lin[i], &vec);
        const float *norms[] = {L->attn_norm, L->mlp_norm, L->post_attn_norm,
                                L->post_mlp_norm};
        for (size_t i = 0; i < sizeof norms / sizeof *norms; i++)
            if (norms[i]) vec += c->hidden_size;
        if (m->arch->layer_extra) {
            /* (room for a latent attention's per-head matrices) */
            const sp_linear *extra[1024];
            int n = m->arch->layer_extra(m, l, extra, 1024, &vec);
            for (int i = 0; i < n; i++) count_linear(&t, extra[i], &vec);
        }
        if (L->q_norm)
            vec += L->qk_norm_full
                       ? (int64_t)(c->n_heads + c->n_kv_heads) * c->head_dim
                       : 2 * c->head_dim;
        if (L->moe || L->moe_beside) {
            moe = L->moe ? L->moe : L->moe_beside;
            const sp_linear *always[] = {&moe->router, &moe->shared_gate_proj,
                                         &moe->shared_up, &moe->shared_down,
                                         &moe->shared_expert_gate};
            for (size_t i = 0; i < sizeof always / sizeof *always; i++)
                count_linear(&t, always[i], &vec);
            if (moe->score_bias) vec += moe->spec.n_experts;
            for (int e = 0; e < moe->spec.n_experts; e++) {
                count_linear(&t, &moe->gate[e], &vec);
                count_linear(&t, &moe->up[e], &vec);
                count_linear(&t, &moe->down[e], &vec);
            }
            sp_moe_size z = sp_moe_measure(moe);
            idle_params += z.params - z.active_params;
            idle_bytes += z.bytes - z.active_bytes;
            moe_layers++;
        }
    }
    t.params += vec;
    t.bytes += vec * (int64_t)sp_dtype_size(c->torch_dtype);

    cJSON *o = cJSON_CreateObject();
    if (!o) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    cJSON_AddStringToObject(o, "path", m->dir);
    cJSON_AddStringToObject(o, "model_type", c->model_type);
    cJSON_AddNumberToObject(o, "hidden_size", c->hidden_size);
    cJSON_AddNumberToObject(o, "num_hidden_layers", c->n_layers);
    cJSON_AddNumberToObject(o, "intermediate_size", c->intermediate_size);
    cJSON_AddNumberToObject(o, "num_attention_heads", c->n_heads);
    cJSON_AddNumberToObject(o, "num_key_value_heads", c->n_kv_heads);
    cJSON_AddNumberToObject(o, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(o, "context_length", m->max_context);
    /* Each layer's sequence state kind (runtime/seq_state.h). */
    static const char *const kind_keys[] = {"full_kv", "window_kv",
                                            "recurrent", "none", "latent_kv"};
    int kinds[5] = {0};
    for (int l = 0; l < c->n_layers; l++)
        if ((int)m->state_desc[l].kind >= 0 && (int)m->state_desc[l].kind < 5)
            kinds[m->state_desc[l].kind]++;
    cJSON *state = cJSON_AddObjectToObject(o, "state");
    for (int k = 0; state && k < 5; k++)
        if (k < 3 || kinds[k])
            cJSON_AddNumberToObject(state, kind_keys[k], kinds[k]);
    if (state) cJSON_AddNumberToObject(state, "max_rollback", m->max_rollback);
    cJSON_AddNumberToObject(o, "rms_norm_eps", c->rms_norm_eps);
    cJSON_AddNumberToObject(o, "rope_theta", c->rope.theta);
    static const char *rope_names[] = {"default", "linear", "llama3", "yarn",
                                       "longrope", "proportional"};
    _Static_assert(sizeof rope_names / sizeof *rope_names ==
                       SP_ROPE_PROPORTIONAL + 1, "a name per sp_rope_type");
    cJSON_AddStringToObject(o, "rope_scaling", rope_names[c->rope.type]);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", m->tied);
    cJSON_AddStringToObject(o, "torch_dtype", sp_dtype_name(c->torch_dtype));
    cJSON *eos = cJSON_AddArrayToObject(o, "eos_token_ids");
    for (int i = 0; eos && i < c->n_eos; i++)
        cJSON_AddItemToArray(eos, cJSON_CreateNumber(c->eos_ids[i]));
    cJSON *types = cJSON_AddObjectToObject(o, "weight_types");
    for (int i = 0; types && i < 8; i++)
        if (t.counts[i] && wtype_name(i))
            cJSON_AddNumberToObject(types, wtype_name(i), t.counts[i]);
    /* GGUF block formats by ggml's names ("Q4_K"); a GGUF F32 matrix adds
     * to "F32" above. */
    for (int i = 0; types && i < SP_GGML_TYPE_LIMIT; i++)
        if (t.ggml[i] && sp_ggml_type_name((uint32_t)i))
            cJSON_AddNumberToObject(types, sp_ggml_type_name((uint32_t)i),
                                    t.ggml[i]);
    if (m->gguf) cJSON_AddStringToObject(o, "format", "gguf");
    if (c->quantized) {
        cJSON *q = cJSON_AddObjectToObject(o, "quantization");
        cJSON_AddNumberToObject(q, "bits", c->quant_bits);
        cJSON_AddNumberToObject(q, "group_size", c->quant_group_size);
        cJSON *used = cJSON_AddArrayToObject(q, "used");
        for (int i = 0; used && i < t.n_quant; i++)
            cJSON_AddItemToArray(used, cJSON_CreateString(t.quant[i]));
    }
    if (moe) {
        cJSON *x = cJSON_AddObjectToObject(o, "experts");
        cJSON_AddNumberToObject(x, "count", moe->spec.n_experts);
        cJSON_AddNumberToObject(x, "used_per_token", moe->spec.top_k);
        cJSON_AddNumberToObject(x, "intermediate_size", (double)moe->spec.inter);
        if (moe->spec.shared_inter > 0)
            cJSON_AddNumberToObject(x, "shared_intermediate_size",
                                    (double)moe->spec.shared_inter);
        cJSON_AddNumberToObject(x, "moe_layers", moe_layers);
    }
    cJSON_AddNumberToObject(o, "parameters", (double)t.params);
    cJSON_AddNumberToObject(o, "bytes", (double)t.bytes);
    if (moe) {
        /* Read per token: everything but the experts a token skips. */
        cJSON_AddNumberToObject(o, "active_parameters",
                                (double)(t.params - idle_params));
        cJSON_AddNumberToObject(o, "active_bytes",
                                (double)(t.bytes - idle_bytes));
    }
    cJSON_AddNumberToObject(o, "tensors", (double)sp_model_tensor_count(m));
    *json = cJSON_Print(o);
    cJSON_Delete(o);
    return *json ? SPINDLE_OK : sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
}

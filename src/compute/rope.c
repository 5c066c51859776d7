/* Rotary position embeddings: inverse frequencies per scaling type and the
 * rotate-half application.
 *
 * Parity target is mlx-lm (mlx_lm/models/rope_utils.py); transformers'
 * ROPE_INIT_FUNCTIONS (modeling_rope_utils.py) computes the same quantities
 * except where noted below, and there mlx-lm is followed:
 *  - llama3: mlx-lm's "medium frequency" band is open,
 *    high_freq_wavelen < wavelen < low_freq_wavelen, and only
 *    wavelen > low_freq_wavelen is divided by factor; transformers closes the
 *    band. They differ only when a wavelength equals low_freq_wavelen exactly
 *    (mlx-lm leaves it unscaled, transformers divides it by factor).
 *  - yarn correction range: mlx-lm always floors/ceils it; transformers skips
 *    that when rope_parameters.truncate is false (gpt-oss sets it).
 *  - yarn attention factor: mlx-lm computes
 *    get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) with
 *    mscale defaulting to 1 and mscale_all_dim to 0, whichever are present;
 *    transformers uses that ratio only when both are present and non-zero,
 *    and get_mscale(factor) otherwise. mlx-lm ignores an explicit
 *    attention_factor; the header's contract honors it (> 0), so a loader
 *    aiming at mlx-lm parity leaves it 0.
 *  - Both libraries evaluate the formulas in float32; here they are evaluated
 *    in double and rounded once to float, so entries may differ from either
 *    reference by an ulp or so (the references also differ from each other
 *    at that level: mlx-lm inverts frequencies, transformers divides them).
 *  - longrope (mlx-lm's SuScaledRoPE): the frequencies are always divided
 *    by long_factor (transformers switches to short_factor below the
 *    original context), and the rotated dimensions are scaled by
 *    sqrt(1 + log(factor) / log(original context)) when factor > 1.
 * Defaults for absent (<= 0) values follow mlx-lm: llama3 low/high freq
 * factor 1/4, original context 8192; yarn beta_fast/beta_slow 32/1, original
 * context 4096. */
#include "compute/ops.h"

#include <math.h>
#include <stdlib.h>

static double or_default(double v, double dflt) { return v > 0.0 ? v : dflt; }

/* base^(2i/dim): the wavelength-per-radian of pair i. */
static double base_freq(double theta, int i, int dim) {
    return pow(theta, (double)(2 * i) / (double)dim);
}

static void init_llama3(float *inv, int half, int dim,
                        const sp_rope_config *c) {
    double factor = c->factor;
    double lff = or_default(c->low_freq_factor, 1.0);
    double hff = or_default(c->high_freq_factor, 4.0);
    double old_ctx = c->original_max_position > 0 ? c->original_max_position
                                                  : 8192.0;
    double low_wl = old_ctx / lff, high_wl = old_ctx / hff;
    for (int i = 0; i < half; i++) {
        double f = base_freq(c->theta, i, dim);
        double wl = 2.0 * M_PI * f;
        double r;
        if (wl > low_wl) {
            r = 1.0 / (f * factor);
        } else if (wl > high_wl) { /* open band, as in mlx-lm */
            double s = (old_ctx / wl - lff) / (hff - lff);
            r = ((1.0 - s) / factor + s) / f;
        } else {
            r = 1.0 / f;
        }
        inv[i] = (float)r;
    }
}

/* Dimension index at which the pair completes num_rot rotations over the
 * original context (YaRN paper, "find_correction_dim"). */
static double yarn_correction_dim(double num_rot, int dim, double base,
                                  double orig_ctx) {
    return (dim * log(orig_ctx / (num_rot * 2.0 * M_PI))) / (2.0 * log(base));
}

static double yarn_get_mscale(double scale, double mscale) {
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

static float init_yarn(float *inv, int half, int dim,
                       const sp_rope_config *c) {
    double factor = c->factor;
    double beta_fast = or_default(c->beta_fast, 32.0);
    double beta_slow = or_default(c->beta_slow, 1.0);
    double orig = c->original_max_position > 0 ? c->original_max_position
                                               : 4096.0;
    double low = floor(yarn_correction_dim(beta_fast, dim, c->theta, orig));
    double high = ceil(yarn_correction_dim(beta_slow, dim, c->theta, orig));
    if (low < 0.0) low = 0.0;
    if (high > dim - 1) high = dim - 1;
    if (low == high) high += 0.001; /* avoid 0/0 in the ramp */
    for (int i = 0; i < half; i++) {
        double ramp = ((double)i - low) / (high - low);
        ramp = ramp < 0.0 ? 0.0 : ramp > 1.0 ? 1.0 : ramp;
        double extra_w = 1.0 - ramp; /* weight of the unscaled frequency */
        double f = base_freq(c->theta, i, dim);
        inv[i] = (float)(extra_w / f + (1.0 - extra_w) / (f * factor));
    }
    if (c->attention_factor > 0.0) return (float)c->attention_factor;
    /* mscale absent (0) means 1 and mscale_all_dim absent means 0, as the
     * defaults of mlx-lm's YarnRoPE; get_mscale(., 0) is 1. */
    double ms = or_default(c->mscale, 1.0);
    return (float)(yarn_get_mscale(factor, ms) /
                   yarn_get_mscale(factor, c->mscale_all_dim));
}

static float init_longrope(float *inv, int half, int dim,
                           const sp_rope_config *c) {
    for (int i = 0; i < half; i++)
        inv[i] = (float)(1.0 / ((double)c->long_factor[i] *
                                base_freq(c->theta, i, dim)));
    double orig = c->original_max_position > 0 ? c->original_max_position
                                               : 4096.0;
    if (c->factor <= 1.0) return 1.0f;
    return (float)sqrt(1.0 + log(c->factor) / log(orig));
}

int sp_rope_init(sp_rope *rope, const sp_rope_config *cfg) {
    rope->rotary_dim = 0;
    rope->inv_freq = NULL;
    rope->attn_scale = 1.0f;
    int dim = cfg->rotary_dim;
    if (dim <= 0 || dim % 2 != 0 || !(cfg->theta > 0.0)) return -1;
    if (cfg->type != SP_ROPE_DEFAULT && !(cfg->factor > 0.0)) return -1;
    if (cfg->type == SP_ROPE_LONGROPE && !cfg->long_factor) return -1;
    if (cfg->type == SP_ROPE_PROPORTIONAL &&
        (cfg->rotated_dim < 0 || cfg->rotated_dim > dim ||
         cfg->rotated_dim % 2))
        return -1;
    if (cfg->type == SP_ROPE_LLAMA3 &&
        or_default(cfg->low_freq_factor, 1.0) ==
            or_default(cfg->high_freq_factor, 4.0))
        return -1;
    int half = dim / 2;
    float *inv = malloc((size_t)half * sizeof *inv);
    if (!inv) return -1;
    float attn = 1.0f;
    switch (cfg->type) {
    case SP_ROPE_DEFAULT:
    case SP_ROPE_LINEAR: {
        /* mlx-lm scales positions by 1/factor instead; same product. */
        double div = cfg->type == SP_ROPE_LINEAR ? cfg->factor : 1.0;
        for (int i = 0; i < half; i++)
            inv[i] = (float)(1.0 / (base_freq(cfg->theta, i, dim) * div));
        break;
    }
    case SP_ROPE_PROPORTIONAL:
        /* mlx-lm's ProportionalRoPE: frequencies factor * base^(2i/dim),
         * infinite (angle 0) past the rotated pairs. */
        for (int i = 0; i < half; i++)
            inv[i] = 2 * i < cfg->rotated_dim
                         ? (float)(1.0 / (base_freq(cfg->theta, i, dim) *
                                          cfg->factor))
                         : 0.0f;
        break;
    case SP_ROPE_LLAMA3:
        init_llama3(inv, half, dim, cfg);
        break;
    case SP_ROPE_YARN:
        attn = init_yarn(inv, half, dim, cfg);
        break;
    case SP_ROPE_LONGROPE:
        attn = init_longrope(inv, half, dim, cfg);
        break;
    default:
        free(inv);
        return -1;
    }
    rope->rotary_dim = dim;
    rope->inv_freq = inv;
    rope->attn_scale = attn;
    return 0;
}

void sp_rope_free(sp_rope *rope) {
    if (!rope) return;
    free(rope->inv_freq);
    rope->inv_freq = NULL;
    rope->rotary_dim = 0;
}

/* cos/sin are computed once per call for all heads, a chunk at a time so the
 * tables live on the stack whatever rotary_dim is. */
#define SP_ROPE_CHUNK 64

/* cos and sin (times attn_scale) of the angles pos * inv_freq[i0 + j] for
 * j < m. The angle is rounded to float as both references do (transformers:
 * f32 inv_freq @ f32 positions; mlx: f32 theta); at large positions this
 * rounding is what they compute. */
static void angle_table(const sp_rope *rope, int pos, int i0, int m,
                        float *cs, float *sn) {
    for (int j = 0; j < m; j++) {
        float ang = (float)pos * rope->inv_freq[i0 + j];
        cs[j] = cosf(ang) * rope->attn_scale;
        sn[j] = sinf(ang) * rope->attn_scale;
    }
}

void sp_rope_apply(const sp_rope *rope, float *x, int n_heads, int head_dim,
                   int pos) {
    /* A rope wider than the head is a caller bug; never write past it. */
    if (!rope->inv_freq || rope->rotary_dim > head_dim) return;
    int half = rope->rotary_dim / 2;
    float cs[SP_ROPE_CHUNK], sn[SP_ROPE_CHUNK];
    for (int i0 = 0; i0 < half; i0 += SP_ROPE_CHUNK) {
        int m = half - i0 < SP_ROPE_CHUNK ? half - i0 : SP_ROPE_CHUNK;
        angle_table(rope, pos, i0, m, cs, sn);
        for (int h = 0; h < n_heads; h++) {
            float *a = x + (size_t)h * (size_t)head_dim + i0;
            float *b = a + half;
            for (int j = 0; j < m; j++) {
                float x0 = a[j], x1 = b[j];
                a[j] = x0 * cs[j] - x1 * sn[j];
                b[j] = x1 * cs[j] + x0 * sn[j];
            }
        }
    }
}

/* Interleaved ("traditional", GPT-J) pairs (2i, 2i + 1) with the angles of
 * sp_rope_apply. It is rotate-half on a permuted head: llama.cpp's converter
 * permutes Llama q/k rows into this order, and mlx-lm's rope_traditional
 * means it. */
void sp_rope_apply_interleaved(const sp_rope *rope, float *x, int n_heads,
                               int head_dim, int pos) {
    if (!rope->inv_freq || rope->rotary_dim > head_dim) return;
    int half = rope->rotary_dim / 2;
    float cs[SP_ROPE_CHUNK], sn[SP_ROPE_CHUNK];
    for (int i0 = 0; i0 < half; i0 += SP_ROPE_CHUNK) {
        int m = half - i0 < SP_ROPE_CHUNK ? half - i0 : SP_ROPE_CHUNK;
        angle_table(rope, pos, i0, m, cs, sn);
        for (int h = 0; h < n_heads; h++) {
            float *a = x + (size_t)h * (size_t)head_dim + 2 * i0;
            for (int j = 0; j < m; j++) {
                float x0 = a[2 * j], x1 = a[2 * j + 1];
                a[2 * j] = x0 * cs[j] - x1 * sn[j];
                a[2 * j + 1] = x1 * cs[j] + x0 * sn[j];
            }
        }
    }
}

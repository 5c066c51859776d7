/* Runs one linear-attention layer's kernels (src/compute/linear_attention/)
 * on raw f32 inputs, for tests/unit_py/test_gated_delta_vs_mlx.py, which
 * compares them with mlx-lm's own functions:
 *
 *   delta_harness T HK HV DK DV KERNEL FORM THREADS SPLIT N_SNAP IN OUT
 *
 * IN holds, as little-endian f32 one after the other:
 *   x [T][C] (the q|k|v rows before the convolution, C = 2 HK DK + HV DV),
 *   conv weights [C][KERNEL] (the files' layout), window [KERNEL-1][C],
 *   a [T][HV], b [T][HV], A_log [HV], dt_bias [HV], z [T][HV DV],
 *   norm weight [DV], state [HV][DV][DK].
 * The tokens go through in two calls, [0, SPLIT) and [SPLIT, T) (SPLIT 0:
 * one call), each doing conv1d + SiLU, prepare, the delta rule in FORM
 * (auto|recurrent|chunked) and the gated norm; the second call takes
 * N_SNAP snapshots. OUT receives, as f32: y [T][HV DV] (after the gated
 * norm), the final state, the final window, then N_SNAP states and N_SNAP
 * windows. Exit status 2 on bad arguments, 1 on a failed call. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/linear_attention/linear_attention.h"
#include "compute/threadpool.h"

static float *take(float **cursor, size_t n) {
    float *p = *cursor;
    *cursor += n;
    return p;
}

typedef struct layer {
    int hk, hv, dk, dv, kernel, channels;
    const float *x, *w_t, *a_scale, *dt_bias, *a, *b, *z, *norm_w;
    float *window, *state, *y;
    sp_delta_form form;
    sp_pool *pool;
} layer;

/* Tokens [t0, t0 + n) of the layer, n_snap snapshots into snaps/wsnaps. */
static int run(const layer *L, int t0, int n, int n_snap, float **snaps,
               float **wsnaps) {
    const int C = L->channels, vw = L->hv * L->dv;
    float *conv = malloc(sizeof(float) * (size_t)n * C);
    float *a = malloc(sizeof(float) * (size_t)n * L->hv);
    float *b = malloc(sizeof(float) * (size_t)n * L->hv);
    float *out = malloc(sizeof(float) * (size_t)n * vw);
    if (!conv || !a || !b || !out) return 1;
    memcpy(a, L->a + (size_t)t0 * L->hv, sizeof(float) * (size_t)n * L->hv);
    memcpy(b, L->b + (size_t)t0 * L->hv, sizeof(float) * (size_t)n * L->hv);
    spindle_error err = {0};
    const sp_conv1d_args ca = {
        .n_tokens = n, .channels = C, .kernel = L->kernel,
        .x = L->x + (size_t)t0 * C, .x_stride = C, .w_t = L->w_t,
        .window = L->window, .out = conv, .out_stride = C,
        .window_snapshots = wsnaps, .n_snapshots = n_snap};
    int rc = 0;
    if (sp_conv1d_silu(L->pool, &ca, &err) != SPINDLE_OK) goto fail;
    const sp_delta_prepare_args pa = {
        .n_tokens = n, .n_k_heads = L->hk, .k_dim = L->dk, .q = conv,
        .k = conv + L->hk * L->dk, .qk_stride = C, .n_v_heads = L->hv,
        .a = a, .b = b, .a_scale = L->a_scale, .dt_bias = L->dt_bias};
    sp_gated_delta_prepare(&pa);
    const sp_gated_delta_args da = {
        .n_tokens = n, .n_k_heads = L->hk, .n_v_heads = L->hv,
        .k_dim = L->dk, .v_dim = L->dv, .q = conv,
        .k = conv + L->hk * L->dk, .qk_stride = C,
        .v = conv + 2 * L->hk * L->dk, .v_stride = C, .log_g = a, .beta = b,
        .state = L->state, .out = out, .out_stride = vw, .snapshots = snaps,
        .n_snapshots = n_snap, .form = L->form};
    if (sp_gated_delta(L->pool, &da, &err) != SPINDLE_OK) goto fail;
    for (int t = 0; t < n; t++)
        sp_rmsnorm_gated(L->y + (size_t)(t0 + t) * vw, out + (size_t)t * vw,
                         L->z + (size_t)(t0 + t) * vw, L->norm_w, L->hv,
                         L->dv, 1e-6f);
    goto done;
fail:
    fprintf(stderr, "delta_harness: %s\n", err.message);
    rc = 1;
done:
    free(conv);
    free(a);
    free(b);
    free(out);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 13) {
        fprintf(stderr, "usage: delta_harness T HK HV DK DV KERNEL FORM "
                        "THREADS SPLIT N_SNAP IN OUT\n");
        return 2;
    }
    const int T = atoi(argv[1]), split = atoi(argv[9]), n_snap = atoi(argv[10]);
    layer L = {.hk = atoi(argv[2]), .hv = atoi(argv[3]), .dk = atoi(argv[4]),
               .dv = atoi(argv[5]), .kernel = atoi(argv[6])};
    if (!strcmp(argv[7], "auto")) L.form = SP_DELTA_AUTO;
    else if (!strcmp(argv[7], "recurrent")) L.form = SP_DELTA_RECURRENT;
    else if (!strcmp(argv[7], "chunked")) L.form = SP_DELTA_CHUNKED;
    else return 2;
    if (T < 1 || split < 0 || split >= T || n_snap < 0 || n_snap > T - split ||
        L.kernel < 1)
        return 2;
    L.channels = 2 * L.hk * L.dk + L.hv * L.dv;
    const int C = L.channels, K = L.kernel, vw = L.hv * L.dv;
    const size_t state_n = (size_t)L.hv * L.dv * L.dk;
    const size_t in_n = (size_t)T * C + (size_t)C * K + (size_t)(K - 1) * C +
                        2 * (size_t)T * L.hv + 2 * (size_t)L.hv +
                        (size_t)T * vw + (size_t)L.dv + state_n;
    float *in = malloc(sizeof(float) * in_n);
    FILE *f = fopen(argv[11], "rb");
    if (!in || !f || fread(in, sizeof(float), in_n, f) != in_n) return 2;
    fclose(f);
    float *cur = in;
    L.x = take(&cur, (size_t)T * C);
    const float *w = take(&cur, (size_t)C * K);
    L.window = take(&cur, (size_t)(K - 1) * C);
    L.a = take(&cur, (size_t)T * L.hv);
    L.b = take(&cur, (size_t)T * L.hv);
    float *A_log = take(&cur, L.hv);
    L.dt_bias = take(&cur, L.hv);
    L.z = take(&cur, (size_t)T * vw);
    L.norm_w = take(&cur, L.dv);
    L.state = take(&cur, state_n);

    float *w_t = malloc(sizeof(float) * (size_t)C * K);
    const size_t out_n = (size_t)T * vw + state_n + (size_t)(K - 1) * C +
                         (size_t)n_snap * (state_n + (size_t)(K - 1) * C);
    float *outbuf = calloc(out_n, sizeof(float));
    float *snaps[64], *wsnaps[64];
    if (!w_t || !outbuf || n_snap > 64) return 1;
    for (int c = 0; c < C; c++)
        for (int j = 0; j < K; j++) w_t[(size_t)j * C + c] = w[(size_t)c * K + j];
    L.w_t = w_t;
    for (int h = 0; h < L.hv; h++) A_log[h] = -expf(A_log[h]); /* in place */
    L.a_scale = A_log;
    L.y = outbuf;
    float *snap_base = outbuf + (size_t)T * vw + state_n + (size_t)(K - 1) * C;
    for (int i = 0; i < n_snap; i++) {
        snaps[i] = snap_base + (size_t)i * state_n;
        wsnaps[i] = snap_base + (size_t)n_snap * state_n + (size_t)i * (K - 1) * C;
    }
    L.pool = sp_pool_create(atoi(argv[8]));
    int rc = 0;
    if (split > 0) rc = run(&L, 0, split, 0, NULL, NULL);
    if (!rc) rc = run(&L, split, T - split, n_snap, snaps, wsnaps);
    sp_pool_destroy(L.pool);
    if (rc) return rc;
    memcpy(outbuf + (size_t)T * vw, L.state, sizeof(float) * state_n);
    memcpy(outbuf + (size_t)T * vw + state_n, L.window,
           sizeof(float) * (size_t)(K - 1) * C);
    f = fopen(argv[12], "wb");
    if (!f || fwrite(outbuf, sizeof(float), out_n, f) != out_n) return 1;
    fclose(f);
    free(in);
    free(w_t);
    free(outbuf);
    return 0;
}

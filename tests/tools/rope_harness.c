/* Prints sp_rope_init's result for a config given as key=value arguments,
 * as one JSON object, for tests/unit_py/test_rope_reference.py:
 *   rope_harness type=yarn rotary_dim=128 theta=1e6 factor=4 \
 *                original_max_position=32768 [apply_pos=P head_dim=H n_heads=N]
 * -> {"rotary_dim":128,"attn_scale":...,"inv_freq":[...]
 *     [,"x":[...],"y":[...]]}
 * With apply_pos, x is a fixed pattern of n_heads * head_dim floats and y is
 * sp_rope_apply(x) at that position. Floats print with 9 significant digits
 * (exact round trip). Exit status 2 on a bad argument, 1 if init fails. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "compute/ops.h"

static int parse_double(const char *s, double *out) {
    char *end;
    *out = strtod(s, &end);
    return end != s && *end == '\0';
}

static void print_array(const char *name, const float *v, int n) {
    printf(",\"%s\":[", name);
    for (int i = 0; i < n; i++) printf("%s%.9g", i ? "," : "", v[i]);
    printf("]");
}

int main(int argc, char **argv) {
    sp_rope_config c = {.type = SP_ROPE_DEFAULT, .theta = 10000.0};
    double apply_pos = -1, head_dim = 0, n_heads = 1;
    static const struct { const char *key; size_t off; } fields[] = {
        {"theta", offsetof(sp_rope_config, theta)},
        {"factor", offsetof(sp_rope_config, factor)},
        {"low_freq_factor", offsetof(sp_rope_config, low_freq_factor)},
        {"high_freq_factor", offsetof(sp_rope_config, high_freq_factor)},
        {"beta_fast", offsetof(sp_rope_config, beta_fast)},
        {"beta_slow", offsetof(sp_rope_config, beta_slow)},
        {"mscale", offsetof(sp_rope_config, mscale)},
        {"mscale_all_dim", offsetof(sp_rope_config, mscale_all_dim)},
        {"attention_factor", offsetof(sp_rope_config, attention_factor)},
    };
    int a;
    for (a = 1; a < argc; a++) {
        char *eq = strchr(argv[a], '=');
        if (!eq) goto bad;
        *eq = '\0';
        const char *k = argv[a], *v = eq + 1;
        double d;
        if (strcmp(k, "type") == 0) {
            if (strcmp(v, "default") == 0) c.type = SP_ROPE_DEFAULT;
            else if (strcmp(v, "linear") == 0) c.type = SP_ROPE_LINEAR;
            else if (strcmp(v, "llama3") == 0) c.type = SP_ROPE_LLAMA3;
            else if (strcmp(v, "yarn") == 0) c.type = SP_ROPE_YARN;
            else goto bad;
            continue;
        }
        if (!parse_double(v, &d)) goto bad;
        int found = 0;
        for (size_t f = 0; f < sizeof fields / sizeof *fields; f++)
            if (strcmp(k, fields[f].key) == 0) {
                *(double *)((char *)&c + fields[f].off) = d;
                found = 1;
            }
        if (found) continue;
        if (strcmp(k, "rotary_dim") == 0) c.rotary_dim = (int)d;
        else if (strcmp(k, "original_max_position") == 0)
            c.original_max_position = (int)d;
        else if (strcmp(k, "apply_pos") == 0) apply_pos = d;
        else if (strcmp(k, "head_dim") == 0) head_dim = d;
        else if (strcmp(k, "n_heads") == 0) n_heads = d;
        else goto bad;
    }

    sp_rope r;
    if (sp_rope_init(&r, &c) != 0) {
        fprintf(stderr, "rope_harness: sp_rope_init failed\n");
        return 1;
    }
    printf("{\"rotary_dim\":%d,\"attn_scale\":%.9g", r.rotary_dim,
           r.attn_scale);
    print_array("inv_freq", r.inv_freq, r.rotary_dim / 2);
    if (apply_pos >= 0) {
        int hd = head_dim > 0 ? (int)head_dim : r.rotary_dim;
        int n = (int)n_heads * hd;
        float *x = malloc(sizeof(float) * (size_t)n);
        if (!x || hd < r.rotary_dim || n <= 0) return 1;
        for (int i = 0; i < n; i++) x[i] = (float)sin(0.37 * i + 0.1) * 2.0f;
        print_array("x", x, n);
        sp_rope_apply(&r, x, (int)n_heads, hd, (int)apply_pos);
        print_array("y", x, n);
        free(x);
    }
    printf("}\n");
    sp_rope_free(&r);
    return 0;
bad:
    fprintf(stderr, "rope_harness: bad argument '%s'\n", argv[a]);
    return 2;
}

/* GGUF metadata access: scalar decoding, lossless conversions, array
 * elements and the typed getters that report errors naming file and key. */
#include "artifacts/gguf.h"
#include "base/error.h"

#include <string.h>

const char *sp_gguf_type_name(sp_gguf_type t) {
    static const char *names[SP_GGUF_TYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32",
        "bool", "string", "array", "u64", "i64", "f64"};
    return (unsigned)t < SP_GGUF_TYPE_COUNT ? names[t] : "?";
}

size_t sp_gguf_scalar_size(uint32_t t) {
    switch (t) {
    case SP_GGUF_U8: case SP_GGUF_I8: case SP_GGUF_BOOL: return 1;
    case SP_GGUF_U16: case SP_GGUF_I16: return 2;
    case SP_GGUF_U32: case SP_GGUF_I32: case SP_GGUF_F32: return 4;
    case SP_GGUF_U64: case SP_GGUF_I64: case SP_GGUF_F64: return 8;
    default: return 0;
    }
}

void sp_gguf_decode_scalar(sp_gguf_type t, const unsigned char *p,
                           sp_gguf_value *v) {
    v->type = t;
    switch (t) {
    case SP_GGUF_U8: case SP_GGUF_BOOL: v->as.u = p[0]; break;
    case SP_GGUF_I8: v->as.i = (int8_t)p[0]; break;
    case SP_GGUF_U16: { uint16_t x; memcpy(&x, p, 2); v->as.u = x; break; }
    case SP_GGUF_I16: { int16_t x; memcpy(&x, p, 2); v->as.i = x; break; }
    case SP_GGUF_U32: { uint32_t x; memcpy(&x, p, 4); v->as.u = x; break; }
    case SP_GGUF_I32: { int32_t x; memcpy(&x, p, 4); v->as.i = x; break; }
    case SP_GGUF_F32: { float x; memcpy(&x, p, 4); v->as.f = x; break; }
    case SP_GGUF_U64: { uint64_t x; memcpy(&x, p, 8); v->as.u = x; break; }
    case SP_GGUF_I64: { int64_t x; memcpy(&x, p, 8); v->as.i = x; break; }
    case SP_GGUF_F64: { double x; memcpy(&x, p, 8); v->as.f = x; break; }
    default: break;
    }
}

static bool is_unsigned(sp_gguf_type t) {
    return t == SP_GGUF_U8 || t == SP_GGUF_U16 || t == SP_GGUF_U32 || t == SP_GGUF_U64;
}

static bool is_signed(sp_gguf_type t) {
    return t == SP_GGUF_I8 || t == SP_GGUF_I16 || t == SP_GGUF_I32 || t == SP_GGUF_I64;
}

bool sp_gguf_value_i64(const sp_gguf_value *v, int64_t *out) {
    if (is_signed(v->type)) {
        *out = v->as.i;
        return true;
    }
    if (is_unsigned(v->type) && v->as.u <= (uint64_t)INT64_MAX) {
        *out = (int64_t)v->as.u;
        return true;
    }
    return false;
}

bool sp_gguf_value_u64(const sp_gguf_value *v, uint64_t *out) {
    if (is_unsigned(v->type)) {
        *out = v->as.u;
        return true;
    }
    if (is_signed(v->type) && v->as.i >= 0) {
        *out = (uint64_t)v->as.i;
        return true;
    }
    return false;
}

bool sp_gguf_value_f64(const sp_gguf_value *v, double *out) {
    if (v->type != SP_GGUF_F32 && v->type != SP_GGUF_F64) return false;
    *out = v->as.f;
    return true;
}

bool sp_gguf_value_number(const sp_gguf_value *v, double *out) {
    if (is_signed(v->type)) *out = (double)v->as.i;
    else if (is_unsigned(v->type)) *out = (double)v->as.u;
    else return sp_gguf_value_f64(v, out);
    return true;
}

bool sp_gguf_value_bool(const sp_gguf_value *v, bool *out) {
    if (v->type != SP_GGUF_BOOL) return false;
    *out = v->as.u != 0;
    return true;
}

bool sp_gguf_value_str(const sp_gguf_value *v, sp_gguf_str *out) {
    if (v->type != SP_GGUF_STRING) return false;
    *out = v->as.s;
    return true;
}

uint64_t sp_gguf_array_count(const sp_gguf_value *arr) {
    return arr->type == SP_GGUF_ARRAY ? arr->as.arr.count : 0;
}

sp_gguf_type sp_gguf_array_type(const sp_gguf_value *arr) {
    return arr->type == SP_GGUF_ARRAY ? arr->as.arr.type : SP_GGUF_TYPE_COUNT;
}

bool sp_gguf_array_at(const sp_gguf_value *arr, uint64_t i, sp_gguf_value *out) {
    if (arr->type != SP_GGUF_ARRAY || i >= arr->as.arr.count) return false;
    switch (arr->as.arr.type) {
    case SP_GGUF_STRING:
        out->type = SP_GGUF_STRING;
        out->as.s = arr->as.arr.strs[i];
        return true;
    case SP_GGUF_ARRAY:
        *out = arr->as.arr.items[i];
        return true;
    default: {
        size_t size = sp_gguf_scalar_size(arr->as.arr.type);
        sp_gguf_decode_scalar(arr->as.arr.type, arr->as.arr.data + (size_t)i * size, out);
        return true;
    }
    }
}

bool sp_gguf_array_str(const sp_gguf_value *arr, uint64_t i, sp_gguf_str *out) {
    if (arr->type != SP_GGUF_ARRAY || arr->as.arr.type != SP_GGUF_STRING ||
        i >= arr->as.arr.count)
        return false;
    *out = arr->as.arr.strs[i];
    return true;
}

/* ------------------------------------------------------------ typed getters */

static spindle_status lookup(const sp_gguf *g, const char *key,
                             const sp_gguf_value **v, spindle_error *err) {
    *v = sp_gguf_find(g, key);
    if (!*v)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: metadata key '%s' is missing",
                       sp_gguf_path(g), key);
    return SPINDLE_OK;
}

static spindle_status mismatch(const sp_gguf *g, const char *key,
                               const sp_gguf_value *v, const char *want,
                               spindle_error *err) {
    return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: metadata key '%s' is a %s, expected %s",
                   sp_gguf_path(g), key, sp_gguf_type_name(v->type), want);
}

/* Integer getters share one path: widen to i64/u64, then range-check. */
static spindle_status get_int(const sp_gguf *g, const char *key, int64_t lo,
                              uint64_t hi, const char *want, int64_t *s,
                              uint64_t *u, spindle_error *err) {
    const sp_gguf_value *v = NULL;
    spindle_status st = lookup(g, key, &v, err);
    if (st) return st;
    int64_t iv;
    uint64_t uv;
    if (sp_gguf_value_u64(v, &uv)) {
        if (uv <= hi) {
            *u = uv;
            *s = uv <= (uint64_t)INT64_MAX ? (int64_t)uv : 0;
            return SPINDLE_OK;
        }
    } else if (sp_gguf_value_i64(v, &iv)) {
        if (iv >= lo) {
            *s = iv;
            *u = 0;
            return SPINDLE_OK;
        }
    } else {
        return mismatch(g, key, v, want, err);
    }
    return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: metadata key '%s' does not fit in %s",
                   sp_gguf_path(g), key, want);
}

spindle_status sp_gguf_get_u32(const sp_gguf *g, const char *key, uint32_t *out,
                               spindle_error *err) {
    int64_t s = 0;
    uint64_t u = 0;
    spindle_status st = get_int(g, key, 0, UINT32_MAX, "u32", &s, &u, err);
    if (!st) *out = (uint32_t)u;
    return st;
}

spindle_status sp_gguf_get_i32(const sp_gguf *g, const char *key, int32_t *out,
                               spindle_error *err) {
    int64_t s = 0;
    uint64_t u = 0;
    spindle_status st = get_int(g, key, INT32_MIN, INT32_MAX, "i32", &s, &u, err);
    if (!st) *out = (int32_t)s;
    return st;
}

spindle_status sp_gguf_get_u64(const sp_gguf *g, const char *key, uint64_t *out,
                               spindle_error *err) {
    int64_t s = 0;
    uint64_t u = 0;
    spindle_status st = get_int(g, key, 0, UINT64_MAX, "u64", &s, &u, err);
    if (!st) *out = u;
    return st;
}

spindle_status sp_gguf_get_i64(const sp_gguf *g, const char *key, int64_t *out,
                               spindle_error *err) {
    int64_t s = 0;
    uint64_t u = 0;
    spindle_status st = get_int(g, key, INT64_MIN, INT64_MAX, "i64", &s, &u, err);
    if (!st) *out = s;
    return st;
}

/* F32 as is; F64 only when it survives the round trip through float. */
static bool to_f32_exact(const sp_gguf_value *v, float *out) {
    double d;
    if (!sp_gguf_value_f64(v, &d)) return false;
    float f = (float)d;
    if (v->type == SP_GGUF_F64 && (double)f != d && d == d) return false;
    *out = f;
    return true;
}

spindle_status sp_gguf_get_f32(const sp_gguf *g, const char *key, float *out,
                               spindle_error *err) {
    const sp_gguf_value *v = NULL;
    spindle_status st = lookup(g, key, &v, err);
    if (st) return st;
    if (!to_f32_exact(v, out)) return mismatch(g, key, v, "f32", err);
    return SPINDLE_OK;
}

spindle_status sp_gguf_get_bool(const sp_gguf *g, const char *key, bool *out,
                                spindle_error *err) {
    const sp_gguf_value *v = NULL;
    spindle_status st = lookup(g, key, &v, err);
    if (st) return st;
    if (!sp_gguf_value_bool(v, out)) return mismatch(g, key, v, "bool", err);
    return SPINDLE_OK;
}

spindle_status sp_gguf_get_string(const sp_gguf *g, const char *key,
                                  sp_gguf_str *out, spindle_error *err) {
    const sp_gguf_value *v = NULL;
    spindle_status st = lookup(g, key, &v, err);
    if (st) return st;
    if (!sp_gguf_value_str(v, out)) return mismatch(g, key, v, "string", err);
    return SPINDLE_OK;
}

spindle_status sp_gguf_get_array(const sp_gguf *g, const char *key,
                                 sp_gguf_type elem_type,
                                 const sp_gguf_value **out, spindle_error *err) {
    const sp_gguf_value *v = NULL;
    spindle_status st = lookup(g, key, &v, err);
    if (st) return st;
    if (v->type != SP_GGUF_ARRAY) return mismatch(g, key, v, "array", err);
    if (elem_type != SP_GGUF_TYPE_COUNT && v->as.arr.type != elem_type)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: metadata key '%s' is an array of %s, expected %s",
                       sp_gguf_path(g), key, sp_gguf_type_name(v->as.arr.type),
                       sp_gguf_type_name(elem_type));
    *out = v;
    return SPINDLE_OK;
}

static spindle_status array_for_copy(const sp_gguf *g, const char *key, size_t n,
                                     const sp_gguf_value **arr, spindle_error *err) {
    spindle_status st = sp_gguf_get_array(g, key, SP_GGUF_TYPE_COUNT, arr, err);
    if (st) return st;
    if ((*arr)->as.arr.count != n)
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: metadata key '%s' has %llu elements, expected %zu",
                       sp_gguf_path(g), key, (unsigned long long)(*arr)->as.arr.count, n);
    return SPINDLE_OK;
}

spindle_status sp_gguf_array_to_f32(const sp_gguf *g, const char *key, float *dst,
                                    size_t n, spindle_error *err) {
    const sp_gguf_value *arr = NULL;
    spindle_status st = array_for_copy(g, key, n, &arr, err);
    if (st) return st;
    if (arr->as.arr.type == SP_GGUF_F32) {
        memcpy(dst, arr->as.arr.data, n * sizeof(float));
        return SPINDLE_OK;
    }
    for (size_t i = 0; i < n; i++) {
        sp_gguf_value e;
        if (!sp_gguf_array_at(arr, i, &e) || !to_f32_exact(&e, &dst[i]))
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s: metadata key '%s': element %zu (%s) is not an f32",
                           sp_gguf_path(g), key, i, sp_gguf_type_name(arr->as.arr.type));
    }
    return SPINDLE_OK;
}

spindle_status sp_gguf_array_to_i32(const sp_gguf *g, const char *key, int32_t *dst,
                                    size_t n, spindle_error *err) {
    const sp_gguf_value *arr = NULL;
    spindle_status st = array_for_copy(g, key, n, &arr, err);
    if (st) return st;
    if (arr->as.arr.type == SP_GGUF_I32) {
        memcpy(dst, arr->as.arr.data, n * sizeof(int32_t));
        return SPINDLE_OK;
    }
    for (size_t i = 0; i < n; i++) {
        sp_gguf_value e;
        int64_t v;
        if (!sp_gguf_array_at(arr, i, &e) || !sp_gguf_value_i64(&e, &v) ||
            v < INT32_MIN || v > INT32_MAX)
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s: metadata key '%s': element %zu (%s) does not fit in i32",
                           sp_gguf_path(g), key, i, sp_gguf_type_name(arr->as.arr.type));
        dst[i] = (int32_t)v;
    }
    return SPINDLE_OK;
}

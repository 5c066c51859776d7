/* GGUF files (versions 2 and 3): metadata and tensor directory, mmapped and
 * validated as a whole when opened.
 *
 * Validation: every read is bounds-checked against the mapping; counts and
 * lengths are checked against the bytes left in the file before anything
 * sized by them is allocated; keys and tensor names are unique; general.
 * alignment is a power of two; every tensor has 1..4 dims, a type Spindle can
 * dequantize, an aligned offset, data inside the file, and no overlap with
 * another tensor.
 *
 * Strings in GGUF are length-prefixed, not NUL-terminated: string values are
 * returned as sp_gguf_str views into the mapping. Keys and tensor names are
 * copied and NUL-terminated. Everything returned lives until sp_gguf_close. */
#ifndef SP_ARTIFACTS_GGUF_H
#define SP_ARTIFACTS_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "spindle.h"

#define SP_GGUF_MAX_DIMS 4
#define SP_GGUF_DEFAULT_ALIGNMENT 32
/* Arrays may nest; deeper nesting than this is rejected. */
#define SP_GGUF_MAX_NESTING 8

/* Metadata value types (gguf_type in ggml). */
typedef enum sp_gguf_type {
    SP_GGUF_U8 = 0,
    SP_GGUF_I8 = 1,
    SP_GGUF_U16 = 2,
    SP_GGUF_I16 = 3,
    SP_GGUF_U32 = 4,
    SP_GGUF_I32 = 5,
    SP_GGUF_F32 = 6,
    SP_GGUF_BOOL = 7,
    SP_GGUF_STRING = 8,
    SP_GGUF_ARRAY = 9,
    SP_GGUF_U64 = 10,
    SP_GGUF_I64 = 11,
    SP_GGUF_F64 = 12,
    SP_GGUF_TYPE_COUNT
} sp_gguf_type;

/* "u32", "string", ... ("?" when out of range). */
const char *sp_gguf_type_name(sp_gguf_type t);

/* A string inside the mapping: `len` bytes, not NUL-terminated. */
typedef struct sp_gguf_str {
    const char *ptr;
    size_t len;
} sp_gguf_str;

/* A metadata value. Scalars are decoded; arrays keep their elements in the
 * mapping (fixed-size types) or in an index built once at open (strings and
 * nested arrays), so element access is O(1). Read it through the functions
 * below rather than the fields. */
typedef struct sp_gguf_value {
    sp_gguf_type type;
    union {
        uint64_t u;          /* U8, U16, U32, U64, BOOL */
        int64_t i;           /* I8, I16, I32, I64 */
        double f;            /* F32 (exactly), F64 */
        sp_gguf_str s;       /* STRING */
        struct {
            sp_gguf_type type;                /* element type */
            uint64_t count;
            const unsigned char *data;        /* fixed-size elements */
            const sp_gguf_str *strs;          /* STRING elements */
            const struct sp_gguf_value *items;/* ARRAY elements */
        } arr;
    } as;
} sp_gguf_value;

/* Scalar conversions. Integer accessors accept every integer type when the
 * value fits the target exactly (BOOL is not an integer here); the float
 * accessor accepts F32 and F64. They return false on a type mismatch or when
 * the value does not fit. */
bool sp_gguf_value_i64(const sp_gguf_value *v, int64_t *out);
bool sp_gguf_value_u64(const sp_gguf_value *v, uint64_t *out);
bool sp_gguf_value_f64(const sp_gguf_value *v, double *out);
bool sp_gguf_value_bool(const sp_gguf_value *v, bool *out);
/* Any integer or float type (not BOOL) as a double, the way a config
 * number is read: llama.cpp writes the same key as u32 in one file and f32
 * in another. Integers beyond 2^53 round to the nearest double. */
bool sp_gguf_value_number(const sp_gguf_value *v, double *out);
bool sp_gguf_value_str(const sp_gguf_value *v, sp_gguf_str *out);

/* Arrays (callers check v->type == SP_GGUF_ARRAY or use sp_gguf_get_array).
 * Element accessors return false when `i` is out of range or the element is
 * of another kind. */
uint64_t sp_gguf_array_count(const sp_gguf_value *arr);
sp_gguf_type sp_gguf_array_type(const sp_gguf_value *arr);
/* Element i as a value (scalars decoded, strings/arrays as views). */
bool sp_gguf_array_at(const sp_gguf_value *arr, uint64_t i, sp_gguf_value *out);
bool sp_gguf_array_str(const sp_gguf_value *arr, uint64_t i, sp_gguf_str *out);

typedef struct sp_gguf sp_gguf;

spindle_status sp_gguf_open(const char *path, sp_gguf **out,
                            spindle_error *err);
void sp_gguf_close(sp_gguf *g);

const char *sp_gguf_path(const sp_gguf *g);
uint32_t sp_gguf_version(const sp_gguf *g);
size_t sp_gguf_alignment(const sp_gguf *g);
/* File offset where the tensor data section starts. */
size_t sp_gguf_data_offset(const sp_gguf *g);

/* ---------------------------------------------------------------- metadata */

size_t sp_gguf_kv_count(const sp_gguf *g);
/* The i-th key/value in file order; NULL when out of range. */
const sp_gguf_value *sp_gguf_kv_at(const sp_gguf *g, size_t i,
                                   const char **key);
/* NULL when absent. */
const sp_gguf_value *sp_gguf_find(const sp_gguf *g, const char *key);

/* Typed getters. A missing key or a value that cannot be converted
 * losslessly is SPINDLE_ERR_FORMAT with a message naming the file and key. */
spindle_status sp_gguf_get_u32(const sp_gguf *g, const char *key,
                               uint32_t *out, spindle_error *err);
spindle_status sp_gguf_get_i32(const sp_gguf *g, const char *key,
                               int32_t *out, spindle_error *err);
spindle_status sp_gguf_get_u64(const sp_gguf *g, const char *key,
                               uint64_t *out, spindle_error *err);
spindle_status sp_gguf_get_i64(const sp_gguf *g, const char *key,
                               int64_t *out, spindle_error *err);
/* F32, or F64 when exactly representable as f32. */
spindle_status sp_gguf_get_f32(const sp_gguf *g, const char *key, float *out,
                               spindle_error *err);
spindle_status sp_gguf_get_bool(const sp_gguf *g, const char *key, bool *out,
                                spindle_error *err);
spindle_status sp_gguf_get_string(const sp_gguf *g, const char *key,
                                  sp_gguf_str *out, spindle_error *err);
/* The array under `key`; when `elem_type` is not SP_GGUF_TYPE_COUNT the
 * elements must be of that type. */
spindle_status sp_gguf_get_array(const sp_gguf *g, const char *key,
                                 sp_gguf_type elem_type,
                                 const sp_gguf_value **out,
                                 spindle_error *err);

/* Bulk copies of a whole array (e.g. tokenizer.ggml.scores, token_type):
 * `dst` holds sp_gguf_array_count(arr) elements. to_f32 takes F32 elements
 * (and F64 exactly representable); to_i32 takes integer elements that fit.
 * Errors name the file and key. */
spindle_status sp_gguf_array_to_f32(const sp_gguf *g, const char *key,
                                    float *dst, size_t n, spindle_error *err);
spindle_status sp_gguf_array_to_i32(const sp_gguf *g, const char *key,
                                    int32_t *dst, size_t n,
                                    spindle_error *err);

/* ----------------------------------------------------------------- tensors */

typedef struct sp_gguf_tensor {
    const char *name;               /* owned by the file handle */
    uint32_t type;                  /* sp_ggml_type */
    int n_dims;                     /* 1..4 */
    int64_t ne[SP_GGUF_MAX_DIMS];   /* ggml order: ne[0] is contiguous; 1 past n_dims */
    uint64_t offset;                /* relative to the data section */
    const void *data;               /* inside the mapping */
    size_t nbytes;
} sp_gguf_tensor;

size_t sp_gguf_tensor_count(const sp_gguf *g);
/* In file order; NULL when out of range. */
const sp_gguf_tensor *sp_gguf_tensor_at(const sp_gguf *g, size_t i);
/* NULL when absent. */
const sp_gguf_tensor *sp_gguf_find_tensor(const sp_gguf *g, const char *name);
/* Number of elements (product of ne). */
int64_t sp_gguf_tensor_nelements(const sp_gguf_tensor *t);

/* Internal to the reader (gguf.c / gguf_meta.c): encoded size of a
 * fixed-size scalar type (0 for STRING, ARRAY and unknown types), and its
 * decoding from little-endian bytes. */
size_t sp_gguf_scalar_size(uint32_t type);
void sp_gguf_decode_scalar(sp_gguf_type type, const unsigned char *p,
                           sp_gguf_value *out);

#endif

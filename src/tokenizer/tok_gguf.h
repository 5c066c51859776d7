/* Tokenizers built from GGUF metadata (tokenizer.ggml.*), matching
 * llama.cpp's llama_tokenize / llama_detokenize: the "gpt2" (byte-level BPE
 * with llama.cpp's per-`pre` regex split), "llama" (SentencePiece-style
 * score merging with <0xXX> byte fallback) and "bert" (WordPiece over the
 * phantom-space vocabulary convert_hf_to_gguf.py writes, with HF's
 * BertNormalizer and BertPreTokenizer) vocabularies. Internal to the
 * tokenizer module. */
#ifndef SP_INPUT_TOK_GGUF_H
#define SP_INPUT_TOK_GGUF_H

#include "tokenizer/tok_internal.h"

/* ------------------------------------------------ pre-tokenizer (split) */

typedef struct sp_gg_regex {
    int custom;      /* 1 GPT-2, 2 Qwen2, 3 Llama-3 scanner; 0: PCRE2 */
    bool collapsed;  /* run on the category-collapsed text */
    pcre2_code *re;
} sp_gg_regex;

/* llama.cpp's pre-tokenizer for a group of tokenizer.ggml.pre names: its
 * regex list (up to SP_GG_MAX_RE, NULL-terminated when shorter) and
 * per-name flags (llama-vocab.cpp). */
#define SP_GG_MAX_RE 6
typedef struct sp_gg_pre {
    const char *names; /* '|'-separated tokenizer.ggml.pre values */
    const char *re[SP_GG_MAX_RE];
    bool ignore_merges, clean_spaces, add_bos;
} sp_gg_pre;

/* The entry naming `pre` (len bytes), or NULL when none does. Also used by
 * the GGUF converter to write the same split into tokenizer.json. */
const sp_gg_pre *sp_gg_pre_find(const char *pre, size_t len);

typedef struct sp_gg_splitter {
    sp_gg_regex re[SP_GG_MAX_RE];
    int n;
    bool ignore_merges, clean_spaces, add_bos; /* llama.cpp per-pre defaults */
} sp_gg_splitter;

/* Fragment lengths (code points while splitting, bytes in results). */
typedef struct sp_gg_offsets {
    size_t *v;
    size_t n, cap;
} sp_gg_offsets;

spindle_status sp_gg_splitter_init(const char *pre, sp_gg_splitter *s,
                                   spindle_error *err);
void sp_gg_splitter_free(sp_gg_splitter *s);
/* Split valid UTF-8 text into words; `out` gets their byte lengths. */
spindle_status sp_gg_split(const sp_gg_splitter *s, const char *text, size_t n,
                           sp_gg_offsets *out, spindle_error *err);

/* ------------------------------------------------------------ vocabulary */

/* llama.cpp token attributes (llama_token_attr bits), derived from
 * tokenizer.ggml.token_type and llama.cpp's by-text fix-ups. */
enum {
    SP_GA_UNKNOWN = 1 << 0, SP_GA_UNUSED = 1 << 1, SP_GA_NORMAL = 1 << 2,
    SP_GA_CONTROL = 1 << 3, SP_GA_USER_DEFINED = 1 << 4, SP_GA_BYTE = 1 << 5
};

typedef struct sp_gguf_vocab {
    bool spm;              /* "llama" */
    bool wpm;              /* "bert"; neither: "gpt2" */
    uint8_t *attr;         /* per id: SP_GA_* bits */
    int32_t *special;      /* partition order: longest text first */
    size_t n_special;
    bool add_bos, add_eos, add_space_prefix, clean_spaces;
    int32_t bos, eos;
    bool add_sep;          /* WPM: [SEP] ends an encoding with specials */
    int32_t sep;
    sp_norm wpm_norm;      /* WPM: BertNormalizer (lowercase, strip accents) */
    sp_pretok wpm_pre;     /* WPM: BertPreTokenizer */
    int32_t byte_tok[256]; /* SPM byte fallback, -1 when missing */
    uint16_t byte_cp[256]; /* GPT-2 byte -> code point */
    sp_gg_splitter split;  /* BPE */
} sp_gguf_vocab;

/* Fill `tok` (model vocab, merges, config with bos/eos/chat_template)
 * from a GGUF file. */
spindle_status sp_tokenizer_load_gguf(spindle_tokenizer *tok, const char *path,
                                      spindle_error *err);
void sp_gguf_vocab_free(sp_gguf_vocab *v);
/* True when `path` names a .gguf file. */
bool sp_is_gguf_path(const char *path);
/* The single .gguf file in `dir` (NULL when none; an error when several). */
spindle_status sp_gguf_in_dir(const char *dir, char **out, spindle_error *err);
/* llama_tokenize(text, add_special, parse_special=true). */
spindle_status sp_gguf_encode(const spindle_tokenizer *tok, const char *text,
                              size_t len, bool add_special, sp_ids *out,
                              spindle_error *err);
/* llama_detokenize(remove_special=skip_special,
 * unparse_special=!skip_special); invalid UTF-8 becomes U+FFFD. */
spindle_status sp_gguf_decode(const spindle_tokenizer *tok, const int32_t *ids,
                              size_t n, bool skip_special, sp_strbuf *out,
                              spindle_error *err);

/* The bytes token `id` stands for, as llama_token_to_piece renders it
 * without specials (grammar masks); false for a control or unknown token. */
bool sp_gguf_token_bytes(const spindle_tokenizer *tok, int32_t id,
                         sp_strbuf *out);

#endif

/*
 * spindle.h — the public API of libspindle, a CPU inference engine for
 * large language models (Hugging Face / MLX safetensors, GGUF).
 *
 * Conventions
 *  - Every handle is opaque and created/destroyed by a matching pair of calls
 *    (spindle_X_load / spindle_X_free). Free functions accept NULL.
 *  - Every fallible call returns a spindle_status and, when it is not
 *    SPINDLE_OK, fills the caller's spindle_error with one line of text naming
 *    what is wrong (file, tensor, key...). `err` may be NULL.
 *  - Library code never exits or aborts the process, and never prints: what
 *    it must tell a person goes to the log handler the program installs
 *    with spindle_set_log (levels error, warn, info, debug; none installed:
 *    dropped).
 *  - Memory handed to the caller (token arrays, strings) is released with
 *    spindle_free(). A returned `const` pointer is borrowed: it belongs to
 *    the handle it came from and stays valid as each call says, at most
 *    until that handle is freed; never free it.
 *  - Threads. Each call says what it allows ("Thread-safe: ..."). In short:
 *    a model's read-only queries and a tokenizer (all its calls) may be used
 *    from several threads at once; spindle_forward and spindle_generate run
 *    one at a time per model (they use the model's scratch and thread pool),
 *    whichever sequences they touch; a sequence, a sampler and a
 *    detokenizer belong to one thread at a time. A step engine takes its
 *    model's forward pass over and accepts requests from any thread
 *    (submit, cancel), stepping on one. Distinct handles never
 *    share state, and nothing is global except what the calls that take no
 *    handle return (static strings) and the log handler.
 *
 * The declarations live in include/spindle/, one header per concern, in
 * the order they build on each other: base (status, errors, spindle_free,
 * the log handler),
 * model, sequence (and the forward pass), adapter, sampling, generate
 * (one generation, speculative decoding), engine, checkpoint, tokenizer
 * (and chat templates), grammar, embed, rerank. Include this header, not
 * those.
 */
#ifndef SPINDLE_H
#define SPINDLE_H

#include "spindle/base.h"
#include "spindle/model.h"
#include "spindle/sequence.h"
#include "spindle/adapter.h"
#include "spindle/sampling.h"
#include "spindle/generate.h"
#include "spindle/engine.h"
#include "spindle/checkpoint.h"
#include "spindle/tokenizer.h"
#include "spindle/grammar.h"
#include "spindle/embed.h"
#include "spindle/rerank.h"
#include "spindle/vision.h"
#include "spindle/diffusion.h"

#endif /* SPINDLE_H */

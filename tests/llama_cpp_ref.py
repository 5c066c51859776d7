"""llama.cpp (llama-cpp-python) as a reference: a context in its f32
configuration and greedy decoding read from its logits. Shared by the real
GGUF tests (tests/realmodels) and the tiny-GGUF parity tests
(tests/parity/test_dense_gguf.py).

The f32 configuration: f32 KV cache (type_k = type_v = GGML_TYPE_F32; its
default f16 cache flips greedy steps the f32 references agree on), flash
attention off, and no extra weight buffers (use_extra_bufts = False: no AMX
/ repacked kernels, which also crash on CPUs that refuse the AMX state;
the generic CPU kernels remain).
"""
import numpy as np

GGML_TYPE_F32 = 0


def f32_llama(llama_cpp, path, n_ctx, n_threads, **kwargs):
    """A llama_cpp.Llama on GGUF file `path` in the f32 configuration;
    `kwargs` go to Llama (lora_path, lora_scale)."""
    params = llama_cpp.llama_model_default_params

    def no_extra_buffers():
        p = params()
        p.use_extra_bufts = False
        return p
    llama_cpp.llama.llama_cpp.llama_model_default_params = no_extra_buffers
    try:
        return llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx,
                               n_batch=n_ctx, n_threads=n_threads,
                               verbose=False, type_k=GGML_TYPE_F32,
                               type_v=GGML_TYPE_F32, flash_attn=False,
                               **kwargs)
    finally:
        llama_cpp.llama.llama_cpp.llama_model_default_params = params


def last_logits(llm):
    """Logits of the last token of the last eval (llama-cpp-python keeps
    `scores` only with logits_all; the context holds that one row)."""
    row = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
    return row.astype(np.float64)   # a copy: the next eval overwrites it


def greedy_reference(llm, ids, n_gen):
    """llama.cpp on prompt `ids`: its last-prompt logits, n_gen greedy
    tokens (argmax of its logits, EOS not special) and each step's top-1 -
    top-2 margin."""
    llm.reset()
    llm.eval(ids)
    logits = last_logits(llm)
    first = logits.copy()
    tokens, margins = [], []
    for i in range(n_gen):
        top2 = np.partition(logits, -2)[-2:]
        tokens.append(int(np.argmax(logits)))
        margins.append(float(top2[1] - top2[0]))
        if i + 1 < n_gen:
            llm.eval([tokens[-1]])
            logits = last_logits(llm)
    return first, tokens, margins

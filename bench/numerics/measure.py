"""measure.py MODEL_KEY [prompt indices] : llama.cpp (f32 KV, no flash attn)
greedy N_GEN steps per prompt of tests/realmodels/test_gguf_parity.py, then
Spindle teacher-forced on those tokens in each mode; one JSON line per
(prompt, mode): flips at margin >= 0.05, max |d| (centered), top-2 margin err."""
import sys, os, json, subprocess, tempfile, importlib.util
import numpy as np, llama_cpp, llama_cpp.llama as LL
_orig = llama_cpp.llama_model_default_params
def _no_extra():   # no AMX / repack buffers: llama.cpp's generic CPU kernels
    p = _orig(); p.use_extra_bufts = False; return p
LL.llama_cpp.llama_model_default_params = _no_extra
sys.path.insert(0, './tests/realmodels')
spec = importlib.util.spec_from_file_location('t', './tests/realmodels/test_gguf_parity.py')
t = importlib.util.module_from_spec(spec); spec.loader.exec_module(t)
key = sys.argv[1]
path = {'smollm2': str(t.smollm2_file()) if key == 'smollm2' else None,
        'gemma3': '/tmp/n2/gemma-3-270m-q4_k_m.gguf'}[key]
N = int(os.environ.get('N', 64))
modes = os.environ.get('MODES', 'exact,high,fast,exact:SPINDLE_SIMD=avx2,high:SPINDLE_SIMD=avx2,lcpp_f16kv').split(',')
TIE = 0.05
llm = llama_cpp.Llama(model_path=path, n_ctx=256, n_batch=256, n_threads=2, verbose=False,
                      type_k=0, type_v=0, flash_attn=False)
llm16 = None
arch = llm.metadata['general.architecture']
prompts = [llm.tokenize(x.encode(), add_bos=True, special=True) for x in t.RAW]
prompts += [llm.tokenize(t.chat_text(llm, arch, m).encode(), add_bos=True, special=True) for m in t.CHAT]
V = llm.n_vocab()
def run_lcpp(l, ids, forced=None):
    l.reset(); l.eval(ids)
    out, toks = [], []
    for i in range(N):
        r = np.ctypeslib.as_array(l._ctx.get_logits(), shape=(V,)).astype(np.float64)
        out.append(r); toks.append(int(np.argmax(r)) if forced is None else forced[i])
        if i + 1 < N: l.eval([toks[-1]])
    return np.array(out), toks
sel = [int(a) for a in sys.argv[2:]] or range(len(prompts))
for p in sel:
    ids = prompts[p]
    ref, toks = run_lcpp(llm, ids)
    top2 = np.argsort(ref, 1)[:, -2:]
    marg = ref[np.arange(N), top2[:, 1]] - ref[np.arange(N), top2[:, 0]]
    for m in modes:
        if m == 'lcpp_f16kv':
            if llm16 is None:
                llm16 = llama_cpp.Llama(model_path=path, n_ctx=256, n_batch=256, n_threads=2,
                                        verbose=False, flash_attn=False)
            sp, _ = run_lcpp(llm16, ids, toks)
        else:
            name, _, envs = m.partition(':')
            env = dict(os.environ, SPINDLE_PRECISION=name)
            for kv in filter(None, envs.split(',')):
                k, v = kv.split('='); env[k] = v
            fd, out = tempfile.mkstemp(dir='/tmp/n2'); os.close(fd)
            subprocess.run(['/tmp/n2/steplogits', path, ','.join(map(str, ids)),
                            ','.join(map(str, toks[:-1])), out], check=True, env=env)
            sp = np.fromfile(out, dtype=np.float32).astype(np.float64).reshape(-1, V)
            os.unlink(out)
        d = (sp - sp.mean(1, keepdims=True)) - (ref - ref.mean(1, keepdims=True))
        err = np.abs(d).max(1)
        spm = sp[np.arange(N), top2[:, 1]] - sp[np.arange(N), top2[:, 0]]
        merr = np.abs(spm - marg)
        am = sp.argmax(1)
        flips = [(i, int(am[i]), toks[i], round(float(marg[i]), 3)) for i in range(N) if am[i] != toks[i]]
        hard = [f for f in flips if f[3] >= TIE]
        print(json.dumps({'model': key, 'prompt': p, 'mode': m, 'maxabs': round(float(err.max()), 4),
                          'meanmax': round(float(err.mean()), 4), 'margin_err_max': round(float(merr.max()), 4),
                          'std': round(float(ref.std(1).mean()), 3), 'flips': flips, 'hard': len(hard),
                          'minmargin': round(float(marg.min()), 4)}), flush=True)

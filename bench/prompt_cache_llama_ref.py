"""The anchor for bench/prompt_cache_bench.py: llama.cpp (llama-cpp-python)
on the same GGUF and the same token ids, cold vs its saved state
(`Llama.save_state` / `load_state`, the llama_state_* calls behind
llama-server's slot save/restore) restored in a fresh process.

  python3 bench/prompt_cache_llama_ref.py MODEL.gguf [--prefix 4096]

cold: eval prefix + suffix A from empty, then one sample; restore: a new
process loads the pickled state saved after prefix + A, truncates it to the
prefix and evaluates suffix B, then one sample (what a restored slot does
for a prompt that shares the prefix)."""
import argparse
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def ids(n, salt, vocab):
    return [(i * 7919 + salt * 104729 + 17) % (vocab - 10) + 5 for i in range(n)]


def child(model, prefix_n, mode, state_path, threads):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=model, n_ctx=prefix_n + 128,
                          n_batch=512, n_threads=threads, verbose=False)
    vocab = llm.n_vocab()
    prefix = ids(prefix_n, 0, min(vocab, 32000))
    sa, sb = ids(32, 1, min(vocab, 32000)), ids(32, 2, min(vocab, 32000))
    if mode == "cold":
        t0 = time.perf_counter()
        llm.eval(prefix + sa)
        llm.sample()
        ttft = time.perf_counter() - t0
        Path(state_path).write_bytes(pickle.dumps(llm.save_state()))
    else:
        state = pickle.loads(Path(state_path).read_bytes())
        t0 = time.perf_counter()
        llm.load_state(state)
        llm.n_tokens = prefix_n          # keep the shared prefix only
        llm._ctx.kv_cache_seq_rm(-1, prefix_n, -1)
        llm.eval(sb)
        llm.sample()
        ttft = time.perf_counter() - t0
    print(f"{ttft:.4f}")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5],
              int(sys.argv[6]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--prefix", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state = str(Path(tmp) / "state.pkl")
        out = {}
        for mode in ("cold", "restore"):
            r = subprocess.run([sys.executable, __file__, "--child", a.model,
                                str(a.prefix), mode, state, str(a.threads)],
                               capture_output=True, text=True, check=True)
            out[mode] = float(r.stdout.strip().splitlines()[-1])
        size = Path(state).stat().st_size
    print(f"llama.cpp: cold {out['cold']:.3f} s, state restore {out['restore']:.3f} s "
          f"(state file {size / 1e6:.1f} MB), cold/restore "
          f"{out['cold'] / out['restore']:.1f}x")


if __name__ == "__main__":
    main()

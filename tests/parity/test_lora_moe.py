"""LoRA adapters on the routed experts of Qwen3-MoE models against mlx-lm
(make_lora_moe_models.py: mlx-lm's LoRASwitchLinear over
mlp.switch_mlp.{gate,up,down}_proj, per-expert lora_a / lora_b stacks; the
"all8" adapter also adapts the router mlp.gate, attention and a dense
layer's MLP): `spindle run --lora` greedy tokens and last-position logits
within parity_common's tolerances (1e-4 of the logits' std against mlx's
f32 run, 4x mlx's own native-vs-f32 gap against its native run), in
mlx-lm's layout and in PEFT's per-expert one; on stacked, per-expert
(Hugging Face layout) and 4-bit experts; on a GGUF base, and as
llama.cpp's LoRA GGUF (ffn_*_exps.weight.lora_a/b stacked over experts,
as convert_lora_to_gguf.py writes them) against llama.cpp itself; a
mixed-adapter batch in the step engine against each request alone;
`convert --merge-lora` against mlx-lm's LoRASwitchLinear.fuse; and
malformed expert adapters, which must fail with one line. On Qwen3-Next
(qwen3_next-f32) the same holds for adapters of the shared expert
(mlp.shared_expert.{gate,up,down}_proj and mlp.shared_expert_gate, which
mlx-lm adapts as plain LoRALinear), alone ("shared8") and with the routed
experts and the router ("moe4"); on gpt-oss (gptoss-f32, mlx-lm's layout
only) for adapters of its biased experts mlp.experts.{gate,up,down}_proj
and its router mlp.router, also on its Hugging Face layout
(gptoss-hf-mxfp4: MXFP4 experts, gate and up interleaved in one
gate_up_proj), where merging such an adapter fails with one line.
"""
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import make_lora_moe_models as gen  # noqa: E402
import parity_common as pc  # noqa: E402
import test_engine as te  # noqa: E402
import test_lora as tl  # noqa: E402
import test_lora_merge as tm  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

P = gen.PROMPTS


@pytest.fixture(scope="session")
def moe_lora(spindle_bin):  # noqa: F811
    return pc.ensure_models(gen.DEFAULT_OUT, gen)


CASES = [(s["name"], a, layout, p) for s in gen.SPECS
         for a in gen.adapters_of(s) for layout in gen.layouts_of(s)
         for p in P]


@pytest.mark.parametrize("model,adapter,layout,prompt", CASES,
                         ids=["-".join(c) for c in CASES])
def test_expert_adapter_matches_mlx_lm(moe_lora, spindle_bin, tmp_path,  # noqa: F811
                                       model, adapter, layout, prompt):
    d = moe_lora / model
    path = d / (adapter if layout == "mlx" else f"{adapter}-peft")
    tl.assert_adapter_ref(spindle_bin, d, adapter, prompt, d, [path],
                          tmp_path / "l.npy", f"{model}+{adapter} ({layout})")


@pytest.mark.parametrize("model", [s["name"] for s in gen.SPECS])
def test_expert_adapter_is_no_noop(moe_lora, model):
    """The experts-only adapter (Qwen3-Next's shared-expert-only one) moves
    mlx-lm's own output, so the parity above can fail on a missing expert
    term."""
    ref = json.loads((moe_lora / model / "reference.json").read_text())
    adapter = "shared8" if "shared8" in ref["adapters"] else "experts4"
    for p in P:
        base = ref["prompts"][p]["f32"]
        lora = ref["adapters"][adapter]["prompts"][p]["f32"]
        assert base["tokens"] != lora["tokens"], p


def test_stacked_halves_equal_the_adapter(moe_lora, spindle_bin, tmp_path):  # noqa: F811
    """--lora A:0.5 --lora A-peft:0.5 (stacked per expert) is A."""
    d = moe_lora / "qmoe-f32"
    tl.assert_adapter_ref(spindle_bin, d, "all8", "len40", d,
                          [f"{d / 'all8'}:0.5", f"{d / 'all8-peft'}:0.5"],
                          tmp_path / "l.npy", "stacked")


@pytest.fixture(scope="module")
def gguf_files(moe_lora, tmp_path_factory):
    """files(model): the f32 model as an F32 GGUF, and each of its adapters
    as a LoRA GGUF (written on first use)."""
    import gguf_writer
    made = {}

    def files(model):
        if model not in made:
            src = moe_lora / model
            d = tmp_path_factory.mktemp(f"lora-moe-gguf-{model}")
            base = gguf_writer.write_gguf(str(src), str(d / "m.gguf"), "f32")
            made[model] = base, {a: gguf_writer.write_lora_gguf(
                str(src), str(src / f"{a}-peft"), str(d / f"{a}.gguf"))
                for a in gen.adapters_of(gen._by_name[model])}
        return made[model]
    return files


# (model, adapter): no rsLoRA, so llama.cpp's alpha / r is PEFT's scale
ON_GGUF = [("qmoe-f32", "all8"), ("qwen3_next-f32", "shared8")]


@pytest.mark.parametrize("model,adapter", ON_GGUF, ids=[m for m, _ in ON_GGUF])
@pytest.mark.parametrize("layout", ["mlx", "peft", "gguf"])
def test_expert_adapter_on_gguf_base(moe_lora, spindle_bin, gguf_files,  # noqa: F811
                                     tmp_path, model, adapter, layout):
    """mlx-lm's reference of the safetensors model holds on its GGUF form
    (ffn_*_exps, ffn_*_shexp) with the adapter in each layout."""
    d = moe_lora / model
    base, adapters = gguf_files(model)
    path = {"mlx": d / adapter, "peft": d / f"{adapter}-peft",
            "gguf": adapters[adapter]}[layout]
    tl.assert_adapter_ref(spindle_bin, d, adapter, "len40", base, [path],
                          tmp_path / "l.npy", f"gguf base, {layout} adapter")


LLAMA_CPP = [("qmoe-f32", a) for a in sorted(gen.ADAPTERS)] + \
    [("qwen3_next-f32", a) for a in sorted(gen.SHARED_ADAPTERS)]


@pytest.mark.parametrize("model,adapter", LLAMA_CPP,
                         ids=[f"{m}-{a}" for m, a in LLAMA_CPP])
def test_gguf_expert_adapter_matches_llama_cpp(moe_lora, spindle_bin,  # noqa: F811
                                               gguf_files, tmp_path, model,
                                               adapter):
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail("llama-cpp-python is missing (pip install -r "
                    "tests/requirements.txt)")
    import llama_cpp
    import llama_cpp_ref
    base, adapters = gguf_files(model)
    ids = P["len40"]
    llm = llama_cpp_ref.f32_llama(llama_cpp, base, 128, 2,
                                  lora_path=str(adapters[adapter]))
    try:
        case = {"path": base, "llm": llm, "exact": llm, "qtype": "f32",
                "name": f"{model}+{adapter}"}
        pc.assert_gguf_parity(spindle_bin, case, ids, gen.MAX_TOKENS, 2,
                              tmp_path, 1e-4, None,
                              ["--lora", str(adapters[adapter])])
    finally:
        llm.close()


# model: (the adapter of many modules, the narrower one)
MIXED = {"qmoe-f32": ("all8", "experts4"),
         "qwen3_next-f32": ("moe4", "shared8"),
         "gptoss-f32": ("all8", "experts4")}


@pytest.mark.parametrize("model", sorted(MIXED))
def test_mixed_adapter_batch(moe_lora, tmp_path, model):
    """Requests on the base model, on each adapter and on one at half
    scale share batches (and so the experts' grouped rows and the shared
    expert's adapter groups): each equals itself run alone, and mlx-lm
    where a reference covers it."""
    if not te.HARNESS.is_file():
        pytest.skip(f"engine harness not found at {te.HARNESS}")
    d = moe_lora / model
    wide, narrow = MIXED[model]
    # gpt-oss has no PEFT form: its narrow adapter stands in for it
    second = f"{narrow}-peft" if (d / f"{narrow}-peft").is_dir() else narrow
    adapters = {n: str(d / n) for n in (wide, narrow, second)}

    def q(prompt, adapter=None, **kw):
        r = dict(prompt=prompt, max_tokens=gen.MAX_TOKENS, logits=True, **kw)
        if adapter:
            r["adapter"] = adapter
        return r
    reqs = [q(P["len40"], narrow), q(P["len7"]), q(P["len7"], wide),
            q(P["len40"], wide), q(P["len7"], second, submit_at=0),
            q(te.MID, narrow, adapter_scale=0.5), q(P["len40"])]
    batched = te.run(d, tmp_path, "step", reqs, max_seqs=8,
                     max_batch_tokens=te.BUDGET, adapters=adapters)
    alone = te.run(d, tmp_path, "step", reqs, max_seqs=1, adapters=adapters)
    te.check_finished_once(batched)
    names = {tuple(v): k for k, v in P.items()}
    for i, (b, a, req) in enumerate(zip(batched, alone, reqs)):
        label = f"request {i} ({req.get('adapter', 'base')})"
        te.assert_same_tokens(b, a, label)
        te.assert_close_logits(b, a, label)
        name = names.get(tuple(req["prompt"]))
        if name and "adapter_scale" not in req:
            ref = json.loads((d / "reference.json").read_text())
            adapter = req.get("adapter", "").removesuffix("-peft")
            if adapter:
                ref = dict(ref, **ref["adapters"][adapter])
            pc.assert_greedy_tokens({"tokens": b["tokens"]}, ref,
                                    ref["prompts"][name])


MERGED = {"qmoe-f32": "all8", "qmoe-q4g64": "all8", "qwen3_next-f32": "moe4",
          "gptoss-f32": "all8"}


@pytest.mark.parametrize("model", sorted(MERGED))
def test_merged_experts_match_mlx_fuse(spindle_bin, moe_lora, tmp_path,  # noqa: F811
                                       model):
    """Every adapted matrix (stacked experts and a shared expert included)
    of the merged model within the rounding bound of mlx-lm's fuse
    (test_lora_merge.py), the rest unchanged; merged in f32, the model
    generates what mlx-lm does with the adapter."""
    d = moe_lora / model
    adapter = MERGED[model]
    out = tm.merge(spindle_bin, d, d / adapter, tmp_path / "merged")
    ours = tm.load_st(out / "model.safetensors")
    want = tm.mlx_fused(d, d / adapter)
    merged = sorted({k.rsplit(".", 1)[0] + ".weight"
                     for k in _adapter_keys(d / adapter)})
    assert any(".switch_mlp." in k or ".mlp.experts." in k
               for k in merged), merged
    rel = 1e-6 if model == "qmoe-f32" else 2.0 ** -8
    for k in merged:
        assert ours[k].shape == want[k].shape, k
        bound = rel * np.abs(want[k]) + 1e-6 * np.std(want[k])
        over = np.abs(ours[k] - want[k]) / bound
        assert over.max() <= 1, f"{k}: off mlx-lm's fuse by {over.max():.3g}"
    src = {}
    for f in d.glob("model*.safetensors"):
        src.update(tm.load_st(f))
    for k, v in src.items():
        if k in ours and k not in merged:
            assert np.array_equal(ours[k], v), k
    q = json.loads((out / "config.json").read_text()).get("quantization")
    if q:
        assert all(q.get(k.removesuffix(".weight")) is False for k in merged)
    out32 = tm.merge(spindle_bin, d, d / adapter, tmp_path / "m32",
                     "--dtype", "f32")
    tl.assert_adapter_ref(spindle_bin, d, adapter, "len40", out32, [],
                          tmp_path / "m.npy", f"{model} merged in f32")


def test_merge_refuses_fused_experts(spindle_bin, moe_lora, tmp_path):  # noqa: F811
    """gpt-oss's Hugging Face layout keeps gate and up of each expert in
    one interleaved MXFP4 gate_up_proj: applied unmerged the adapter
    matches mlx-lm (above), but merging it has no gate_proj tensor to
    write, so it fails with one line instead of leaving pairs out."""
    d = moe_lora / "gptoss-hf-mxfp4"
    r = subprocess.run([str(spindle_bin), "convert", "-i", str(d),
                        "--merge-lora", str(d / "experts4"), "-o",
                        str(tmp_path / "merged")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot be merged" in lines[0], r.stderr
    assert not (tmp_path / "merged" / "config.json").exists()


def _adapter_keys(path):
    from safetensors.numpy import load_file
    return list(load_file(str(path / "adapters.safetensors")))


# ---- malformed expert adapters: one line each ----

def _mlx(change):
    return lambda p: tl._rewrite_tensors(p, "adapters.safetensors", change)


def _first(t, part):
    return sorted(k for k in t if part in k)[0]


def _drop_expert(t):          # [8, r, in] -> [7, r, in]
    k = _first(t, "switch_mlp.gate_proj.lora_a")
    t[k] = t[k][:-1].copy()


def _rank_expert(t):          # lora_a [8, r - 1, in]
    k = _first(t, "switch_mlp.up_proj.lora_a")
    t[k] = t[k][:, :-1].copy()


def _shape_expert(t):         # lora_b [8, out - 1, r]
    k = _first(t, "switch_mlp.down_proj.lora_b")
    t[k] = t[k][:, :-1].copy()


def _flat_expert(t):          # a 2-D tensor where experts are stacked
    k = _first(t, "switch_mlp.gate_proj.lora_a")
    t[k] = t[k][0].copy()


def _expert_past_end(t):
    k = _first(t, "experts.7.gate_proj.lora_A")
    t[k.replace("experts.7.", "experts.8.")] = t.pop(k)


def _unpaired_expert(t):
    del t[_first(t, "experts.3.up_proj.lora_B")]


def _shared_expert(t):
    k = _first(t, "experts.2.down_proj.lora_A")
    t[k.replace("experts.2.", "shared_expert.")] = t.pop(k)


def _unknown_group(t):
    k = _first(t, "switch_mlp.gate_proj.lora_b")
    t[k.replace("switch_mlp.", "block_sparse_moe.")] = t.pop(k)


def _rank_shared(t):          # mlx-lm's lora_a [in, r - 1]
    k = _first(t, "shared_expert.up_proj.lora_a")
    t[k] = t[k][:, :-1].copy()


def _shape_shared(t):         # lora_b [r, out - 1]
    k = _first(t, "shared_expert.down_proj.lora_b")
    t[k] = t[k][:, :-1].copy()


def _shape_shared_gate(t):    # the gate's lora_b [r, 2]: one output only
    k = _first(t, "shared_expert_gate.lora_b")
    t[k] = np.concatenate([t[k], t[k]], axis=1)


def _shared_on_stacked(t):    # a shared expert tensor stacked per expert
    k = _first(t, "shared_expert.gate_proj.lora_a")
    t[k] = np.stack([t[k]] * 8)


def _rank_gptoss(t):          # lora_a [4, r - 1, in]
    k = _first(t, "experts.gate_proj.lora_a")
    t[k] = t[k][:, :-1].copy()


def _unpaired_shared(t):
    del t[_first(t, "shared_expert.gate_proj.lora_B")]


def _no_shared_gate(t):       # qmoe has no shared expert nor its gate
    k = _first(t, "layers.1.mlp.gate.lora_a")
    t[k.replace("mlp.gate.", "mlp.shared_expert_gate.")] = t.pop(k)


def _qwen_router_name(t):     # gpt-oss's router is mlp.router
    for k in [k for k in t if ".mlp.router." in k]:
        t[k.replace(".mlp.router.", ".mlp.gate.")] = t.pop(k)


def _gptoss_router_name(t):   # Qwen's router is mlp.gate
    for k in [k for k in t if ".mlp.gate." in k]:
        t[k.replace(".mlp.gate.", ".mlp.router.")] = t.pop(k)


def _dense_layer(t):          # qmoe-q4g64's layer 0 is a dense MLP
    for k in [k for k in t if "layers.1.mlp.switch_mlp" in k]:
        t[k.replace("layers.1.", "layers.0.")] = t.pop(k)


MALFORMED = {
    "expert-count": ("qmoe-f32", "all8", _mlx(_drop_expert),
                     "has 3 dimensions and 7 experts, expected 3 and 8 "
                     "(expert count mismatch)"),
    "expert-rank": ("qmoe-f32", "all8", _mlx(_rank_expert),
                    "rank or shape mismatch"),
    "expert-shape": ("qmoe-f32", "all8", _mlx(_shape_expert),
                     "rank or shape mismatch"),
    "expert-2d": ("qmoe-f32", "all8", _mlx(_flat_expert),
                  "(expert count mismatch)"),
    "expert-index": ("qmoe-f32", "experts4-peft",
                     tl._peft_tensors(_expert_past_end),
                     "layer 1 has 8 experts, not expert 8"),
    "expert-unpaired": ("qmoe-f32", "experts4-peft",
                        tl._peft_tensors(_unpaired_expert),
                        "expert 3 up_proj has lora_A but no lora_B"),
    "no-shared-expert": ("qmoe-f32", "experts4-peft",
                         tl._peft_tensors(_shared_expert),
                         "mlp.experts.E, not mlp.shared_expert"),
    "unknown-group": ("qmoe-f32", "all8", _mlx(_unknown_group),
                      "routed experts are mlp.switch_mlp or mlp.experts.E, "
                      "not mlp.block_sparse_moe"),
    "dense-layer": ("qmoe-q4g64", "all8", _mlx(_dense_layer),
                    "layer 0 has no routed experts"),
    "shared-rank": ("qwen3_next-f32", "shared8", _mlx(_rank_shared),
                    "rank or shape mismatch"),
    "shared-shape": ("qwen3_next-f32", "moe4", _mlx(_shape_shared),
                     "rank or shape mismatch"),
    "shared-gate-shape": ("qwen3_next-f32", "shared8",
                          _mlx(_shape_shared_gate), "rank or shape mismatch"),
    "shared-stacked": ("qwen3_next-f32", "shared8", _mlx(_shared_on_stacked),
                       "rank or shape mismatch"),
    "shared-unpaired": ("qwen3_next-f32", "shared8-peft",
                        tl._peft_tensors(_unpaired_shared),
                        "shared expert gate_proj has lora_A but no lora_B"),
    "no-shared-gate": ("qmoe-f32", "all8", _mlx(_no_shared_gate),
                       "layer 1 has no shared_expert_gate"),
    "router-as-gate": ("gptoss-f32", "experts4", _mlx(_qwen_router_name),
                       "router is mlp.router, not mlp.gate"),
    "gate-as-router": ("qmoe-f32", "all8", _mlx(_gptoss_router_name),
                       "router is mlp.gate, not mlp.router"),
    "gptoss-expert-rank": ("gptoss-f32", "experts4", _mlx(_rank_gptoss),
                           "rank or shape mismatch"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_expert_adapter_one_line(moe_lora, spindle_bin, tmp_path,  # noqa: F811
                                           case):
    model, adapter, breaker, needle = MALFORMED[case]
    d = moe_lora / model
    bad = tmp_path / "adapter"
    shutil.copytree(d / adapter, bad)
    breaker(bad)
    tl.assert_adapter_refused(spindle_bin, d, bad, needle)


def test_malformed_gguf_expert_adapter_one_line(moe_lora, spindle_bin,  # noqa: F811
                                                tmp_path):
    """A LoRA GGUF whose stacked lora_a has one expert too few."""
    import gguf_writer
    src = moe_lora / "qmoe-f32"

    def edit(tensors):
        k = sorted(k for k in tensors if "ffn_up_exps.weight.lora_a" in k)[0]
        tensors[k] = tensors[k][:-1].copy()
    bad = gguf_writer.write_lora_gguf(str(src), str(src / "all8-peft"),
                                      str(tmp_path / "bad.gguf"), edit=edit)
    r = subprocess.run([str(spindle_bin), "run", "-m", str(src),
                        "--prompt-tokens", "1,2", "-n", "1", "--lora", bad],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "(expert count mismatch)" in lines[0], r.stderr

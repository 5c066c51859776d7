"""LoRA adapters on the gated DeltaNet's projections (Qwen3-Next's fused
linear_attn.in_proj_qkvz / in_proj_ba and out_proj, Qwen3.5's in_proj_qkv,
_z, _b, _a and out_proj) and on a Gemma 4 base in Hugging Face's
multimodal layout (model.language_model., bare experts.gate_up_proj)
against mlx-lm (make_lora_hybrid_models.py: adapters made by mlx-lm's own
linear_to_lora_layers, with no keys = every linear of the layers, and
narrower ones): `spindle run --lora` greedy tokens and last-position
logits within parity_common's tolerances in mlx-lm's layout and in PEFT's
(transformers' module names), also prefilled in chunks of 8 tokens; a
mixed-adapter batch in the step engine against each request alone;
`convert --merge-lora` against mlx-lm's fuse (Gemma 4's fused experts
cannot be merged: one line); malformed adapters on the new targets, one
line each.
"""
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
import make_lora_hybrid_models as gen  # noqa: E402
import parity_common as pc  # noqa: E402
import test_engine as te  # noqa: E402
import test_lora as tl  # noqa: E402
import test_lora_merge as tm  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

P = gen.PROMPTS
GEMMA = "gemma4-moe-hf-mm-f32"


@pytest.fixture(scope="session")
def hybrid_lora(spindle_bin):  # noqa: F811
    return pc.ensure_models(gen.DEFAULT_OUT, gen)


CASES = [(s["name"], a, layout, p) for s in gen.SPECS
         for a in gen.adapters_of(s)
         for layout in (("mlx", "peft") if gen.has_peft(s, a) else ("mlx",))
         for p in P]


@pytest.mark.parametrize("model,adapter,layout,prompt", CASES,
                         ids=["-".join(c) for c in CASES])
def test_adapter_matches_mlx_lm(hybrid_lora, spindle_bin, tmp_path,  # noqa: F811
                                model, adapter, layout, prompt):
    d = hybrid_lora / model
    path = d / (adapter if layout == "mlx" else f"{adapter}-peft")
    tl.assert_adapter_ref(spindle_bin, d, adapter, prompt, d, [path],
                          tmp_path / "l.npy", f"{model}+{adapter} ({layout})")


@pytest.mark.parametrize("model", [s["name"] for s in gen.SPECS])
def test_narrow_adapter_is_no_noop(hybrid_lora, model):
    """The narrow adapter (the DeltaNet's projections alone; Gemma 4's
    attention, MLP and router) moves mlx-lm's own logits well past the
    parity tolerance, so the parity above fails on a missing term."""
    d = hybrid_lora / model
    ref = json.loads((d / "reference.json").read_text())
    for p in P:
        base = np.load(d / ref["prompts"][p]["f32"]["logits_file"])
        lora = np.load(d / ref["adapters"]["lin4"]["prompts"][p]["f32"]
                       ["logits_file"])
        assert np.max(np.abs(lora - base)) > 0.05 * np.std(base), p


@pytest.mark.parametrize("model", [s["name"] for s in gen.SPECS])
def test_chunked_prefill(hybrid_lora, spindle_bin, tmp_path, model):  # noqa: F811
    """len40 prefilled 8 tokens per pass (the DeltaNet state carried
    between passes, every pass's rows through the adapter)."""
    d = hybrid_lora / model
    tl.assert_adapter_ref(spindle_bin, d, "all8", "len40", d, [d / "all8"],
                          tmp_path / "l.npy", f"{model}+all8 in chunks of 8",
                          "--prefill-chunk", "8")


@pytest.mark.parametrize("model", [s["name"] for s in gen.SPECS])
def test_mixed_adapter_batch(hybrid_lora, tmp_path, model):
    """Requests on the base model, on each adapter and on one at half
    scale share batches: each equals itself run alone, and mlx-lm where a
    reference covers it."""
    if not te.HARNESS.is_file():
        pytest.skip(f"engine harness not found at {te.HARNESS}")
    d = hybrid_lora / model
    second = "lin4-peft"
    adapters = {n: str(d / n) for n in ("all8", "lin4", second)}

    def q(prompt, adapter=None, **kw):
        r = dict(prompt=prompt, max_tokens=gen.MAX_TOKENS, logits=True, **kw)
        if adapter:
            r["adapter"] = adapter
        return r
    reqs = [q(P["len40"], "lin4"), q(P["len7"]), q(P["len7"], "all8"),
            q(P["len40"], "all8"), q(P["len7"], second, submit_at=0),
            q(te.MID, "lin4", adapter_scale=0.5), q(P["len40"])]
    batched = te.run(d, tmp_path, "step", reqs, max_seqs=8,
                     max_batch_tokens=te.BUDGET, adapters=adapters)
    alone = te.run(d, tmp_path, "step", reqs, max_seqs=1, adapters=adapters)
    te.check_finished_once(batched)
    names = {tuple(v): k for k, v in P.items()}
    ref = json.loads((d / "reference.json").read_text())
    for i, (b, a, req) in enumerate(zip(batched, alone, reqs)):
        label = f"request {i} ({req.get('adapter', 'base')})"
        te.assert_same_tokens(b, a, label)
        te.assert_close_logits(b, a, label)
        name = names.get(tuple(req["prompt"]))
        if name and "adapter_scale" not in req:
            adapter = req.get("adapter", "").removesuffix("-peft")
            r = dict(ref, **ref["adapters"][adapter]) if adapter else ref
            pc.assert_greedy_tokens({"tokens": b["tokens"]}, r,
                                    r["prompts"][name])


# model: (adapter, the modules it must have merged)
MERGED = {"qwen3_next-f32": ("all8", ".linear_attn.in_proj_qkvz."),
          "qwen3_5-f32": ("all8", ".linear_attn.in_proj_qkv."),
          GEMMA: ("lin4", ".router.proj."),
          "gemma4-moe-f32": ("all8", ".experts.switch_glu.")}


@pytest.mark.parametrize("model", sorted(MERGED))
def test_merged_matches_mlx_fuse(spindle_bin, hybrid_lora, tmp_path,  # noqa: F811
                                 model):
    """Every adapted matrix of the merged model (the DeltaNet's fused and
    split projections, Gemma 4's router and attention under transformers'
    names, its stacked experts in mlx-lm's layout) within 1e-6 of mlx-lm's
    fuse, the rest unchanged; the merged
    model generates what mlx-lm does with the adapter."""
    d = hybrid_lora / model
    adapter, must = MERGED[model]
    out = tm.merge(spindle_bin, d, d / adapter, tmp_path / "merged")
    ours = tm.load_st(out / "model.safetensors")
    src = tm.load_st(d / "model.safetensors")

    def in_files(k):   # mlx-lm's name as the base's files spell it
        return k if k in src else gen.hf_name(k)
    want = {in_files(k): v for k, v in tm.mlx_fused(d, d / adapter).items()}
    from safetensors.numpy import load_file
    merged = sorted({in_files(k.rsplit(".", 1)[0] + ".weight") for k in
                     load_file(str(d / adapter / "adapters.safetensors"))})
    assert any(must in k for k in merged), merged
    for k in merged:
        assert ours[k].shape == want[k].shape, k
        bound = 1e-6 * np.abs(want[k]) + 1e-6 * np.std(want[k])
        over = np.abs(ours[k] - want[k]) / bound
        assert over.max() <= 1, f"{k}: off mlx-lm's fuse by {over.max():.3g}"
    for k, v in src.items():
        if k in ours and k not in merged:
            assert np.array_equal(ours[k], v), k
    tl.assert_adapter_ref(spindle_bin, d, adapter, "len40", out, [],
                          tmp_path / "m.npy", f"{model} merged")


def test_merge_refuses_gemma4_fused_experts(spindle_bin, hybrid_lora,  # noqa: F811
                                            tmp_path):
    """Transformers' Gemma 4 keeps each layer's experts in one bare
    gate_up_proj: applied unmerged, the experts' adapter matches mlx-lm
    (above); merging it fails with one line."""
    d = hybrid_lora / GEMMA
    r = subprocess.run([str(spindle_bin), "convert", "-i", str(d),
                        "--merge-lora", str(d / "all8"), "-o",
                        str(tmp_path / "merged")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot be merged" in lines[0], r.stderr
    assert not (tmp_path / "merged" / "config.json").exists()


# ---- malformed adapters on the new targets: one line each ----

def _mlx(change):
    return lambda p: tl._rewrite_tensors(p, "adapters.safetensors", change)


def _first(t, part):
    return sorted(k for k in t if part in k)[0]


def _cut(part, axis):
    def change(t):
        k = _first(t, part)
        t[k] = np.delete(t[k], -1, axis=axis)
    return change


def _rename(old, new):
    def change(t):
        for k in [k for k in t if old in k]:
            t[k.replace(old, new)] = t.pop(k)
    return change


MALFORMED = {
    # mlx-lm's LoRALinear: lora_a [in, r], lora_b [r, out]
    "qkvz-rank": ("qwen3_next-f32", "all8",
                  _mlx(_cut("in_proj_qkvz.lora_a", 1)),
                  "rank or shape mismatch"),
    "qkvz-shape": ("qwen3_next-f32", "all8",
                   _mlx(_cut("in_proj_qkvz.lora_b", 1)),
                   "rank or shape mismatch"),
    "ba-shape": ("qwen3_next-f32", "lin4-peft",
                 tl._peft_tensors(_cut("in_proj_ba.lora_B", 0)),
                 "rank or shape mismatch"),
    "out-proj-rank": ("qwen3_5-f32", "lin4-peft",
                      tl._peft_tensors(_cut("out_proj.lora_A", 0)),
                      "rank or shape mismatch"),
    "fused-on-split": ("qwen3_5-f32", "all8",
                       _mlx(_rename("in_proj_qkv.", "in_proj_qkvz.")),
                       "layer 0 has no linear_attn.in_proj_qkvz"),
    "split-on-fused": ("qwen3_next-f32", "all8",
                       _mlx(_rename("in_proj_ba.", "in_proj_b.")),
                       "layer 0 has no linear_attn.in_proj_b"),
    "full-attention-layer": ("qwen3_next-f32", "lin4",
                             _mlx(_rename("layers.2.linear_attn.out_proj",
                                          "layers.3.linear_attn.out_proj")),
                             "layer 3 has no linear_attn.out_proj"),
    "gemma4-expert-rank": (GEMMA, "all8",
                           _mlx(_cut("switch_glu.up_proj.lora_a", 1)),
                           "rank or shape mismatch"),
    "gemma4-router-shape": (GEMMA, "lin4-peft",
                            tl._peft_tensors(_cut("router.proj.lora_B", 0)),
                            "rank or shape mismatch"),
    "gemma4-experts-under-mlp": (GEMMA, "all8",
                                 _mlx(_rename(".experts.switch_glu.",
                                              ".mlp.switch_glu.")),
                                 "has no routed experts"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_adapter_one_line(hybrid_lora, spindle_bin, tmp_path,  # noqa: F811
                                    case):
    model, adapter, breaker, needle = MALFORMED[case]
    d = hybrid_lora / model
    bad = tmp_path / "adapter"
    shutil.copytree(d / adapter, bad)
    breaker(bad)
    tl.assert_adapter_refused(spindle_bin, d, bad, needle)


def test_gguf_base_refused_one_line(hybrid_lora, spindle_bin, tmp_path):  # noqa: F811
    """llama.cpp's converter regroups the DeltaNet's rows in GGUF files:
    an adapter of those projections on a GGUF base fails with one line."""
    import gguf_writer
    d = hybrid_lora / "qwen3_5-f32"
    base = gguf_writer.write_gguf(str(d), str(tmp_path / "m.gguf"), "f32")
    tl.assert_adapter_refused(spindle_bin, base, d / "lin4",
                              "needs a safetensors base")

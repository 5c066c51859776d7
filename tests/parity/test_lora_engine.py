"""LoRA adapters in the step engine (tests/tools/engine_harness): one batch
mixing requests on the base model and on different adapters (and one
adapter at two scales), with prompt chunks and decode rows in the same
forward passes, equals each request run alone and mlx-lm's references
(make_lora_models.py); base requests in the mixed batch are untouched. The
harness drops its adapter references after the first step while the
requests still run (the engine's references keep them alive; run under
ASan to see it).
"""

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_lora_models as gen  # noqa: E402
import parity_common as pc  # noqa: E402
import test_engine as te  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

P = gen.PROMPTS


@pytest.fixture(scope="session")
def lora_dir(spindle_bin):  # noqa: F811
    if not te.HARNESS.is_file():
        pytest.skip(f"engine harness not found at {te.HARNESS}")
    return pc.ensure_models(gen.DEFAULT_OUT, gen)


def mixed_requests():
    def q(prompt, adapter=None, **kw):
        r = dict(prompt=prompt, max_tokens=gen.MAX_TOKENS, logits=True, **kw)
        if adapter:
            r["adapter"] = adapter
        return r
    return [
        q(P["len40"], "all8"),
        q(P["len7"]),                      # base
        q(P["len7"], "qvd4"),
        q(P["len40"]),                     # base
        q(P["len7"], "all8-peft", submit_at=0),
        q(P["len40"], "qvd4-peft"),
        q(te.MID, "all8", adapter_scale=0.5),
        q(P["len7"], "all8"),
    ]


def reference(d, req):
    """mlx-lm's entry for a request whose prompt and adapter it covers."""
    ref = json.loads((d / "reference.json").read_text())
    name = {tuple(v): k for k, v in P.items()}.get(tuple(req["prompt"]))
    if not name or req.get("adapter_scale"):
        return None, None
    adapter = req.get("adapter", "").removesuffix("-peft")
    if adapter:
        ref = dict(ref, **ref["adapters"][adapter])
    return ref, ref["prompts"][name]


@pytest.mark.parametrize("model", [s["name"] for s in gen.SPECS[:2]])
def test_mixed_adapter_batch(lora_dir, tmp_path, model):
    d = lora_dir / model
    adapters = {n: str(d / n) for n in
                ("all8", "qvd4", "all8-peft", "qvd4-peft")}
    reqs = mixed_requests()
    batched = te.run(d, tmp_path, "step", reqs, max_seqs=8,
                     max_batch_tokens=te.BUDGET, adapters=adapters,
                     unload_adapters_at=1)
    alone = te.run(d, tmp_path, "step", reqs, max_seqs=1, adapters=adapters)
    te.check_finished_once(batched)
    for i, (b, a, req) in enumerate(zip(batched, alone, reqs)):
        label = f"request {i} ({req.get('adapter', 'base')})"
        assert b["stop_reason"] == a["stop_reason"], label
        te.assert_same_tokens(b, a, label)
        te.assert_close_logits(b, a, label)
        ref, entry = reference(d, req)
        if ref:
            pc.assert_greedy_tokens({"tokens": b["tokens"]}, ref, entry)
    # the adapters change the output (a no-op adapter would pass the above)
    assert batched[0]["tokens"] != batched[3]["tokens"]
    assert batched[1]["tokens"] != batched[2]["tokens"]

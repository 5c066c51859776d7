"""The prefix index on models whose layers are not all full KV, through the
step engine (tests/tools/engine_harness): the hybrid gated-DeltaNet
families (qwen3_5, qwen3_5_moe, qwen3_next: recurrent conv + delta-rule
state beside full attention), LFM2 (a recurrent conv window only beside
full attention) and the sliding-window ones (gemma3, gpt-oss: window-8
layers beside full attention), on the tiny mlx-lm parity models.

A later prompt maps the published blocks it shares and restores the other
layers' state kept at the last shared block boundary
(src/runtime/prefix_states.h). Checks:
  * with the index on, the requests sharing a prefix report cached_tokens
    exactly as the full-KV models do (whole 32-token blocks of the longest
    published history: with a per-step budget of 16 every boundary a
    sequence crosses gets its state), and more than 0 in all;
  * their tokens equal a cold run's (the index off: every prompt computed
    in full; the parity near-tie rule) and their logits are within the
    f32 tolerance of it;
  * every block is accounted for at the end.
"""

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_gemma3_models as gm  # noqa: E402
import make_gptoss_models as om  # noqa: E402
import make_hybrid_models as hm  # noqa: E402
import make_hybrid_moe_models as qm  # noqa: E402
import make_lfm2_models as lm  # noqa: E402
import parity_common as pc  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)
from test_engine import (HARNESS, assert_close_logits,  # noqa: E402
                         assert_same_tokens, check_finished_once,
                         run_scenario)
from test_engine_prefix import (assert_pool_accounted,  # noqa: E402
                                cached_expected, prefix_requests)

SETS = {
    "qwen3_5-f32": (hm, "SPINDLE_HYBRID_PARITY_DIR"),
    "qwen3_next-f32": (hm, "SPINDLE_HYBRID_PARITY_DIR"),
    "qwen3_5_moe-f32": (qm, "SPINDLE_HYBRID_MOE_PARITY_DIR"),
    "lfm2-f32": (lm, "SPINDLE_LFM2_PARITY_DIR"),
    "gemma3-f32": (gm, "SPINDLE_GEMMA3_PARITY_DIR"),
    "gptoss-f32": (om, "SPINDLE_GPTOSS_PARITY_DIR"),
}


def model_dir(name):
    if not HARNESS.is_file():
        pytest.skip(f"engine harness not found at {HARNESS}")
    gen, env = SETS[name]
    return pc.ensure_models(Path(os.environ.get(env, gen.DEFAULT_OUT)),
                            gen) / name


@pytest.mark.parametrize("model", list(SETS))
def test_shared_prefix_restores_the_boundary_state(spindle_bin, tmp_path,  # noqa: F811
                                                   model):
    mdir = model_dir(model)
    reqs = prefix_requests()
    on = run_scenario(mdir, tmp_path, "step", reqs, max_seqs=4,
                      max_batch_tokens=16)
    cold = run_scenario(mdir, tmp_path, "step", reqs, max_seqs=4,
                        max_batch_tokens=16, no_prefix_cache=True)
    check_finished_once(on["requests"])
    published = []
    for i, (got, want) in enumerate(zip(on["requests"], cold["requests"])):
        label = f"{model} request {i}"
        assert want["stats"]["cached_tokens"] == 0, label
        assert got["stats"]["cached_tokens"] == \
            cached_expected(reqs[i]["prompt"], published), label
        published.append(reqs[i]["prompt"] + got["tokens"][:-1])
        assert_same_tokens(got, want, label)
        assert_close_logits(got, want, label)
    assert sum(q["stats"]["cached_tokens"] for q in on["requests"]) > 0
    assert_pool_accounted(on, model)
    assert_pool_accounted(cold, model)

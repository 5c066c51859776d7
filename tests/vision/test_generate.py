"""Images in the prompt end to end: `spindle run --image` against mlx-vlm
on the tiny random-weight Gemma 3 model (make_gemma3_vlm.py).

The reference is mlx-vlm's own pipeline: its chat formatting for Gemma 3
(apply_chat_template: the image markers after the text), prepare_inputs
(its processor's expansion of each marker into 256 image tokens, its image
processor), Model.get_input_embeddings (vision tower, projector, the image
features scattered into the prompt), then its language model, greedy.
mlx-vlm runs the image positions causally; Gemma 3 was trained with them
attending to each other (transformers' token_type_ids mask, llama.cpp's
non-causal image batch), which is what Spindle computes. So the reference
runs the prompt with that mask given explicitly: causal, with each image's
256 positions opened to each other; test_reference_loop_is_mlx_vlm_generate
checks that the same loop with the causal mask gives mlx_vlm.generate's
tokens, so the loop is mlx-vlm's.

Checked: the prompt ids equal the processor's; the greedy tokens equal the
reference's up to its first near-tie; the last prompt position's logits
within f32 tolerance."""
import json
import subprocess

import numpy as np
import pytest

from vision_common import (SPINDLE_BIN, load_reference, save, synthetic,  # noqa: F401
                           tiny_vlm)

N_TOKENS = 12
TOL_REL = 1e-4          # max |logit error| / std of the reference logits


@pytest.fixture(scope="module")
def reference(tiny_vlm):
    return load_reference(tiny_vlm)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("images")
    return [save(synthetic("RGB", 300, 200, 1), d / "a.png", "PNG"),
            save(synthetic("RGBA", 97, 131, 2), d / "b.png", "PNG"),
            save(synthetic("RGB", 640, 480, 3), d / "c.jpg", "JPEG"),
            save(synthetic("L", 50, 70, 4), d / "d.webp", "WEBP")]


def spindle(mdir, imgs, prompt, tmp_path, chat=True):
    logits = tmp_path / "logits.npy"
    cmd = [str(SPINDLE_BIN), "run", "-m", str(mdir), "-p", prompt, "-n",
           str(N_TOKENS), "--temp", "0", "--json", "--ignore-eos",
           "--dump-logits", str(logits)]
    if chat:
        cmd.append("--chat")
    for i in imgs:
        cmd += ["--image", str(i)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    return out["prompt_tokens"], out["tokens"], np.load(logits)


def image_mask(ids, image_token, bidirectional):
    n = len(ids)
    allowed = np.tril(np.ones((n, n), bool))
    if bidirectional:
        ids = np.asarray(ids)
        i = 0
        while i < n:
            if ids[i] != image_token:
                i += 1
                continue
            j = i
            while j < n and ids[j] == image_token:
                j += 1
            allowed[i:j, i:j] = True
            i = j
    return np.where(allowed, 0.0, -np.inf).astype(np.float32)


def reference_run(model, processor, imgs, prompt, chat=True, bidirectional=True):
    """(prompt ids, greedy tokens, logits per step) from mlx-vlm's pipeline."""
    import mlx.core as mx
    from mlx_vlm.models.cache import make_prompt_cache
    from mlx_vlm.prompt_utils import apply_chat_template
    from mlx_vlm.utils import prepare_inputs
    cfg = model.config
    marker = "<start_of_image>"
    if chat:
        text = apply_chat_template(processor, cfg, prompt, num_images=len(imgs))
    else:   # spindle run's rule: markers after the text unless it has them
        text = prompt if marker in prompt else prompt + marker * len(imgs)
    inputs = prepare_inputs(processor, images=[str(i) for i in imgs],
                            prompts=text, image_token_index=cfg.image_token_index,
                            add_special_tokens=not chat)
    ids = inputs["input_ids"]
    emb = model.get_input_embeddings(ids, inputs["pixel_values"].astype(mx.float32),
                                     mask=inputs["attention_mask"]).inputs_embeds
    ids_list = np.array(ids[0]).tolist()
    mask = mx.array(image_mask(ids_list, cfg.image_token_index, bidirectional))
    cache = make_prompt_cache(model.language_model)
    lm = model.language_model
    out = lm(ids, inputs_embeds=emb, mask=mask, cache=cache).logits
    steps, toks = [], []
    for _ in range(N_TOKENS):
        logits = np.array(out[0, -1].astype(mx.float32))
        steps.append(logits)
        toks.append(int(np.argmax(logits)))
        out = lm(mx.array([[toks[-1]]]), cache=cache).logits
    return ids_list, toks, steps


def assert_greedy(got, want, steps, tol):
    for i, (g, w) in enumerate(zip(got, want)):
        if g == w:
            continue
        top = np.sort(steps[i])[-2:]
        assert top[1] - top[0] <= 2 * tol * np.std(steps[i]), \
            f"token {i}: {g} != {w} (reference margin {top[1] - top[0]:.3g})"
        return   # a near-tie: later tokens follow different histories
    assert len(got) == len(want)


CASES = [  # (image indices, prompt, chat)
    ([0], "What is in this picture?", True),
    ([1], "Describe the image in detail.", True),
    ([2], "Count the objects.", True),
    ([3], "What is in this picture?", True),
    ([0, 2], "Compare these images.", True),
    ([1, 3, 0], "Compare these images and count the objects.", True),
    ([2], "A cat sits on a red mat", False),
    ([0, 1], "<start_of_image> and <start_of_image>: two dogs", False),
]


@pytest.mark.parametrize("idx,prompt,chat", CASES,
                         ids=[f"{len(c[0])}img-{'chat' if c[2] else 'raw'}-{k}"
                              for k, c in enumerate(CASES)])
def test_greedy_tokens_match_mlx_vlm(reference, images, tiny_vlm, tmp_path,
                                     idx, prompt, chat):
    model, processor = reference
    imgs = [images[i] for i in idx]
    ids, toks, logits = spindle(tiny_vlm, imgs, prompt, tmp_path, chat)
    want_ids, want_toks, steps = reference_run(model, processor, imgs, prompt,
                                               chat)
    assert ids == want_ids
    tol = TOL_REL
    err = float(np.max(np.abs(logits - steps[0])) / np.std(steps[0]))
    assert err <= tol, f"last prompt logits: max|err|/std {err:.3g}"
    assert_greedy(toks, want_toks, steps, tol)


def test_reference_loop_is_mlx_vlm_generate(reference, images):
    from mlx_vlm import stream_generate
    from mlx_vlm.prompt_utils import apply_chat_template
    model, processor = reference
    prompt = "Describe the image in detail."
    _, toks, _ = reference_run(model, processor, [images[1]], prompt,
                               bidirectional=False)
    text = apply_chat_template(processor, model.config, prompt, num_images=1)
    want = [r.token for r in stream_generate(
        model, processor, text, image=[str(images[1])], max_tokens=N_TOKENS,
        temperature=0.0)]
    # stream_generate reports one more response at its end.
    assert toks == want[:N_TOKENS]


def test_image_positions_attend_both_ways(reference, images, tiny_vlm,
                                          tmp_path):
    """The flag matters: with a causal image block the logits differ."""
    model, processor = reference
    _, _, logits = spindle(tiny_vlm, [images[0]], "Hi", tmp_path)
    _, _, causal = reference_run(model, processor, [images[0]], "Hi",
                                 bidirectional=False)
    assert np.max(np.abs(logits - causal[0])) > 100 * TOL_REL * np.std(causal[0])

#!/usr/bin/env python3
"""A tiny random-weight Gemma 3 vision-language model, written by mlx-vlm's
own gemma3 Model class and save functions, with a byte-level BPE tokenizer
(tokenizers' trainer) holding Gemma 3's special tokens, Gemma 3's chat
template and its image processor's preprocessor_config.json.

The vision tower keeps the real model's geometry where it matters to the
code paths: 896 x 896 images in 14 x 14 patches (64 x 64 = 4096 patches),
pooled 4 x 4 to 256 soft tokens; everything else is small.

Usage: python tests/vision/make_gemma3_vlm.py OUT_DIR [--dtype float32]"""
import argparse
import json
import sys
from pathlib import Path

SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>",
           "<end_of_turn>", "<start_of_image>", "<end_of_image>",
           "<image_soft_token>"]
BOI, EOI, IMAGE = 6, 7, 8
EMB_SCALE = 0.05
LOGIT_STD = 4.0

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- if messages[0]['content'] is string -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}"
    "{%- endif -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = \"\" -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'assistant') -%}{%- set role = \"model\" -%}"
    "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}"
    "{%- if message['content'] is string -%}{{ message['content'] | trim }}"
    "{%- elif message['content'] is iterable -%}"
    "{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{ '<start_of_image>' }}"
    "{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}"
    "{%- endif -%}{%- endfor -%}"
    "{%- endif -%}"
    "{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{'<start_of_turn>model\n'}}{%- endif -%}")

CORPUS = ("What is in this picture? Describe the image in detail. A cat sits "
          "on a red mat near the window; two dogs run in the green park. "
          "Compare these images and count the objects. The quick brown fox "
          "jumps over the lazy dog.\n\n") * 4


def tokenizer_files(out, vocab):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([CORPUS], trainer)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>",
        "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
        "add_bos_token": True, "add_eos_token": False,
        "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
        "image_token": "<image_soft_token>",
        "extra_special_tokens": {"boi_token": "<start_of_image>",
                                 "eoi_token": "<end_of_image>",
                                 "image_token": "<image_soft_token>"},
        "model_max_length": 4096, "chat_template": CHAT_TEMPLATE}, indent=1))
    (out / "chat_template.json").write_text(
        json.dumps({"chat_template": CHAT_TEMPLATE}))
    return tok.get_vocab_size()


def config(vocab):
    text = dict(model_type="gemma3_text", hidden_size=64, num_hidden_layers=3,
                intermediate_size=128, num_attention_heads=2,
                num_key_value_heads=1, head_dim=32, query_pre_attn_scalar=32,
                rms_norm_eps=1e-6, vocab_size=vocab, sliding_window=1024,
                sliding_window_pattern=2, rope_theta=1000000.0,
                rope_local_base_freq=10000.0, max_position_embeddings=4096,
                mm_tokens_per_image=256, hidden_activation="gelu_pytorch_tanh")
    vision = dict(model_type="siglip_vision_model", hidden_size=48,
                  intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=3, patch_size=14, image_size=896,
                  num_channels=3, layer_norm_eps=1e-6,
                  vision_use_head=False)
    return dict(model_type="gemma3", architectures=[
        "Gemma3ForConditionalGeneration"], text_config=text,
        vision_config=vision, image_token_index=IMAGE, boi_token_index=BOI,
        eoi_token_index=EOI, mm_tokens_per_image=256, hidden_size=64,
        pad_token_id=0, eos_token_id=[1, 5], bos_token_id=2,
        tie_word_embeddings=True)


def randomize(model, seed):
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten
    mx.random.seed(seed)
    new = []
    for name, p in tree_flatten(model.parameters()):
        if name.endswith("bias"):
            v = 0.02 * mx.random.normal(p.shape)
        elif "layer_norm" in name or "layernorm" in name and "vision" in name:
            v = 1.0 + 0.1 * mx.random.normal(p.shape)      # LayerNorm: w
        elif name == "language_model.model.norm.weight":
            # The final norm sets the logit scale (std about LOGIT_STD), as
            # tests/parity/make_gemma3_models.py does.
            gain = LOGIT_STD / (EMB_SCALE * p.shape[0] ** 0.5)
            v = gain * (1.0 + 0.2 * mx.random.normal(p.shape)) - 1.0
        elif "norm" in name:
            v = 0.3 * mx.random.normal(p.shape)            # RMSNorm: 1 + w
        elif "embed_tokens" in name:
            # Small (a tied head must not just repeat the input token), with
            # log-normal row norms for peaky logits.
            rows = mx.exp(0.2 * mx.random.normal((p.shape[0], 1)))
            v = EMB_SCALE * rows * mx.random.normal(p.shape)
        else:
            fan_in = p.shape[-1] if p.ndim > 1 else 1
            if "mm_input_projection" in name:
                fan_in = p.shape[0]
            if "patch_embedding" in name:
                fan_in = p.shape[1] * p.shape[2] * p.shape[3]
            v = mx.random.normal(p.shape) / (fan_in ** 0.5)
            if "mm_input_projection" in name:
                # Image rows about as large as the scaled text embeddings:
                # larger, 256 of them would drown the text.
                v = 0.3 * v
        new.append((name, v.astype(p.dtype)))
    model.update(tree_unflatten(new))
    params = dict(tree_flatten(model.parameters()))
    # Tied, as Gemma is (mlx-vlm's gemma3 ties lm_head to the embeddings
    # whatever the file holds).
    model.update(tree_unflatten([("language_model.lm_head.weight",
                                  params["language_model.model.embed_tokens.weight"])]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args()
    import mlx.core as mx
    from mlx_vlm.models import gemma3
    from mlx_vlm.utils import save_config, save_weights
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    vocab = tokenizer_files(out, 320)
    cfg = config(vocab)
    mc = gemma3.ModelConfig.from_dict(cfg)
    mc.text_config = gemma3.TextConfig.from_dict(cfg["text_config"])
    mc.vision_config = gemma3.VisionConfig.from_dict(cfg["vision_config"])
    model = gemma3.Model(mc)
    randomize(model, a.seed)
    model.set_dtype(getattr(mx, a.dtype))
    save_weights(out, model, donate_weights=False)
    save_config(cfg, out / "config.json")
    (out / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Gemma3ImageProcessor",
        "processor_class": "Gemma3Processor", "do_convert_rgb": None,
        "do_normalize": True, "do_rescale": True, "do_resize": True,
        "do_pan_and_scan": None, "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5], "image_seq_length": 256,
        "resample": 2, "rescale_factor": 0.00392156862745098,
        "size": {"height": 896, "width": 896}}, indent=1))
    (out / "processor_config.json").write_text(json.dumps(
        {"image_seq_length": 256, "processor_class": "Gemma3Processor"}))
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 2, "eos_token_id": [1, 5], "pad_token_id": 0}))


if __name__ == "__main__":
    sys.exit(main())

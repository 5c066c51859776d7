#!/usr/bin/env python3
"""One-time checks that need torch (too heavy for CI's venv), run with a
separate Python that has torch, transformers, peft and sentence-transformers
(e.g. a venv outside the repo); not collected by pytest.

  (a) tests/gguf_writer.write_lora_gguf writes the same LoRA GGUF as
      llama.cpp's convert_lora_to_gguf.py (--outtype f32) from the PEFT
      adapters of make_lora_models.py: same tensor names, shapes, bytes,
      general.type, general.architecture, adapter.type, adapter.lora.alpha.
  (b) `spindle convert --merge-lora ... --dtype f32` equals PEFT's
      merge_and_unload on the same base (f32) and adapter.

  VENDOR=.../llama.cpp /path/to/venv/bin/python tests/parity/check_lora_refs_torch.py

Run 2026-12-01 (llama.cpp of llama-cpp-python 0.3.36, torch 2.15.0, peft
0.21.2, transformers 5.24.0): (a) identical for llama-f32 and qwen3-f32,
all8 and qvd4 (28, 6, 42, 6 tensors); (b) max |spindle - PEFT| / std at
most 9.7e-07 over every tensor, for qwen3-f32, llama-f32 and qwen2-bf16
(upcast), all8 and qvd4 (rsLoRA).
"""
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
W = ROOT / "tests" / ".work" / "lora"
SPINDLE = os.environ.get("SPINDLE_BIN", str(ROOT / "build" / "spindle"))
V = os.environ["VENDOR"]
sys.path.insert(0, V + "/gguf-py")
sys.path.insert(0, str(ROOT / "tests"))
import gguf  # noqa: E402
import gguf_writer  # noqa: E402
def load_st(path):
    raw = open(path, "rb").read(); (n,) = struct.unpack("<Q", raw[:8]); h = json.loads(raw[8:8+n]); out = {}
    for k, i in h.items():
        if k == "__metadata__": continue
        a, b = i["data_offsets"]; buf = np.frombuffer(raw[8+n+a:8+n+b], np.uint8)
        if i["dtype"] == "F32": out[k] = buf.view("<f4").reshape(i["shape"])
        elif i["dtype"] == "BF16": out[k] = (buf.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(i["shape"])
    return out


def check_converter(tmp):
    for m in ["llama-f32", "qwen3-f32"]:
        for a in ["all8-peft", "qvd4-peft"]:
            ref = f"{tmp}/conv_{m}_{a}.gguf"
            subprocess.run([sys.executable, V + "/convert_lora_to_gguf.py",
                            "--base", f"{W}/{m}", "--outtype", "f32",
                            "--outfile", ref, f"{W}/{m}/{a}"], check=True,
                           capture_output=True)
            ours = gguf_writer.write_lora_gguf(f"{W}/{m}", f"{W}/{m}/{a}",
                                               f"{tmp}/ours_{m}_{a}.gguf")
            R, O = gguf.GGUFReader(ref), gguf.GGUFReader(ours)
            rt = {t.name: t for t in R.tensors}
            ot = {t.name: t for t in O.tensors}
            assert set(rt) == set(ot), set(rt) ^ set(ot)
            for k in rt:
                assert list(rt[k].shape) == list(ot[k].shape), k
                assert np.array_equal(np.array(rt[k].data), np.array(ot[k].data)), k
            for key in ["general.type", "general.architecture", "adapter.type",
                        "adapter.lora.alpha"]:
                rf, of = R.fields[key], O.fields[key]
                assert np.array_equal(rf.parts[rf.data[0]], of.parts[of.data[0]]), key
            print(m, a, "identical:", len(rt), "tensors")


def check_peft_merge(tmp):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    for m in ["qwen3-f32", "llama-f32", "qwen2-bf16"]:
        for a in ["all8-peft", "qvd4-peft"]:
            out = f"{tmp}/merged_{m}_{a}"
            subprocess.run([SPINDLE, "convert", "-i", f"{W}/{m}", "--merge-lora",
                            f"{W}/{m}/{a}", "-o", out, "--dtype", "f32"], check=True)
            base = AutoModelForCausalLM.from_pretrained(f"{W}/{m}",
                                                        torch_dtype=torch.float32)
            pm = PeftModel.from_pretrained(base, f"{W}/{m}/{a}").merge_and_unload()
            ours = load_st(f"{out}/model.safetensors")
            worst = 0.0
            for k, v in pm.state_dict().items():
                if k in ours:
                    v = v.detach().float().numpy()
                    worst = max(worst, float(np.max(np.abs(ours[k] - v)) / np.std(v)))
            print(m, a, f"max|spindle - peft merge_and_unload|/std {worst:.3g}")
            assert worst < 1e-5


if __name__ == "__main__":
    import tempfile
    with tempfile.TemporaryDirectory() as t:
        check_converter(t)
        check_peft_merge(t)

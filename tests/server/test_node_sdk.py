"""The official OpenAI Node SDK (npm `openai`, tests/package.json) against
the server: the models list, a chat answer and the same chat streamed, and
the same conversation through the Responses API whole and streamed, each
equal to mlx-lm's greedy reference, and a streamed tool call joined from
the SDK's deltas (through spindle_scripted, as test_tool_calls_server.py).

The SDK is found in tests/node_modules (scripts/setup.sh installs it), or in
$SPINDLE_NODE_MODULES."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from server_common import REPO, Server
from scripted_calls import CALLS, SCRIPTED_BIN
from test_tool_calls_server import SCRIPT, TOOLS

HERE = Path(__file__).resolve().parent
ALIAS = "tiny-node"


def node_modules():
    for d in (os.environ.get("SPINDLE_NODE_MODULES"), REPO / "tests" / "node_modules"):
        if d and (Path(d) / "openai" / "package.json").is_file():
            return Path(d)
    pytest.skip("the OpenAI Node SDK is not installed (scripts/setup.sh: npm install in tests/)")


@pytest.fixture(scope="module")
def node_server(server_model):
    if not shutil.which("node"):
        pytest.skip("node is not installed")
    scripted = os.access(SCRIPTED_BIN, os.X_OK)
    s = Server(server_model, "--alias", ALIAS, binary=SCRIPTED_BIN if scripted else None,
               env={"SPINDLE_TEST_SCRIPT": json.dumps(SCRIPT)})
    try:
        yield s, scripted
    finally:
        s.stop_cleanly()


def test_node_sdk_chat_stream_models(node_server, reference, tmp_path):
    server, scripted = node_server
    modules = node_modules()
    # ES modules resolve packages next to the script: run a copy beside a
    # link to the SDK's node_modules.
    shutil.copy(HERE / "node_sdk_client.mjs", tmp_path / "client.mjs")
    (tmp_path / "node_modules").symlink_to(modules)
    ref = reference["chats"]["hello"]
    env = {**os.environ, "MESSAGES_JSON": json.dumps(ref["messages"]),
           "MAX_TOKENS": str(reference["max_tokens"])}
    if scripted:
        env["TOOLS_JSON"] = json.dumps(TOOLS)
    p = subprocess.run(["node", str(tmp_path / "client.mjs"), server.base_url + "/v1", ALIAS],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["models"] == [ALIAS]
    assert out["whole"]["content"] == ref["text"] and out["whole"]["finish"] == "length"
    assert out["whole"]["usage"]["completion_tokens"] == len(ref["tokens"])
    assert out["stream"]["content"] == ref["text"] and out["stream"]["finish"] == "length"
    assert out["stream"]["usage"]["prompt_tokens"] == out["whole"]["usage"]["prompt_tokens"]
    assert out["responses"]["text"] == ref["text"] and out["responses"]["status"] == "incomplete"
    assert out["responses"]["usage"]["input_tokens"] == out["whole"]["usage"]["prompt_tokens"]
    assert out["responses_stream"] == {"text": ref["text"], "last": "response.incomplete"}
    if scripted:
        calls = out["tools"]["calls"]
        assert out["tools"]["finish"] == "tool_calls"
        assert [(c["name"], json.loads(c["arguments"])) for c in calls] == CALLS
        assert all(c["id"].startswith("call_") for c in calls)

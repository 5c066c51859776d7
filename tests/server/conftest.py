"""Fixtures of the server suite: the model (built once), its mlx-lm
references, one shared server per module and an OpenAI SDK client on it."""
import pytest

from server_common import ALIAS, Server, load_reference, model_dir


@pytest.fixture(scope="session")
def server_model():
    return model_dir()


@pytest.fixture(scope="session")
def reference(server_model):
    return load_reference(server_model)


@pytest.fixture(scope="module")
def server(server_model):
    s = Server(server_model, "--alias", ALIAS, "--parallel", 4)
    try:
        yield s
    finally:
        s.stop_cleanly()


@pytest.fixture(scope="module")
def client(server):
    openai = pytest.importorskip("openai")
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused",
                       timeout=120, max_retries=0) as c:
        yield c

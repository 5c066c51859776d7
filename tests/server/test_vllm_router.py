"""Three `spindle serve` replicas (1 thread each) behind vLLM's real router
(`vllm-router`, cache_aware policy), driven through the openai SDK pointed
at the router: a multi-tenant workload (shared system prompts,
multi-turn conversations) answers exactly what one server answers
(greedy), and no request fails while one replica is SIGKILLed and
restarted mid-workload: the router retries what the dead replica dropped,
takes it out on its failed health checks, keeps it out while its /health
is 503 (loading) and takes it back once /health is 200."""
import concurrent.futures
import json
import signal
import time

import pytest

from router_cluster import (Router, chat_turn, free_port, router_binary, start_replica,
                            wait_until, workload)
from server_common import ALIAS, assert_api_error, post_json, request, running

TENANTS, CONVERSATIONS, TURNS = 3, 2, 4
MAX_TOKENS = 24

# The router checks health every second and acts on one result, so that
# the test sees it take the replica out and back within seconds; its
# retries (with backoff) outlast the replica's absence.
ROUTER_FLAGS = ["--health-check-interval-secs", 1, "--health-failure-threshold", 1,
                "--health-success-threshold", 1, "--retry-max-retries", 10,
                "--retry-initial-backoff-ms", 200, "--retry-max-backoff-ms", 2000]


@pytest.fixture(scope="module")
def cluster(server_model, tmp_path_factory):
    if router_binary() is None:
        pytest.skip("vllm-router is not installed (tests/requirements.txt)")
    ports = [free_port() for _ in range(3)]
    replicas, router = [], None
    try:
        for p in ports:
            replicas.append(start_replica(server_model, p, ALIAS))
        router = Router([r.base_url for r in replicas], "cache_aware",
                        tmp_path_factory.mktemp("router") / "router.log", *ROUTER_FLAGS)
        yield replicas, router
    finally:
        if router:
            router.stop()
        failed = {r.base_url: r.stderr()[-3000:] for r in replicas if r.stop() != 0}
    # The replicas exit 0 on SIGTERM (the sanitizer build: without a leak).
    assert not failed, failed


def run_turn(client, convs, turn, stream=False):
    """Turn `turn` of every conversation at once (a thread each); every
    request must succeed."""
    with concurrent.futures.ThreadPoolExecutor(len(convs)) as pool:
        futures = [pool.submit(chat_turn, client, ALIAS, c, turn, MAX_TOKENS, stream)
                   for c in convs]
        return [f.result(timeout=300) for f in futures]


def generations(replica):
    data = request(replica.port, "GET", "/metrics", timeout=10)[2].decode()
    return float(data.split("\nspindle_generations_total ", 1)[1].split("\n", 1)[0])


def kill_and_restart(replicas, killed, router, server_model, workload):
    """SIGKILL replica `killed` once a request of `workload` (a future)
    runs on it, see the router take it out, restart it on its port, see
    /health 503 while it loads and the router keep it out, then 200 and
    the router take it back. The new replica replaces the old in
    `replicas`; returns the restarted replica's first /health status."""
    victim = replicas[killed]
    url = victim.base_url
    while running(victim) == 0:
        if workload.done():
            workload.result()   # a failed request's exception first
            raise AssertionError("no request ran on the replica while the workload ran")
        time.sleep(0.005)
    victim.signal(signal.SIGKILL)
    victim.wait_exit(10)
    wait_until(lambda: not router.workers()[url], 20, "the router to mark the killed replica down")
    fresh = start_replica(server_model, victim.port, ALIAS, wait_ready=False)
    replicas[killed] = fresh
    # While it loads, /health is 503 and the router (checking every
    # second) keeps it out.
    first = request(fresh.port, "GET", "/health")[0]
    deadline = time.monotonic() + 120
    while request(fresh.port, "GET", "/health")[0] == 503 and time.monotonic() < deadline:
        assert not router.workers()[url], "the router counted a loading replica healthy"
        time.sleep(0.1)
    fresh.wait_status("/health", 200, 120)
    wait_until(lambda: router.workers()[url], 20, "the router to take the replica back")
    return first


def test_replicas_behind_router_answer_as_one_server_through_a_restart(
        cluster, client, server_model):
    openai = pytest.importorskip("openai")
    replicas, router = cluster

    # The single server's answers (the suite's shared server).
    reference = workload(TENANTS, CONVERSATIONS, TURNS)
    for turn in range(TURNS):
        run_turn(client, reference, turn)

    routed = workload(TENANTS, CONVERSATIONS, TURNS)
    with openai.OpenAI(base_url=router.base_url + "/v1", api_key="unused", timeout=300,
                       max_retries=0) as via_router:
        run_turn(via_router, routed, 0)
        # The replica that served most of the first turn holds those
        # conversations' prefixes: cache_aware sends their next turns back
        # to it, and it is killed under them.
        killed = max(range(len(replicas)), key=lambda i: generations(replicas[i]))
        # Turns 2 and 3 run while it is killed and restarted.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            middle = pool.submit(lambda: [run_turn(via_router, routed, t) for t in (1, 2)])
            first_health = kill_and_restart(replicas, killed, router, server_model, middle)
            middle.result(timeout=300)
        # The last turn with the restarted replica back in the pool,
        # streamed (the router relays the SSE chunks).
        run_turn(via_router, routed, 3, stream=True)

    assert first_health == 503, "the restarted replica's /health was not 503 while loading"
    for want, got in zip(reference, routed):
        assert got.answers == want.answers, (want.questions, router.log())
    # The router spread the tenants over the replicas and sent the replayed
    # turn somewhere: every answer came from a replica.
    served = sum(generations(r) for r in replicas)
    assert served >= 1 and sum(generations(r) > 0 for r in replicas) >= 2


def test_worker_routes_answer_the_router(cluster):
    """What the router reads from a worker, through the router's own
    pass-through routes (its /get_server_info and /get_model_info ask a
    worker; /get_loads asks every worker's /get_load)."""
    replicas, router = cluster
    status, _, data = request(router.port, "GET", "/get_loads")
    assert status == 200
    loads = json.loads(data)["workers"]
    assert sorted(w["worker"] for w in loads) == sorted(r.base_url for r in replicas)
    assert all(w["load"] >= 0 for w in loads), loads   # -1: the worker's answer was unreadable
    status, _, data = request(router.port, "GET", "/get_model_info")
    assert status == 200 and json.loads(data)["is_generation"] is True


# ---- the worker routes on one server (the suite's shared server)

def test_render_gives_the_reference_prompt_ids(server, reference):
    """vLLM's render routes answer the prompt ids mlx-lm's tokenizer gives
    (apply_chat_template for a chat, encode for a completion): what a
    cache-aware router hashes must be what the replica computes."""
    for ref in reference["chats"].values():
        status, _, body = post_json(server.port, "/v1/chat/completions/render",
                                    {"model": ALIAS, "messages": ref["messages"]})
        assert status == 200, body
        assert body["token_ids"] == ref["prompt_tokens"] and body["model"] == ALIAS
    for ref in reference["texts"].values():
        status, _, body = post_json(server.port, "/v1/completions/render",
                                    {"model": ALIAS, "prompt": ref["prompt"]})
        assert status == 200 and len(body) == 1, body
        assert body[0]["token_ids"] == ref["prompt_tokens"]
    status, _, body = post_json(server.port, "/v1/completions/render", {"prompt": [5, 6, 7]})
    assert status == 200 and body[0]["token_ids"] == [5, 6, 7]


@pytest.mark.parametrize("path,body,want,param", [
    ("/v1/chat/completions/render", {"model": "nope", "messages": [{"role": "user",
                                                                    "content": "hi"}]},
     404, "model"),
    ("/v1/chat/completions/render", {"messages": "hi"}, 400, "messages"),
    ("/v1/completions/render", {"prompt": "hi", "max_tokens": 10 ** 6}, 400, "max_tokens"),
    ("/v1/completions/render", "{not json", 400, None),
])
def test_render_refuses_what_generation_refuses(server, path, body, want, param):
    status, _, out = post_json(server.port, path, body)
    assert_api_error(status, out, want, param)


def get_json(port, path):
    status, _, data = request(port, "GET", path)
    assert status == 200, (path, status, data)
    return json.loads(data)


def test_server_info_load_and_model_info(server, server_model):
    """/get_server_info's KV block size is the pool's (vllm:cache_config_info
    in /metrics); an idle server's load is 0."""
    info = get_json(server.port, "/get_server_info")
    metrics = request(server.port, "GET", "/metrics")[2].decode()
    block = int(metrics.split('vllm:cache_config_info{block_size="', 1)[1].split('"', 1)[0])
    assert info["model_id"] == ALIAS and info["kv_block_size"] == block
    assert info["model_path"] == str(server_model)
    assert get_json(server.port, "/get_load") == {"load": 0, "num_reqs": 0,
                                                  "num_waiting_reqs": 0}
    assert get_json(server.port, "/get_model_info")["is_generation"] is True
    assert get_json(server.port, "/health_generate") == {"status": "ok"}

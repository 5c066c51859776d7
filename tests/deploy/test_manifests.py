"""deploy/*.yaml against the published schemas, no cluster needed:

- Kubernetes' own kinds (the Deployment) with kubernetes-validate (the
  Kubernetes JSON schemas it bundles, strict: an unknown field fails), for
  the oldest and the newest Kubernetes release checked;
- the InferencePool and the HTTPRoute against the openAPIV3Schema of their
  CustomResourceDefinitions as published (tests/deploy/schemas/README.md:
  gateway-api-inference-extension v1.6.0, gateway-api v1.6.1), made strict
  the way `kubectl --validate=strict` is: a field the schema does not name
  fails unless the schema keeps unknown fields;
- and what ties them together: the pool selects the Deployment's pods on
  their serving port, the route points at the pool, the probes ask /health,
  the pods carry llm-d's labels and publish KV events on the port they
  declare, and the resources cover the threads and the KV budget;
- and the container's arguments start `spindle serve` (on the test model).

Each validator is also shown a broken copy, so that a pass means something.
"""

import copy
import json
import re
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
jsonschema = pytest.importorskip("jsonschema")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = Path(__file__).resolve().parent / "schemas"
KUBERNETES_VERSIONS = ["1.30.0", "1.36.0"]


def documents():
    docs = []
    for path in sorted((REPO / "deploy").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def by_kind(kind):
    found = [d for d in documents() if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind} in deploy/, found {len(found)}"
    return found[0]


def strict(schema):
    """The schema with additionalProperties false wherever it names the
    properties and does not keep unknown fields (a structural schema's
    pruning, turned into an error as strict field validation does)."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema)
    return schema


def crd_validator(name):
    crd = json.loads((SCHEMAS / name).read_text())
    return crd, jsonschema.Draft7Validator(strict(crd["openAPIV3Schema"]))


def check_custom(doc, name):
    crd, validator = crd_validator(name)
    assert doc["apiVersion"] == f'{crd["group"]}/{crd["version"]}'
    assert doc["kind"] == crd["kind"]
    errors = sorted(validator.iter_errors(doc), key=str)
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_core_kinds_validate(version):
    core = [d for d in documents() if "." not in d["apiVersion"].split("/")[0]
            or d["apiVersion"].startswith("apps/")]
    assert [d["kind"] for d in core] == ["Deployment"]
    for doc in core:
        kubernetes_validate.validate(doc, version, strict=True)
    broken = copy.deepcopy(core[0])
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["paht"] = "/x"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, version, strict=True)


def test_inference_pool_validates():
    pool = by_kind("InferencePool")
    check_custom(pool, "inferencepool-v1.json")
    broken = copy.deepcopy(pool)
    broken["spec"]["targetPortNumber"] = broken["spec"].pop("targetPorts")[0]["number"]
    with pytest.raises(AssertionError):
        check_custom(broken, "inferencepool-v1.json")


def test_http_route_validates():
    route = by_kind("HTTPRoute")
    check_custom(route, "httproute-v1.json")
    broken = copy.deepcopy(route)
    broken["spec"]["rules"][0]["backendRefs"][0]["weight"] = "heavy"
    with pytest.raises(AssertionError):
        check_custom(broken, "httproute-v1.json")


def container_args(dep):
    c = dep["spec"]["template"]["spec"]["containers"][0]
    args = c["args"]
    return c, {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("-")}


def quantity_bytes(q):
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
             "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    m = re.fullmatch(r"(\d+)([KMGT]i?)?", str(q))
    assert m, q
    return int(m.group(1)) * units.get(m.group(2), 1)


def test_manifests_fit_together():
    dep, pool, route = by_kind("Deployment"), by_kind("InferencePool"), by_kind("HTTPRoute")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    # The pool selects the pods (and the Deployment its own pods).
    assert pool["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # llm-d's labels: the pods its indexer and scheduler discover.
    assert labels["llm-d.ai/inference-serving"] == "true"
    assert labels["llm-d.ai/role"] in ("decode", "both")
    assert labels["llm-d.ai/model"]
    c, args = container_args(dep)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert [p["number"] for p in pool["spec"]["targetPorts"]] == [int(args["--port"])]
    assert ports["http"] == int(args["--port"]) and args["--host"] == "0.0.0.0"
    # The route sends to the pool.
    ref = route["spec"]["rules"][0]["backendRefs"][0]
    assert (ref["group"], ref["kind"], ref["name"]) == (
        "inference.networking.k8s.io", "InferencePool", pool["metadata"]["name"])
    # Probes on /health (503 while loading and draining).
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": "http"}, probe
    # SIGTERM drains for --shutdown-timeout before the kubelet kills.
    assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > \
        int(args["--shutdown-timeout"])
    # KV events: bound on every address, on the declared port, topic kv@POD@MODEL.
    m = re.fullmatch(r"tcp://\*:(\d+)", args["--kv-events"])
    assert m and ports["kv-events"] == int(m.group(1))
    assert re.fullmatch(r"kv@\$\(POD_IP\)@[^@]+", args["--kv-events-topic"])
    assert any(e["name"] == "POD_IP" for e in c["env"])
    # Resources: a core per thread, memory beyond the KV budget, Guaranteed.
    res = c["resources"]
    assert res["requests"] == res["limits"]
    assert int(res["requests"]["cpu"]) == int(args["--threads"])
    assert quantity_bytes(res["requests"]["memory"]) >= \
        quantity_bytes(args["--kv-budget"]) + (1 << 30)



def test_deployment_args_start_spindle(tmp_path):
    """The container's arguments as `spindle serve` parses them: every option
    exists and takes its value, and the server gets ready. Run on the test
    model on loopback: the model path, --host, --port, --threads, the
    events' address and topic and the cache folder replaced, the rest (the
    KV type and budget, --parallel, the disk budget, the shutdown timeout)
    as written."""
    import sys
    sys.path.insert(0, str(REPO / "tests" / "server"))
    from server_common import Server, model_dir
    model = model_dir()
    c, _ = container_args(by_kind("Deployment"))
    args = list(c["args"])
    assert args[0] == "serve"
    local = {"-m": str(model), "--host": "127.0.0.1", "--port": "0", "--threads": "1",
             "--kv-events": "tcp://127.0.0.1:*", "--kv-events-topic": "kv@127.0.0.1@test",
             "--prompt-cache-dir": str(tmp_path)}
    for i, a in enumerate(args[:-1]):
        if a in local:
            args[i + 1] = local[a]
    srv = Server(model, *args[1:])
    try:
        assert "KV events on tcp://127.0.0.1:*" in srv.stderr()
    finally:
        srv.stop_cleanly()

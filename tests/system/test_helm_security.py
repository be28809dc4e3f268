"""The Helm chart's security, rendered offline: secrets, TLS, tokens and network policies.

The store URL and tokens reach the servers only through secrets, the default install is
authenticated, and network policies keep the picker, Redis and the control plane to their callers.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import yaml

from tests.support.helm import (
    CHART,
    containers,
    objects_of,
    of_kind,
    pod_specs,
    recipe_values,
    render,
)


def test_the_store_url_reaches_the_servers_only_through_a_secret() -> None:
    values = recipe_values("gateway")
    secret = next(
        s for s in of_kind("gateway", "Secret") if s["metadata"]["name"].endswith("store")
    )
    assert secret["stringData"]["url"] == values["redis"]["url"]
    for name, container in containers("gateway"):
        for env in container.get("env", []):
            assert env["name"] != "CACHEROUTE_REDIS_URL" or "valueFrom" in env, name
    auth = next(s for s in of_kind("gateway", "Secret") if s["metadata"]["name"].endswith("auth"))
    entries = yaml.safe_load(auth["stringData"]["auth.yaml"])
    assert values["auth"]["agentToken"] not in auth["stringData"]["auth.yaml"]
    assert entries[0]["role"] == "agent" and re.fullmatch(r"[0-9a-f]{64}", entries[0]["sha256"])


def test_tls_from_values_becomes_a_tls_secret_the_control_plane_and_agents_mount() -> None:
    (secret,) = [
        s for s in of_kind("tls-from-values", "Secret") if s["type"] == "kubernetes.io/tls"
    ]
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    volumes = [
        v["secret"]["secretName"]
        for _, spec in pod_specs("tls-from-values")
        for v in spec.get("volumes", [])
        if "secret" in v
    ]
    assert secret["metadata"]["name"] in volumes


def test_the_default_install_is_authenticated_with_tokens_it_generates() -> None:
    auth = next(s for s in of_kind("default", "Secret") if s["metadata"]["name"].endswith("auth"))
    data = auth["stringData"]
    entries = {e["name"]: e for e in yaml.safe_load(data["auth.yaml"])}
    tokens = (("agents", "agent-token"), ("gateway", "gateway-token"), ("admin", "admin-token"))
    for name, key in tokens:
        assert re.fullmatch(r"[A-Za-z0-9]{43}", data[key]), key
        assert entries[name]["sha256"] == hashlib.sha256(data[key].encode()).hexdigest()
        assert data[key] not in data["auth.yaml"]
    assert entries["admin"]["role"] == "write" and entries["gateway"]["role"] == "read"
    for suffix in ("-controlplane/controlplane", "-router/router"):
        (args,) = [c["args"] for name, c in containers("default") if name.endswith(suffix)]
        assert "--auth-file" in args and "--allow-unauthenticated" not in args, suffix
    open_install = {"auth": {"enabled": False}, "allowUnauthenticated": True}
    for name, container in containers_of(open_install):
        if name.endswith(("-controlplane/controlplane", "-router/router")):
            assert "--allow-unauthenticated" in container["args"], name


def containers_of(values: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path, text in render(values).items():
        if not path.endswith(".yaml"):
            continue
        for obj in yaml.safe_load_all(text):
            if obj and obj["kind"] in ("Deployment", "StatefulSet"):
                spec = obj["spec"]["template"]["spec"]
                found += [(f"{obj['metadata']['name']}/{c['name']}", c) for c in spec["containers"]]
    return found


def allowed_peers(policy: dict[str, Any], port: int) -> list[Any] | None:
    """The peers a policy lets reach ``port`` (None: anyone), [] when no rule opens it."""
    peers: list[Any] = []
    for rule in policy["spec"]["ingress"]:
        if any(p["port"] == port for p in rule.get("ports", [])):
            if "from" not in rule:
                return None
            peers += rule["from"]
    return peers


def test_network_policies_keep_the_picker_redis_and_control_plane_to_their_callers() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    policies = {
        p["metadata"]["name"].rsplit("-", 1)[-1]: p for p in of_kind("default", "NetworkPolicy")
    }
    assert set(policies) == {"controlplane", "router", "redis"}
    router = policies["router"]
    picker = allowed_peers(router, values["router"]["endpointPicker"]["port"])
    assert picker == values["networkPolicy"]["pickerFrom"]
    gateway_label = picker[0]["podSelector"]["matchExpressions"][0]["key"]
    assert gateway_label == "gateway.networking.k8s.io/gateway-name"
    assert allowed_peers(router, values["router"]["httpPort"]) is None  # clients
    redis_peers = allowed_peers(policies["redis"], values["redis"]["embedded"]["port"])
    assert redis_peers is not None
    component = "app.kubernetes.io/component"
    components = {p["podSelector"]["matchLabels"][component] for p in redis_peers}
    assert components == {"controlplane", "router"}
    cp_peers = allowed_peers(policies["controlplane"], values["controlplane"]["port"])
    assert cp_peers is not None and len(cp_peers) == 1
    assert cp_peers[0]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "cr"
    # Each policy selects exactly the Pods of its workload.
    workloads = {
        o["metadata"]["name"]: o["spec"]["template"]["metadata"]["labels"]
        for o in objects_of("default") if o["kind"] in ("Deployment", "StatefulSet")
    }  # fmt: skip
    for name, policy in policies.items():
        selector = policy["spec"]["podSelector"]["matchLabels"]
        matched = [w for w, labels in workloads.items() if selector.items() <= labels.items()]
        assert matched == [f"cr-cacheroute-{name}"], name
    assert not of_kind_rendered({"networkPolicy": {"enabled": False}}, "NetworkPolicy")


def of_kind_rendered(values: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [
        obj
        for path, text in render(values).items()
        if path.endswith(".yaml")
        for obj in yaml.safe_load_all(text)
        if obj and obj["kind"] == kind
    ]


def test_a_gateway_that_sends_the_token_makes_the_picker_require_it() -> None:
    strict = {"router": {"endpointPicker": {"requireToken": True}}}
    (router,) = [c for name, c in containers_of(strict) if name.endswith("-router/router")]
    assert "--extproc-allow-unauthenticated" not in router["args"]
    (router,) = [c for name, c in containers("default") if name.endswith("-router/router")]
    assert "--extproc-allow-unauthenticated" in router["args"]

"""deploy/helm/cacheroute rendered, linted and schema-checked offline, as CI can.

Rendered with the chart's defaults and with each recipe (deploy/helm/recipes/); every object is
validated against the Kubernetes OpenAPI schemas of the oldest and newest supported version
(kubernetes-validate, strict: unknown fields fail), the InferencePool against the vendored CRD
schema of the Gateway API Inference Extension; broken values must fail. What the objects do is in
test_helm_workloads.py, who may call whom in test_helm_security.py. What needs a cluster
(scheduling, probes answering, a gateway calling the picker) is not checked here.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from helm_python.chart import lint
from helm_python.errors import HelmError

from dataplane.core.policies.registry import DEFAULT_POLICY, ROUTER_POLICIES
from tests.support.helm import (
    CHART,
    ROOT,
    VALUE_SETS,
    containers,
    inferencepool_schema,
    objects_of,
    of_kind,
    recipe_names,
    recipe_values,
    render,
)

KUBERNETES_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())


# Kinds of CRDs whose schemas are not vendored: only their shape is checked (test below).
OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor"}


def test_there_are_the_three_recipes_of_the_docs() -> None:
    assert recipe_names() == ["alone", "gateway", "vllm"]
    docs = (ROOT / "docs" / "kubernetes.md").read_text()
    for name in recipe_names():
        assert f"deploy/helm/recipes/{name}.yaml" in docs


@pytest.mark.parametrize("recipe", VALUE_SETS)
def test_the_chart_lints_clean_with_each_value_set(recipe: str) -> None:
    report = lint(CHART, recipe_values(recipe), strict=True, namespace="inference")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not report["errors"] and not problems, report


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("recipe", VALUE_SETS)
def test_every_object_is_valid_kubernetes(recipe: str, version: str) -> None:
    for obj in objects_of(recipe):
        if obj["kind"] in OPERATOR_KINDS or obj["kind"] == "InferencePool":
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{recipe}: {obj['kind']} {obj['metadata']['name']} ({version}): {exc}")


def crd_pruned_fields(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Fields a structural CRD schema would silently drop (a typo the API server accepts)."""
    if isinstance(value, dict) and "properties" in schema:
        dropped = [f"{path}.{k}" for k in value if k not in schema["properties"]]
        for key, item in value.items():
            if key in schema["properties"]:
                dropped += crd_pruned_fields(item, schema["properties"][key], f"{path}.{key}")
        return dropped
    if isinstance(value, list) and "items" in schema:
        return [f for i, v in enumerate(value) for f in crd_pruned_fields(v, schema["items"])]
    return []


def check_inferencepool(pool: dict[str, Any]) -> None:
    """The vendored openAPIV3Schema plus its two CEL rules, which jsonschema cannot run."""
    schema = inferencepool_schema()
    assert (pool["apiVersion"], pool["kind"]) == (f"{schema['group']}/v1", schema["kind"])
    jsonschema.validate(pool, schema["openAPIV3Schema"])
    metadata_free = {k: v for k, v in pool.items() if k != "metadata"}
    assert not crd_pruned_fields(metadata_free, schema["openAPIV3Schema"])
    picker = pool["spec"]["endpointPickerRef"]
    assert picker.get("kind", "Service") != "Service" or "port" in picker  # CEL rule 1
    numbers = [p["number"] for p in pool["spec"]["targetPorts"]]
    assert len(numbers) == len(set(numbers)), "port number must be unique"  # CEL rule 2


def test_the_inferencepool_matches_its_crd_and_names_the_routers_picker_port() -> None:
    (pool,) = of_kind("gateway", "InferencePool")
    check_inferencepool(pool)
    picker = pool["spec"]["endpointPickerRef"]
    services = {s["metadata"]["name"]: s for s in of_kind("gateway", "Service")}
    router = services[picker["name"]]
    port = next(p for p in router["spec"]["ports"] if p["port"] == picker["port"]["number"])
    assert port["name"] == "grpc-ext-proc"
    (router_pod,) = [c for name, c in containers("gateway") if name.endswith("-router/router")]
    args = router_pod["args"]
    assert args[args.index("--extproc-listen") + 1] == f"0.0.0.0:{picker['port']['number']}"
    # The pool selects exactly the engine Pods, on the port their agents report.
    (engine,) = of_kind("gateway", "Deployment")[1:2] or [None]
    engines = [d for d in of_kind("gateway", "Deployment") if "-engine-" in d["metadata"]["name"]]
    assert engine is not None and len(engines) == 1
    labels = engines[0]["spec"]["template"]["metadata"]["labels"]
    assert pool["spec"]["selector"]["matchLabels"].items() <= labels.items()
    agent = next(
        c for c in engines[0]["spec"]["template"]["spec"]["containers"] if c["name"] == "agent"
    )
    engine_url = agent["args"][agent["args"].index("--engine-url") + 1]
    assert engine_url.endswith(f":{pool['spec']['targetPorts'][0]['number']}")


def test_a_typo_in_the_inferencepool_fails_the_crd_check() -> None:
    (pool,) = of_kind("gateway", "InferencePool")
    broken = json.loads(json.dumps(pool))
    broken["spec"]["endpointPickerRef"]["failureMode"] = "FailSometimes"
    with pytest.raises(jsonschema.ValidationError, match="FailSometimes"):
        check_inferencepool(broken)
    pruned = json.loads(json.dumps(pool))
    pruned["spec"]["endpointPickerRef"]["portNumber"] = 9002
    with pytest.raises(AssertionError):
        check_inferencepool(pruned)


@pytest.mark.parametrize("recipe", VALUE_SETS)
def test_operator_objects_have_the_shape_prometheus_operator_reads(recipe: str) -> None:
    services = {s["metadata"]["name"]: s for s in of_kind(recipe, "Service")}
    for monitor in of_kind(recipe, "ServiceMonitor"):
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        selector = monitor["spec"]["selector"]["matchLabels"]
        matched = [
            s for s in services.values() if selector.items() <= s["metadata"]["labels"].items()
        ]
        assert len(matched) == 1, monitor["metadata"]["name"]
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {
            p["name"] for p in matched[0]["spec"]["ports"]
        }


def test_the_dashboard_configmap_is_the_compose_dashboard_byte_for_byte() -> None:
    (configmap,) = of_kind("alone", "ConfigMap")
    source = ROOT / "deploy" / "grafana" / "dashboards" / "cacheroute.json"
    assert configmap["data"]["cacheroute.json"] == source.read_text()
    link = CHART / "dashboards" / "cacheroute.json"
    assert link.is_symlink() and link.resolve() == source.resolve(), "one file, not a copy"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"


BROKEN = [
    ({"router": {"port": "grpc"}}, "router.port"),
    ({"redis": {"embedded": {"enabled": False}, "url": "http://redis:6379"}}, "redis.url"),
    ({"engines": [{"name": "Bad_Name", "command": ["x"]}]}, "engines.0.name"),
    ({"router": {"policy": "fastest"}}, "router.policy"),
    ({"routers": {"replicas": 3}}, "routers"),
]


@pytest.mark.parametrize(("values", "named"), BROKEN)
def test_a_broken_value_fails_the_schema_naming_the_key(values: dict[str, Any], named: str) -> None:
    with pytest.raises(HelmError) as raised:
        render(values)
    message = str(raised.value)
    assert "values don't meet the specifications of the schema" in message, message
    assert named.rsplit(".", maxsplit=1)[-1] in message, message


def test_the_schema_offers_exactly_the_policies_a_router_runs() -> None:
    """The chart's policy enum is the registry's, so a new default cannot fail the schema."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    offered = schema["properties"]["router"]["properties"]["policy"]["enum"]
    assert sorted(offered) == sorted(ROUTER_POLICIES)
    assert DEFAULT_POLICY in offered


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"redis": {"url": "redis://r:6379/0"}}, "choose exactly one store"),
        ({"redis": {"embedded": {"enabled": False}}}, "choose exactly one store"),
        ({"auth": {"enabled": False}}, "set allowUnauthenticated=true to say so"),
        ({"allowUnauthenticated": True}, "allowUnauthenticated: true needs auth.enabled=false"),
        ({"inferencePool": {"enabled": True}}, "inferencePool.selector"),
        ({"tls": {"enabled": True, "existingSecret": "cp-tls"}}, "tls.serverName"),
        ({"tls": {"enabled": True, "serverName": "cp.example"}}, "tls.existingSecret"),
        ({"tls": {"enabled": True, "serverName": "cp.example", "cert": "x"}}, "BEGIN"),
        ({"engines": [{"name": "e", "image": "x", "preStopSleepSeconds": 5}]}, "preStopSleep"),
    ],
)
def test_an_inconsistent_value_set_fails_rendering_with_the_fix(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(HelmError, match=re.escape(message)):
        render(values)


def test_a_broken_template_fails_lint_and_a_wrong_field_fails_the_kubernetes_schema(
    tmp_path: Path,
) -> None:
    broken = tmp_path / "cacheroute"
    shutil.copytree(CHART, broken)  # the dashboard symlink becomes a copy: fine for this check
    template = broken / "templates" / "router.yaml"
    text = template.read_text()
    command = "          command: [python, -m, dataplane]\n"
    assert command in text
    template.write_text(text.replace(command, command + "         args: [--misindented]\n"))
    report = lint(broken, {}, strict=True)
    assert any("router.yaml" in m["path"] and m["severity"] == 3 for m in report["messages"])
    (deployment,) = [
        d for d in of_kind("default", "Deployment") if d["metadata"]["name"].endswith("router")
    ]
    wrong = json.loads(json.dumps(deployment))
    wrong["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["grpc"]["portt"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong, KUBERNETES_VERSIONS[-1], strict=True)

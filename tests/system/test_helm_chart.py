"""deploy/helm/cacheroute rendered, linted and schema-checked offline, as CI can.

Rendered with the chart's defaults and with each recipe (deploy/helm/recipes/); every object is
validated against the Kubernetes OpenAPI schemas of the oldest and newest supported version
(kubernetes-validate, strict: unknown fields fail), the InferencePool against the vendored CRD
schema of the Gateway API Inference Extension; broken values must fail. What needs a cluster
(scheduling, probes answering, a gateway calling the picker) is not checked here.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from helm_python.chart import lint
from helm_python.errors import HelmError

from servekit.grpc_server import LIVENESS, READINESS
from tests.support.helm import (
    CHART,
    EXTRA_VALUE_SETS,
    ROOT,
    containers,
    inferencepool_schema,
    objects_of,
    of_kind,
    pod_specs,
    project_image,
    recipe_names,
    recipe_values,
    render,
)

VALUE_SETS = ["default", *recipe_names(), *EXTRA_VALUE_SETS]
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


@pytest.mark.parametrize("recipe", VALUE_SETS)
def test_probes_name_ports_the_container_listens_on_and_the_real_health_services(
    recipe: str,
) -> None:
    for name, container in containers(recipe):
        ports = {p["containerPort"] for p in container.get("ports", [])}
        names = {p["name"] for p in container.get("ports", [])}
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = container.get(kind)
            if probe is None or "exec" in probe:
                continue
            if "grpc" in probe:
                assert probe["grpc"]["port"] in ports, f"{name} {kind}"
                wanted = LIVENESS if kind == "livenessProbe" else READINESS
                assert probe["grpc"]["service"] == wanted, f"{name} {kind}"
            else:
                assert probe["httpGet"]["port"] in names, f"{name} {kind}"


@pytest.mark.parametrize("recipe", VALUE_SETS)
def test_images_are_the_projects_dockerfile_target_or_an_engine_image_the_values_name(
    recipe: str,
) -> None:
    stages = re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", (ROOT / "Dockerfile").read_text(), re.M)
    assert stages[-1] == project_image().split(":")[0], "the chart's image is the final target"
    engine_images = {e.get("image") for e in recipe_values(recipe).get("engines", [])} - {None}
    for name, container in containers(recipe):
        image = container["image"]
        if image != project_image():
            assert image in engine_images and name.endswith("/engine"), (name, image)


@pytest.mark.parametrize("recipe", VALUE_SETS)
def test_agents_report_the_pod_ip_and_name_and_drain_within_the_grace_period(
    recipe: str,
) -> None:
    for workload, spec in pod_specs(recipe):
        by_name = {c["name"]: c for c in spec["containers"]}
        if "agent" not in by_name:
            continue
        agent, engine = by_name["agent"], by_name["engine"]
        fields = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}) for e in agent["env"]}
        assert fields["POD_IP"]["fieldPath"] == "status.podIP", workload
        assert fields["POD_NAME"]["fieldPath"] == "metadata.name", workload
        args = agent["args"]
        assert "--node-id" not in args and "--address" not in args  # from the Pod, not values
        port = int(args[args.index("--engine-url") + 1].rsplit(":", 1)[1])
        assert port in {p["containerPort"] for p in engine["ports"]}
        drain = float(args[args.index("--drain-timeout") + 1])
        pre_stop = int(engine["lifecycle"]["preStop"]["exec"]["command"][1])
        assert 0 < drain <= pre_stop < spec["terminationGracePeriodSeconds"], workload


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


def test_two_control_planes_share_the_lease_and_keep_one_up_in_a_disruption() -> None:
    (deployment,) = [
        d
        for d in of_kind("default", "Deployment")
        if d["metadata"]["name"].endswith("controlplane")
    ]
    assert deployment["spec"]["replicas"] == 2
    pdbs = {p["metadata"]["name"]: p for p in of_kind("default", "PodDisruptionBudget")}
    assert pdbs[deployment["metadata"]["name"]]["spec"]["minAvailable"] == 1
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["CACHEROUTE_INSTANCE_ID"]["value"] == "$(POD_NAME)"  # distinct lease holders


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


def test_with_tls_the_probes_ask_the_health_service_through_tls_in_valid_python() -> None:
    (cp,) = [c for name, c in containers("mtls") if name.endswith("-controlplane/controlplane")]
    args = cp["args"]
    assert args[args.index("--tls-client-ca") + 1] == "/etc/cacheroute/tls/ca.crt"
    for kind, service in (("readinessProbe", READINESS), ("livenessProbe", LIVENESS)):
        python, flag, code, asked = cp[kind]["exec"]["command"]
        assert (python, flag, asked) == ("python", "-c", service)
        compile(code, kind, "exec")
        assert "ssl_target_name_override', 'cr-cacheroute-controlplane'" in code
        assert "tls.key" in code  # mTLS: the probe presents a certificate too


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


@pytest.mark.parametrize("recipe", VALUE_SETS)
def test_every_container_has_requests_and_limits(recipe: str) -> None:
    for name, container in containers(recipe):
        resources = container.get("resources", {})
        assert resources.get("requests") and resources.get("limits"), name


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

"""The Helm chart's workloads, rendered offline: probes, images, agents, replicas and resources.

What each pod runs is held against the project: probes ask the real health services on ports the
container listens on, images are the Dockerfile's target, agents report their pod and drain in time.
"""

from __future__ import annotations

import re

import pytest

from servekit.grpc_server import LIVENESS, READINESS
from tests.support.helm import (
    ROOT,
    VALUE_SETS,
    containers,
    of_kind,
    pod_specs,
    project_image,
    recipe_values,
)


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


@pytest.mark.parametrize("recipe", VALUE_SETS)
def test_every_container_has_requests_and_limits(recipe: str) -> None:
    for name, container in containers(recipe):
        resources = container.get("resources", {})
        assert resources.get("requests") and resources.get("limits"), name

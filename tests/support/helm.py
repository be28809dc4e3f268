"""The Helm chart rendered offline for the chart tests (tests/system/test_helm_*.py).

``helm-python-sdk`` embeds Helm's own library (no helm binary, no cluster): ``render`` is
``helm template`` with the chart's values.schema.json checked first, ``lint`` is ``helm lint``.
The value sets are the chart's defaults and each recipe under deploy/helm/recipes/.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from helm_python.chart import Chart

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "cacheroute"
RECIPES = ROOT / "deploy" / "helm" / "recipes"
RELEASE, NAMESPACE = "cr", "inference"
INFERENCEPOOL_SCHEMA = (
    ROOT / "tests" / "data" / "gateway-api-inference-extension" / "inferencepool-v1.schema.yaml"
)


# Value sets beyond the recipes, for the branches no recipe takes.
EXTRA_VALUE_SETS: dict[str, dict[str, Any]] = {
    "mtls": {
        "tls": {
            "enabled": True,
            "existingSecret": "cp-tls",
            "clientCA": True,
            "serverName": "cr-cacheroute-controlplane",
        },
        "auth": {"enabled": True, "existingSecret": "cr-tokens"},
        "engines": [
            {
                "name": "sim",
                "command": ["python", "-m", "simengine"],
                "args": ["--listen", "0.0.0.0:8000"],
            }
        ],
        "router": {"hpa": {"enabled": True}},
        "redis": {"embedded": {"persistence": {"enabled": True, "storageClass": "fast"}}},
        "controlplane": {"extraEnv": {"CACHEROUTE_PLAN_INTERVAL": "300"}},
    },
    "tls-from-values": {
        "tls": {
            "enabled": True,
            "serverName": "cr-cacheroute-controlplane",
            "cert": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
            "key": "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n",
            "ca": "-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n",
        },
    },
}


def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPES.glob("*.yaml"))


def recipe_values(name: str) -> dict[str, Any]:
    """A recipe's values (``default``: the chart's own, i.e. no override)."""
    if name == "default":
        return {}
    if name in EXTRA_VALUE_SETS:
        return EXTRA_VALUE_SETS[name]
    loaded = yaml.safe_load((RECIPES / f"{name}.yaml").read_text())
    assert isinstance(loaded, dict), name
    return loaded


def render(values: dict[str, Any] | None = None) -> dict[str, str]:
    """template path -> rendered text; raises the SDK's HelmValuesError/HelmRenderError."""
    return dict(Chart.load(CHART).render(values or {}, name=RELEASE, namespace=NAMESPACE))


@functools.cache
def objects_of(recipe: str) -> tuple[dict[str, Any], ...]:
    """Every Kubernetes object the chart renders with a recipe's values (NOTES.txt left out)."""
    rendered = render(recipe_values(recipe))
    found: list[dict[str, Any]] = []
    for path, text in sorted(rendered.items()):
        if not path.endswith((".yaml", ".yml")):
            continue
        found.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return tuple(found)


def of_kind(recipe: str, kind: str) -> list[dict[str, Any]]:
    return [o for o in objects_of(recipe) if o["kind"] == kind]


def pod_specs(recipe: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(workload name, Pod spec) of every Deployment and StatefulSet."""
    for obj in objects_of(recipe):
        if obj["kind"] in ("Deployment", "StatefulSet"):
            yield obj["metadata"]["name"], obj["spec"]["template"]["spec"]


def containers(recipe: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """("workload/container", container) of every workload."""
    for workload, spec in pod_specs(recipe):
        for container in spec["containers"]:
            yield f"{workload}/{container['name']}", container


def project_image() -> str:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    return f"{values['image']['repository']}:{values['image']['tag'] or chart['appVersion']}"


def inferencepool_schema() -> dict[str, Any]:
    loaded = yaml.safe_load(INFERENCEPOOL_SCHEMA.read_text())
    assert isinstance(loaded, dict)
    return loaded


# Every value set the chart is rendered with: its defaults, each recipe, the extra sets above.
VALUE_SETS = ["default", *recipe_names(), *EXTRA_VALUE_SETS]

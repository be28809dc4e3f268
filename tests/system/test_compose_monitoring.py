"""The compose file's monitoring: Prometheus scrapes every metrics endpoint, Grafana shows them.

Prometheus's targets are cross-checked with the services' metrics ports, Grafana's provisioning
with its mounts, and the dashboard's queries name metrics that the code defines.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import yaml

from tests.support.compose import (
    DASHBOARD,
    GRAFANA,
    PROMETHEUS,
    ROOT,
    argv,
    bind_mounts,
    environment,
    project_services,
    pyproject,
    services,
)
from tests.support.compose_parse import (
    entry_points,
    metrics_ports,
    scrape_targets,
    serving_ports,
    split_address,
)


def test_prometheus_scrapes_every_metrics_endpoint_and_only_those() -> None:
    endpoints = {(name, port) for name in project_services() for port in metrics_ports(name)}
    targets = [(host, port) for _, host, port in scrape_targets()]
    assert len(targets) == len(set(targets)), "a target is scraped twice"
    for host, port in targets:
        assert host in services(), f"scrape target {host}:{port} names no compose service"
        assert (host, port) in endpoints, f"{host}:{port} is not a metrics endpoint of {host}"
    assert endpoints - set(targets) == set(), "metrics endpoints Prometheus does not scrape"
    assert {name for name, _ in endpoints} == set(project_services()) - {
        name for name, point in entry_points().items() if point.label == "cachectl load"
    }, "every server serves metrics"


def test_prometheus_reads_the_config_file_mounted_into_its_service() -> None:
    mounted = bind_mounts("prometheus").get(PROMETHEUS.resolve())
    assert mounted is not None, f"{PROMETHEUS.relative_to(ROOT)} is not mounted into prometheus"
    command = argv("prometheus", services()["prometheus"])
    assert f"--config.file={mounted}" in command


# -- Grafana --------------------------------------------------------------------------------------


def provisioned(kind: str) -> list[dict[str, Any]]:
    folder = GRAFANA / "provisioning" / kind
    files = sorted(folder.glob("*.yml")) + sorted(folder.glob("*.yaml"))
    assert files, f"nothing in {folder}"
    return [yaml.safe_load(f.read_text()) for f in files]


def test_grafana_provisions_the_prometheus_datasource() -> None:
    mounts = bind_mounts("grafana")
    assert mounts.get((GRAFANA / "provisioning").resolve()) == "/etc/grafana/provisioning"
    sources = [s for doc in provisioned("datasources") for s in doc["datasources"]]
    assert [s["type"] for s in sources] == ["prometheus"]
    address = split_address(sources[0]["url"])
    assert address is not None and address[0] == "prometheus"
    assert address[1] in serving_ports("prometheus")
    scrape = yaml.safe_load(PROMETHEUS.read_text())["global"]["scrape_interval"]
    assert sources[0]["jsonData"]["timeInterval"] == scrape, "$__rate_interval needs it"


def test_grafana_provisions_the_dashboard_from_its_mounted_folder() -> None:
    providers = [p for doc in provisioned("dashboards") for p in doc["providers"]]
    paths = {p["options"]["path"] for p in providers}
    assert bind_mounts("grafana").get(DASHBOARD.parent.resolve()) in paths
    home = environment(services()["grafana"]).get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    folder = bind_mounts("grafana")[DASHBOARD.parent.resolve()]
    assert home in (None, f"{folder}/{DASHBOARD.name}"), "the home dashboard is not mounted there"


def dashboard_panels() -> list[dict[str, Any]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    nested = [p for row in panels if row.get("type") == "row" for p in row.get("panels", [])]
    return [p for p in panels + nested if p.get("type") != "row"]


def test_dashboard_panels_use_the_provisioned_datasource() -> None:
    uids = {s["uid"] for doc in provisioned("datasources") for s in doc["datasources"]}
    for panel in dashboard_panels():
        for item in [panel, *panel["targets"]]:
            assert item["datasource"]["uid"] in uids, panel["title"]


_METRIC = re.compile(r"(?<![A-Za-z0-9_:])((?:cacheroute_|vllm:)[A-Za-z0-9_:]*)")
_DEFINED = re.compile(r"[\"']((?:cacheroute_|vllm:)[A-Za-z0-9_:]+)[\"']")
_EXPOSED_SUFFIXES = ("", "_total", "_created", "_bucket", "_sum", "_count", "_info")


@cache
def defined_metrics() -> frozenset[str]:
    """Every sample name the project's code can expose (metric names are string literals)."""
    names: set[str] = set()
    for package in pyproject()["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]:
        for source in (ROOT / package).rglob("*.py"):
            for base in _DEFINED.findall(source.read_text()):
                names.update(base + suffix for suffix in _EXPOSED_SUFFIXES)
    return frozenset(names)


def test_dashboard_queries_name_metrics_the_project_defines() -> None:
    used: set[str] = set()
    for panel in dashboard_panels():
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            names = set(_METRIC.findall(target["expr"]))
            assert names, f"{panel['title']!r}: {target['expr']!r} names no project metric"
            unknown = names - defined_metrics()
            assert not unknown, f"{panel['title']!r} queries metrics no code defines: {unknown}"
            used |= names
    # What the dashboard is for: decisions by reason, served hit rate, TTFT, node load, tables.
    for wanted in (
        "cacheroute_router_decisions_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
        "vllm:time_to_first_token_seconds_bucket",
        "cacheroute_controlplane_node_load",
        "cacheroute_router_table_generation",
        "cacheroute_router_table_info",
    ):
        assert wanted in used, f"the dashboard does not show {wanted}"

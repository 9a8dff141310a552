"""docker/helm/chunkyard-query: the query service's chart, with Prometheus scraping chosen by its values.

No cluster or helm binary here: the templates use a small subset of Go templates (`{{ .Values.x }}`,
`| quote`, `if`/`if not`/`else`/`end`, `{{-`), which `_render` evaluates, so the manifests are checked
as Kubernetes would get them: for the default values and for each metrics choice, every document parses,
every value a template reads is in values.yaml, the selectors match, and the paths, port and
environment variable they name are the service's own.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from chunkyard.orchestration.cli import build_parser
from chunkyard.retrieval.api.metrics import OPEN_ENV
from chunkyard.retrieval.api.service import create_app

CHART = Path(__file__).resolve().parent.parent / "docker" / "helm" / "chunkyard-query"
_TAG = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)
_VALUE = re.compile(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def _lookup(expr: str, values: dict[str, Any]) -> Any:
    if expr == ".Release.Name":
        return "chunkyard-query"
    match = re.fullmatch(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)", expr)
    assert match, f"unsupported template expression {expr!r}"
    node: Any = values
    for part in match[1].strip(".").split("."):
        assert isinstance(node, dict) and part in node, f"{expr}: not in values.yaml"
        node = node[part]
    return node


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _render(template: str, values: dict[str, Any]) -> str:
    """The template's output for `values` (the subset of Go templates the chart uses)."""
    out: list[str] = []
    stack: list[list[bool]] = []  # per open `if`: [parent emitting, condition, in else]

    def emitting() -> bool:
        return all(parent and (cond != in_else) for parent, cond, in_else in stack)

    pos = 0
    for match in _TAG.finditer(template):
        literal = template[pos : match.start()]
        pos = match.end()
        if match[1]:
            literal = literal.rstrip()
        if emitting():
            out.append(literal)
        action = match[2]
        assert not match[3], "`-}}` is not used by the chart"
        if action.startswith("if "):
            condition = action[3:].strip()
            negate = condition.startswith("not ")
            truth = bool(_lookup(condition[4:].strip() if negate else condition, values))
            stack.append([emitting(), truth != negate, False])
        elif action == "else":
            stack[-1][2] = True
        elif action == "end":
            stack.pop()
        else:
            expr, _, pipe = (part.strip() for part in action.partition("|"))
            value = _lookup(expr, values)
            assert pipe in ("", "quote"), f"unsupported pipe {pipe!r}"
            if emitting():
                out.append(json.dumps(_text(value)) if pipe == "quote" else _text(value))
    assert not stack, "an `if` without its `end`"
    out.append(template[pos:] if emitting() else "")
    return "".join(out)


def _manifests(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    documents = {}
    for path in sorted((CHART / "templates").glob("*.yaml")):
        for document in yaml.safe_load_all(_render(path.read_text(encoding="utf-8"), values)):
            if document:
                assert document["kind"] not in documents, document["kind"]
                documents[document["kind"]] = document
    return documents


@pytest.fixture
def values() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))


def test_the_chart_reads_only_values_it_declares(values: dict[str, Any]) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert chart["apiVersion"] == "v2" and chart["name"] == CHART.name
    assert re.fullmatch(r"\d+\.\d+\.\d+", chart["version"])
    for path in (CHART / "templates").glob("*.yaml"):
        for match in _VALUE.finditer(path.read_text(encoding="utf-8")):
            _lookup(match[0], values)  # fails naming the path when values.yaml lacks it


def test_default_values_scrape_by_pod_annotations(values: dict[str, Any]) -> None:
    manifests = _manifests(values)
    assert set(manifests) == {"Deployment", "Service"}  # no ServiceMonitor unless asked for
    pod = manifests["Deployment"]["spec"]["template"]
    annotations = pod["metadata"]["annotations"]
    port = values["service"]["port"]
    assert annotations == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(port),
        "prometheus.io/path": "/metrics",
    }
    container = pod["spec"]["containers"][0]
    assert {"name": OPEN_ENV, "value": "1"} in container["env"]  # annotation scrapers send no key
    assert container["ports"] == [{"name": "http", "containerPort": port}]
    # the command is `chunkyard serve` as the CLI parses it, on the container's port
    parsed = build_parser().parse_args(container["command"][1:])
    assert container["command"][:2] == ["chunkyard", "serve"] and parsed.port == port
    # the paths the chart names are the service's own routes
    routes = {route.path for route in create_app(api_key="chart-test-key").routes}
    assert {
        "/metrics",
        container["readinessProbe"]["httpGet"]["path"],
        container["livenessProbe"]["httpGet"]["path"],
    } <= routes
    service = manifests["Service"]
    assert service["spec"]["selector"] == manifests["Deployment"]["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert container["envFrom"] == [{"secretRef": {"name": values["envSecret"]}}]


def test_a_service_monitor_with_a_key_instead_of_annotations(values: dict[str, Any]) -> None:
    chosen = copy.deepcopy(values)
    chosen["metrics"].update(open=False, annotations=False)
    chosen["metrics"]["serviceMonitor"]["enabled"] = True
    manifests = _manifests(chosen)
    assert set(manifests) == {"Deployment", "Service", "ServiceMonitor"}
    pod = manifests["Deployment"]["spec"]["template"]
    assert "annotations" not in pod["metadata"]
    assert {"name": OPEN_ENV, "value": "0"} in pod["spec"]["containers"][0]["env"]
    monitor = manifests["ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == chosen["metrics"]["serviceMonitor"]["release"]
    assert (
        monitor["spec"]["selector"]["matchLabels"].items()
        <= manifests["Service"]["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (
        endpoint["port"] == manifests["Service"]["spec"]["ports"][0]["name"]
        and endpoint["path"] == "/metrics"
    )
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": chosen["metrics"]["serviceMonitor"]["keySecret"],
    }
    # an open /metrics needs no key: the monitor sends none
    chosen["metrics"]["open"] = True
    assert "authorization" not in _manifests(chosen)["ServiceMonitor"]["spec"]["endpoints"][0]


def test_the_image_installs_the_extras_the_docs_name() -> None:
    """The Dockerfile's CHUNKYARD_EXTRAS default: the retrievers' and the MCP server's extras, each one
    pyproject.toml declares, installed with the package under the constraints file."""
    import tomllib

    text = (CHART.parent.parent / "Dockerfile").read_text(encoding="utf-8")
    default = re.search(r"^ARG CHUNKYARD_EXTRAS=(\S*)$", text, re.M)
    assert default, "no CHUNKYARD_EXTRAS build argument"
    extras = default[1].split(",")
    pyproject = tomllib.loads((CHART.parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
    assert (
        set(extras)
        == {"langchain", "llamaindex", "mcp"}
        <= set(pyproject["project"]["optional-dependencies"])
    )
    install = re.search(r"^RUN pip install -c requirements/constraints.txt (.*)$", text, re.M)
    assert install and install[1] == '".${CHUNKYARD_EXTRAS:+[$CHUNKYARD_EXTRAS]}"'
    assert text.index("ARG CHUNKYARD_EXTRAS") < install.start()

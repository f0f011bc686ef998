"""The Kubernetes manifests of deploy/kubernetes checked offline (OPS-1, OPS-2): no cluster, no
kubectl. Each object is validated against a minimal JSON schema written here for exactly the fields
the manifests use (the Kubernetes API's own names and types, unknown fields refused, so a misspelt
key fails as the API server would refuse it); the generated PrometheusRule is current with
deploy/prometheus/msgx-rules.yml and passes promtool's check and the rules' unit tests. What needs a
cluster is a manual check in docs/deployment.md ("Kubernetes")."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from msgx_engine.cli import main as cli
from tests.prometheus_support import RULE_TESTS, RULES, tool

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "kubernetes"
GENERATOR = REPO / "scripts" / "prometheusrule.py"


def obj(required: tuple[str, ...] = (), **properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


def arr(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


STR, INT, BOOL = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}
LABELS = {"type": "object", "additionalProperties": STR}
QUANTITY = {"type": "string", "pattern": r"^\d+(\.\d+)?(m|Ki|Mi|Gi)?$"}
DURATION = {"type": "string", "pattern": r"^(\d+(ms|s|m|h))+$"}
PORT = {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 65535},
                  {"type": "string", "pattern": r"^[a-z0-9-]{1,15}$"}]}
METADATA = obj(("name",), name={"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}, labels=LABELS)
PROBE = obj(("httpGet",), httpGet=obj(("path", "port"), path=STR, port=PORT), periodSeconds=INT,
            timeoutSeconds=INT, failureThreshold=INT, initialDelaySeconds=INT)
CONTAINER = obj(
    ("name", "image"), name=STR, image=STR, imagePullPolicy={"enum": ["Always", "IfNotPresent", "Never"]},
    command=arr(STR), args=arr(STR),
    envFrom=arr(obj(secretRef=obj(("name",), name=STR), configMapRef=obj(("name",), name=STR))),
    ports=arr(obj(("containerPort",), name=STR, containerPort=INT, protocol={"enum": ["TCP", "UDP"]})),
    livenessProbe=PROBE, readinessProbe=PROBE, startupProbe=PROBE,
    resources=obj(requests=obj(cpu=QUANTITY, memory=QUANTITY), limits=obj(cpu=QUANTITY, memory=QUANTITY)),
    securityContext=obj(allowPrivilegeEscalation=BOOL, readOnlyRootFilesystem=BOOL,
                        capabilities=obj(drop=arr(STR), add=arr(STR))))


def kind(api: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return obj(("apiVersion", "kind", "metadata", "spec"), apiVersion={"const": api}, kind={"const": name},
               metadata=METADATA, spec=spec)


SCHEMAS = {
    "Deployment": kind("apps/v1", "Deployment", obj(
        ("selector", "template"), replicas=INT, selector=obj(("matchLabels",), matchLabels=LABELS),
        template=obj(("metadata", "spec"), metadata=obj(labels=LABELS), spec=obj(
            ("containers",), containers=arr(CONTAINER),
            securityContext=obj(runAsNonRoot=BOOL, runAsUser=INT, runAsGroup=INT,
                                seccompProfile=obj(("type",), type={"enum": ["RuntimeDefault", "Localhost"]})))))),
    "Service": kind("v1", "Service", obj(
        ("selector", "ports"), type={"enum": ["ClusterIP", "NodePort", "LoadBalancer"]}, clusterIP=STR,
        publishNotReadyAddresses=BOOL, selector=LABELS,
        ports=arr(obj(("port",), name=STR, port=INT, targetPort=PORT, protocol={"enum": ["TCP", "UDP"]})))),
    "ServiceMonitor": kind("monitoring.coreos.com/v1", "ServiceMonitor", obj(
        ("selector", "endpoints"), jobLabel=STR, selector=obj(("matchLabels",), matchLabels=LABELS),
        endpoints=arr(obj(("port",), port=STR, path=STR, interval=DURATION, scrapeTimeout=DURATION)))),
    "PrometheusRule": kind("monitoring.coreos.com/v1", "PrometheusRule", obj(("groups",), groups=arr(obj(
        ("name", "rules"), name=STR, interval=DURATION, rules=arr(obj(
            ("expr",), alert=STR, record=STR, expr=STR, labels=LABELS, annotations=LABELS,
            **{"for": DURATION})))))),
}


def documents() -> list[dict[str, Any]]:
    return [doc for path in sorted(K8S.glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text("utf-8")) if doc is not None]


def one(kind_name: str, name: str) -> dict[str, Any]:
    [found] = [d for d in documents() if d["kind"] == kind_name and d["metadata"]["name"] == name]
    return found


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_every_manifest_follows_its_schema_and_the_schemas_refuse_mistakes():
    """Each object of deploy/kubernetes is of a kind checked here and valid by its schema; a
    misspelt probe field, a wrong port type and a duration without a unit are refused."""
    docs = documents()
    assert sorted(d["kind"] for d in docs) == ["Deployment", "PrometheusRule", "Service", "Service", "ServiceMonitor"]
    for doc in docs:
        jsonschema.Draft7Validator.check_schema(SCHEMAS[doc["kind"]])
        errors = [f"{doc['kind']} {'.'.join(map(str, e.absolute_path))}: {e.message}"
                  for e in jsonschema.Draft7Validator(SCHEMAS[doc["kind"]]).iter_errors(doc)]
        assert errors == []
    deployment = one("Deployment", "msgx-api")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    for mistake in ({"readinessProbe": {**container["readinessProbe"], "httpGett": {}}},
                    {"ports": [{"containerPort": "8080"}]}):
        wrong = copy.deepcopy(deployment)
        wrong["spec"]["template"]["spec"]["containers"][0].update(mistake)
        assert not jsonschema.Draft7Validator(SCHEMAS["Deployment"]).is_valid(wrong), mistake
    monitor = copy.deepcopy(one("ServiceMonitor", "msgx"))
    monitor["spec"]["endpoints"][0]["interval"] = "15"
    assert not jsonschema.Draft7Validator(SCHEMAS["ServiceMonitor"]).is_valid(monitor)


def test_msgx_serve_runs_the_image_with_its_probes_and_settings():
    """OPS-1, OPS-2: the Deployment runs `msgx serve` from the image of the Dagster chart's code
    server, as the image's user, with the settings secret of the chart's code server; it listens publicly
    only behind TLS and with the token; liveness asks /healthz (never the databases) and readiness
    /readyz, both on the port the command serves on."""
    values = yaml.safe_load((REPO / "deploy" / "helm" / "values.yaml").read_text("utf-8"))
    (code_server,) = values["dagster-user-deployments"]["deployments"]
    pod = one("Deployment", "msgx-api")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == f"{code_server['image']['repository']}:{code_server['image']['tag']}"
    assert container["envFrom"] == [{"secretRef": {"name": "msgx-env"}}]
    assert {"name": "msgx-env"} in code_server["envSecrets"]
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text("utf-8")
    assert pod["securityContext"]["runAsUser"] == int(re.findall(r"^USER (\d+):", dockerfile, re.M)[-1])
    assert container["command"][0] == "msgx"
    serve = cli.parser().parse_args(container["command"][1:])
    assert serve.allow_public and serve.behind_tls_proxy
    [port] = container["ports"]
    assert port["containerPort"] == serve.port
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}


def test_services_reach_the_pods_and_prometheus_scrapes_every_pod_as_job_msgx():
    """The API Service and the metrics Service select the Deployment's pods by the port's name; the
    metrics Service also lists pods that are not ready (a pod whose database is down still reports
    msgx_database_up 0); the ServiceMonitor selects that Service only, scrapes /metrics on its
    port, and names the job `msgx`, the job the alert rules read (up{job="msgx"})."""
    deployment = one("Deployment", "msgx-api")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selects(deployment["spec"]["selector"]["matchLabels"], pod_labels)
    port_name = deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["name"]
    api, metrics = one("Service", "msgx-api"), one("Service", "msgx-metrics")
    for service in (api, metrics):
        assert selects(service["spec"]["selector"], pod_labels)
        assert [p["targetPort"] for p in service["spec"]["ports"]] == [port_name]
    assert metrics["spec"]["publishNotReadyAddresses"] is True and not api["spec"].get("publishNotReadyAddresses")
    monitor = one("ServiceMonitor", "msgx")["spec"]
    chosen = [s for s in (api, metrics) if selects(monitor["selector"]["matchLabels"], s["metadata"]["labels"])]
    assert chosen == [metrics]
    [endpoint] = monitor["endpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["port"] in [p["name"] for p in metrics["spec"]["ports"]]
    assert metrics["metadata"]["labels"][monitor["jobLabel"]] == "msgx"
    assert any('up{job="msgx"}' in r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"])


def test_the_generated_prometheusrule_is_current():
    """deploy/kubernetes/msgx-prometheusrule.yaml is what scripts/prometheusrule.py makes from the
    rules file now (run the script after changing the rules), and the script's check says so; its
    spec is the rules file's content."""
    done = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rule = one("PrometheusRule", "msgx")
    assert rule["spec"] == yaml.safe_load(RULES.read_text("utf-8"))


def test_promtool_checks_and_unit_tests_the_generated_rules(tmp_path):
    """The PrometheusRule's spec, as the operator hands it to Prometheus, passes `promtool check
    rules` and the very unit tests of the rules file."""
    spec = one("PrometheusRule", "msgx")["spec"]
    (tmp_path / RULES.name).write_text(yaml.safe_dump(spec), "utf-8")
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    for args in (("check", "rules", RULES.name), ("test", "rules", RULE_TESTS.name)):
        done = subprocess.run([tool("promtool"), *args], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("path", sorted(p.name for p in K8S.glob("*.yaml")))
def test_manifests_hold_no_secret(path):
    """OPS-2: settings and secrets come from the Secret msgx-env at run time, never from a manifest."""
    text = "\n".join(line for line in (K8S / path).read_text("utf-8").splitlines()
                     if not line.lstrip().startswith("#"))
    assert not re.search(r"(MSGX_[A-Z_]+|DAGSTER_PG_[A-Z]+|(?i:password|token))\s*[:=]\s*\S", text)

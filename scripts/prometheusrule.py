"""Make deploy/kubernetes/msgx-prometheusrule.yaml from deploy/prometheus/msgx-rules.yml.

The rules file is the one source of msgx's alerts; on Kubernetes the Prometheus Operator loads
rules from a PrometheusRule object, whose ``spec`` is that file's content. Run this after every
change of the rules file (the test suite fails while the generated file is behind):

    python scripts/prometheusrule.py           # rewrite the generated file
    python scripts/prometheusrule.py --check   # exit 1 if it is behind the rules file
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "deploy" / "prometheus" / "msgx-rules.yml"
TARGET = REPO / "deploy" / "kubernetes" / "msgx-prometheusrule.yaml"

HEADER = """\
# GENERATED from deploy/prometheus/msgx-rules.yml by scripts/prometheusrule.py: edit the rules
# file and run the script, never this file. The Prometheus Operator loads msgx's alert rules from
# it. Set the label your Prometheus selects rules by (kube-prometheus-stack: release: <its release
# name>), and the runbook links' address as for the rules file (deploy/prometheus/README.md):
#   sed "s|https://msgx-docs.invalid|$DOCS|" deploy/kubernetes/msgx-prometheusrule.yaml | kubectl apply -f -
"""


def render(rules_text: str) -> str:
    """The PrometheusRule whose spec is the rules file's content, as YAML text."""
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "msgx", "labels": {"app.kubernetes.io/name": "msgx", "release": "prometheus"}},
        "spec": yaml.safe_load(rules_text),
    }
    return HEADER + yaml.safe_dump(rule, sort_keys=False, width=100, allow_unicode=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the generated file is behind the rules file")
    args = parser.parse_args(argv)
    wanted = render(RULES.read_text("utf-8"))
    if args.check:
        current = TARGET.read_text("utf-8") if TARGET.exists() else ""
        if current != wanted:
            print(f"{TARGET.relative_to(REPO)} is behind {RULES.relative_to(REPO)}: "
                  "run python scripts/prometheusrule.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(wanted, "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

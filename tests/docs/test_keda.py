"""The scaling guide's KEDA `ScaledObject` (docs/guides/scaling.md), checked for shape: no
Kubernetes runs here. It is KEDA's v1alpha1 resource, scaling a Deployment by a Prometheus
query whose every metric is one the API's scrape answers (the metrics reference lists them,
and tests/api/test_metrics.py holds that list to a real scrape)."""

from __future__ import annotations

import re

import yaml

from tests.conftest import ROOT
from tests.docs.examples import marked_block

METRICS_PAGE = ROOT / "docs" / "reference" / "metrics.md"


def test_the_scaled_object_scales_the_workers_on_metrics_the_api_answers() -> None:
    manifest = yaml.safe_load(marked_block("keda-scaledobject.yaml"))
    assert manifest["apiVersion"] == "keda.sh/v1alpha1"
    assert manifest["kind"] == "ScaledObject"
    spec = manifest["spec"]
    assert isinstance(spec["scaleTargetRef"]["name"], str)
    assert 0 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "prometheus"
    meta = trigger["metadata"]
    assert meta["serverAddress"].startswith("http")
    assert float(meta["threshold"]) > 0  # KEDA takes the threshold as a string
    used = set(re.findall(r"majordomus_\w+", meta["query"]))
    documented = set(re.findall(r"`(majordomus_\w+)`", METRICS_PAGE.read_text()))
    assert used and used <= documented, used - documented

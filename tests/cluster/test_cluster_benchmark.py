"""The admission-latency benchmark on the session's control plane (benchmarks/cluster_admission.py; the burst has marker ``cluster``):
a burst of 400 pod creates, kube-apiserver's own histogram for the pod webhook printed, not asserted."""

from __future__ import annotations

import sys

import pytest

from tests.support import paths
from tests.support.cluster_support import EXAMPLES

sys.path.insert(0, str(paths.REPO / "benchmarks"))

import cluster_admission


def test_quantile_is_prometheus_histogram_quantile():
    # 10 observations <= 0.005 s, 90 more <= 0.01 s: the median lies in the second bucket,
    # 40 of its 90 observations in: 0.005 + 0.005 * 40/90 (Prometheus' linear interpolation)
    buckets = {0.005: 10.0, 0.01: 100.0, float("inf"): 100.0}
    assert cluster_admission.quantile(buckets, 0.5) == pytest.approx(0.005 + 0.005 * 40 / 90)
    assert cluster_admission.quantile(buckets, 0.05) == pytest.approx(0.0025)


@pytest.mark.cluster
def test_burst_of_400_pod_creates(cluster, kubectl, capsys):
    kubectl.ok("apply", "-f", str(EXAMPLES / "topology.yaml"))
    figures = cluster_admission.burst(cluster, pods=400, concurrency=8)
    with capsys.disabled():
        print("\ncluster benchmark: " + cluster_admission.report(figures, 8))
    assert figures["labelled"] == 400  # every pod went through the webhook
    assert figures["observed"] == 400  # and the apiserver's histogram counted each call

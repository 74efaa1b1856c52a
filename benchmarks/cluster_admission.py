"""kube-apiserver's own view of the webhook's latency (issue 16): a burst of pod creates on the local
control plane, measured by ``apiserver_admission_webhook_admission_duration_seconds``.

    python benchmarks/cluster_admission.py                 # starts a control plane, 400 pods, stops it
    python benchmarks/cluster_admission.py --dir DIR       # on a running `hack/local-cluster.sh up DIR --webhook`
    python benchmarks/cluster_admission.py --pods 1000 --concurrency 16

Each pod is a worker of a segmented PyTorchJob as the training operator creates it (labels
``training.kubeflow.org/*``, the Worker template's ``kai.scheduler/*`` annotations), so each reaches
``pods.segment-webhook.segments.dev`` and gets its segment labels. ``--concurrency`` clients create
them through the Kubernetes Python client. Printed: the wall time and creates per second of the
burst, and p50 / p90 / p99 of the apiserver's histogram for the pod webhook (the burst only: the
histogram is read before and after), estimated within the histogram's buckets as Prometheus'
``histogram_quantile`` does. Figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "hack"))

import local_cluster  # noqa: E402

METRIC = "apiserver_admission_webhook_admission_duration_seconds"
POD_WEBHOOK = "pods.segment-webhook.segments.dev"


def histogram(cluster: local_cluster.LocalCluster, webhook: str) -> dict[float, float]:
    """Cumulative bucket counts (upper bound in seconds -> count) of the admit histogram of
    ``webhook`` for CREATE, from kube-apiserver's /metrics."""
    import http.client
    import ssl

    context = ssl.create_default_context(cafile=str(cluster.dir / "pki" / "ca.crt"))
    connection = http.client.HTTPSConnection("127.0.0.1", cluster.state["ports"]["kube-apiserver"], context=context)
    connection.request("GET", "/metrics", headers={"Authorization": f"Bearer {cluster.state['admin_token']}"})
    text = connection.getresponse().read().decode()
    connection.close()
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if not line.startswith(METRIC + "_bucket{") or f'name="{webhook}"' not in line:
            continue
        if 'operation="CREATE"' not in line or 'type="admit"' not in line:
            continue
        labels, value = line.rsplit(" ", 1)
        bound = labels.split('le="', 1)[1].split('"', 1)[0]
        upper = float("inf") if bound == "+Inf" else float(bound)
        buckets[upper] = buckets.get(upper, 0.0) + float(value)
    return buckets


def quantile(buckets: dict[float, float], q: float) -> float:
    """Prometheus ``histogram_quantile`` on cumulative ``buckets``: linear within the bucket."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0
    if total == 0:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for upper in bounds:
        count = buckets[upper]
        if count >= rank:
            if upper == float("inf"):
                return lower
            return lower + (upper - lower) * ((rank - below) / (count - below) if count > below else 1.0)
        lower, below = upper, count
    return bounds[-1]


def worker_pod(index: int, namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"burst-worker-{index}", "namespace": namespace,
                         "labels": {"training.kubeflow.org/job-name": "burst",
                                    "training.kubeflow.org/operator-name": "pytorchjob-controller",
                                    "training.kubeflow.org/replica-type": "worker",
                                    "training.kubeflow.org/replica-index": str(index)},
                         "annotations": {"kai.scheduler/topology": "cluster-topology",
                                         "kai.scheduler/segment-size": "4",
                                         "kai.scheduler/segment-topology-required-placement":
                                             "cloud.provider.com/topology-rack"}},
            "spec": {"containers": [{"name": "worker", "image": "busybox"}]}}


def burst(cluster: local_cluster.LocalCluster, pods: int, concurrency: int, namespace: str = "burst") -> dict:
    """Create ``pods`` worker pods with ``concurrency`` clients; return the figures (seconds)."""
    from kubernetes import client, config

    api_client = config.new_client_from_config(str(cluster.kubeconfig))
    core = client.CoreV1Api(api_client)
    try:
        core.create_namespace({"metadata": {"name": namespace}})
    except client.ApiException as error:
        if error.status != 409:
            raise
    before = histogram(cluster, POD_WEBHOOK)
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        created = list(pool.map(lambda i: core.create_namespaced_pod(namespace, worker_pod(i, namespace)), range(pods)))
    wall = time.monotonic() - started
    after = histogram(cluster, POD_WEBHOOK)
    burst_buckets = {bound: after[bound] - before.get(bound, 0.0) for bound in after}
    labelled = sum(1 for pod in created if (pod.metadata.labels or {}).get("kai.scheduler/segment-index"))
    return {"pods": pods, "labelled": labelled, "wall": wall,
            "observed": burst_buckets.get(float("inf"), 0.0),
            "p50": quantile(burst_buckets, 0.50), "p90": quantile(burst_buckets, 0.90),
            "p99": quantile(burst_buckets, 0.99)}


def report(figures: dict, concurrency: int) -> str:
    return (f"{figures['pods']} pod creates, {concurrency} clients: {figures['wall']:.1f} s "
            f"({figures['pods'] / figures['wall']:.0f}/s), {figures['labelled']} labelled by the webhook; "
            f"{METRIC}{{name={POD_WEBHOOK}}}: {figures['observed']:.0f} observed, "
            f"p50 {figures['p50'] * 1000:.1f} ms, p90 {figures['p90'] * 1000:.1f} ms, p99 {figures['p99'] * 1000:.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="a running `hack/local-cluster.sh up DIR --webhook`")
    parser.add_argument("--pods", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    if args.dir:
        cluster = local_cluster.LocalCluster(args.dir)
        print(report(burst(cluster, args.pods, args.concurrency), args.concurrency))
        return 0
    with tempfile.TemporaryDirectory(prefix="cluster-admission-") as directory:
        cluster = local_cluster.up(Path(directory), webhook=True, gate_pods=False)
        try:
            cluster.kubectl("apply", "-f", str(REPO.parent / "shared" / "examples" / "topology.yaml"))
            print(report(burst(cluster, args.pods, args.concurrency), args.concurrency))
        finally:
            cluster.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())

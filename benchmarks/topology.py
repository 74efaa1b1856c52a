"""``topology infer`` / ``topology check`` benchmark (issue 19: both read a 10,000-node dump in under
2x the time of parsing it, the bar of ``place``'s dump path).

    python benchmarks/topology.py                 # 10,000 nodes, JSON and YAML, best of 5 rounds
    python benchmarks/topology.py --nodes 200 --repeat 1   # the smoke test's size

The dump is ``gen-cluster --labels eks`` (zone > 3 EKS network layers > node, with the attribute
labels of an EKS GPU node) with each node's status filled as ``kubectl get nodes -o yaml`` shows
it (conditions, addresses, daemon endpoints, nodeInfo, a few images; ``--bare`` leaves the
generator's short status, which makes parsing cheaper and the ratio harder). Per format it prints:

* ``parse``: ``json.loads`` / ``yaml.load(CSafeLoader)`` of the file's text, the bare parse (with the
  cyclic garbage collector paused, as the commands pause it: the collector's passes over a dump's
  objects would otherwise make the parse slower and the ratio easier);
* ``infer``: the whole ``topology infer -f FILE`` command in-process (reading through
  ``webhook.planning.manifests``, the nodes' labels, inference, the Topology and the report written to
  ``/dev/null``), and ``check``: ``topology check -f TOPOLOGY --nodes FILE`` likewise;
* the ratios command / parse, each to hold under 2.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import tempfile
import time

import yaml

from webhook.cli import main
from webhook.planning.gencluster import generate

LAYOUT = {10_000: (2, 5, 25, 40)}  # zones x blocks x racks x nodes


def layout(nodes: int) -> tuple[int, int, int, int]:
    """Zones, blocks per zone, racks per block, nodes per rack for about ``nodes`` nodes."""
    if nodes in LAYOUT:
        return LAYOUT[nodes]
    per_rack = max(1, nodes // 16)
    return 2, 2, 4, per_rack


def realistic(node: dict, index: int) -> dict:
    """``node`` with the status fields a real ``kubectl get nodes`` dump carries."""
    name = node["metadata"]["name"]
    node["metadata"].update({
        "annotations": {"alpha.kubernetes.io/provided-node-ip": f"10.0.{index // 256 % 256}.{index % 256}",
                        "node.alpha.kubernetes.io/ttl": "0",
                        "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        "creationTimestamp": "2026-11-30T08:12:44Z", "resourceVersion": str(4_000_000 + index),
        "uid": f"6f9619ff-8b86-4011-b42d-{index:012x}"})
    node["spec"] = {"providerID": f"aws:///us-east-1a/i-0{index:016x}"}
    status = node["status"]
    status["capacity"] = dict(status["allocatable"])
    status["addresses"] = [{"type": "InternalIP", "address": f"10.0.{index // 256 % 256}.{index % 256}"},
                           {"type": "Hostname", "address": name}, {"type": "InternalDNS", "address": name}]
    status["conditions"] = [
        {"type": kind, "status": "False", "lastHeartbeatTime": "2026-12-02T06:00:00Z",
         "lastTransitionTime": "2026-11-30T08:12:44Z", "reason": f"KubeletHas{reason}", "message": message}
        for kind, reason, message in (("MemoryPressure", "SufficientMemory", "kubelet has sufficient memory available"),
                                      ("DiskPressure", "NoDiskPressure", "kubelet has no disk pressure"),
                                      ("PIDPressure", "SufficientPID", "kubelet has sufficient PID available"))
    ] + [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-12-02T06:00:00Z",
          "lastTransitionTime": "2026-11-30T08:13:10Z", "reason": "KubeletReady", "message": "kubelet is posting ready status"}]
    status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": 10250}}
    status["nodeInfo"] = {"architecture": "amd64", "bootID": f"b{index:031x}", "containerRuntimeVersion": "containerd://1.7.22",
                          "kernelVersion": "5.10.227-219.884.amzn2.x86_64", "kubeProxyVersion": "v1.31.2-eks-7f9249a",
                          "kubeletVersion": "v1.31.2-eks-7f9249a", "machineID": f"ec2{index:029x}",
                          "operatingSystem": "linux", "osImage": "Amazon Linux 2", "systemUUID": f"ec2{index:029x}"}
    status["images"] = [{"names": [f"public.ecr.aws/eks-distro/{image}@sha256:{index:064x}",
                                   f"public.ecr.aws/eks-distro/{image}:v1.31.2"], "sizeBytes": 30_000_000 + i}
                        for i, image in enumerate(("kube-proxy", "coredns", "aws-node", "nvidia-device-plugin"))]
    return node


def write_dumps(directory: str, nodes: int, bare: bool) -> tuple[str, str, str]:
    """The JSON and YAML node dumps and the Topology file; returns their paths."""
    zones, blocks, racks, per_rack = layout(nodes)
    doc = generate(zones, blocks, racks, per_rack, 8, 0.0, 0, labels="eks")
    items = [item for item in doc["items"] if item["kind"] == "Node"]
    if not bare:
        items = [realistic(item, i) for i, item in enumerate(items)]
    dump = {"apiVersion": "v1", "kind": "List", "items": items}
    json_path, yaml_path = os.path.join(directory, "nodes.json"), os.path.join(directory, "nodes.yaml")
    with open(json_path, "w", encoding="utf-8") as fh:
        json.dump(dump, fh, indent=4)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    with open(yaml_path, "w", encoding="utf-8") as fh:
        yaml.dump(dump, fh, Dumper=dumper, sort_keys=False)
    topology_path = os.path.join(directory, "topology.yaml")
    with open(topology_path, "w", encoding="utf-8") as fh:
        yaml.safe_dump([item for item in doc["items"] if item["kind"] == "Topology"][0], fh)
    return json_path, yaml_path, topology_path


def bare_parse(path: str) -> None:
    """The file parsed with the collector paused, as the commands read it (the harder bar)."""
    gc.disable()
    try:
        _parse(path)
    finally:
        gc.enable()


def _parse(path: str) -> None:
    with open(path, encoding="utf-8") as fh:
        text = fh.read()  # libyaml parses a str much faster than it reads a file object
    if path.endswith(".json"):
        json.loads(text)
    else:
        yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def best(repeat: int, *calls) -> list[float]:
    """The least wall time of each of ``calls`` over ``repeat`` rounds, seconds. The calls take turns
    within a round, so a burst of load on a shared machine slows all of them alike."""
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(repeat):
        for call, spent in zip(calls, times):
            start = time.perf_counter()
            call()
            spent.append(time.perf_counter() - start)
    return [min(spent) for spent in times]


def command(argv: list[str], expected: int) -> None:
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        code = main(argv)
    if code != expected:
        raise SystemExit(f"{' '.join(argv)} exited {code}, expected {expected}")


def main_(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000, help="nodes in the dump (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds of the three timings, the best is shown (default: 5)")
    parser.add_argument("--bare", action="store_true", help="keep the generator's short node status")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        json_path, yaml_path, topology_path = write_dumps(directory, args.nodes, args.bare)
        print(f"{args.nodes:,}-node gen-cluster --labels eks dump{' (bare status)' if args.bare else ''}: "
              f"JSON {os.path.getsize(json_path) / 2**20:.1f} MiB, YAML {os.path.getsize(yaml_path) / 2**20:.1f} MiB; "
              f"best of {args.repeat}")
        print(f"{'format':<6} {'parse':>9} {'infer':>9} {'check':>9} {'infer/parse':>12} {'check/parse':>12}")
        worst = 0.0
        # warm up (imports, the parser): not timed
        command(["topology", "infer", "-f", json_path], 0)
        command(["topology", "check", "-f", topology_path, "--nodes", json_path], 0)
        for label, path in (("json", json_path), ("yaml", yaml_path)):
            parse, infer, check = best(
                args.repeat, lambda path=path: bare_parse(path),
                lambda path=path: command(["topology", "infer", "-f", path], 0),
                lambda path=path: command(["topology", "check", "-f", topology_path, "--nodes", path], 0))
            worst = max(worst, infer / parse, check / parse)
            print(f"{label:<6} {parse:>8.3f}s {infer:>8.3f}s {check:>8.3f}s {infer / parse:>12.2f} {check / parse:>12.2f}")
        print(f"worst ratio {worst:.2f} (bar: under 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main_())

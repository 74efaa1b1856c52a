"""hack/node.py's pieces that need no node (``-m node`` runs the rest, tests/cluster/test_node.py)."""

from __future__ import annotations

import ipaddress
import json
import sys
import tarfile

import pytest

from tests.support import paths

REPO = paths.REPO
sys.path.insert(0, str(REPO / "hack"))

import local_cluster  # noqa: E402
import node  # noqa: E402


def test_the_kubelet_is_built_at_the_control_plane_s_version_without_moving_it():
    """docs/decisions/kubelet-module-beside-the-control-plane.md: hack/go/kubelet = hack/go/kubernetes + the kubelet's own requirements."""
    kubelet = local_cluster.TOOLS["kubelet"]
    assert (kubelet.module_dir, kubelet.package, kubelet.binary) == \
        ("kubelet", "k8s.io/kubernetes/cmd/kubelet", "kubelet")
    assert local_cluster.module_version("kubelet", "k8s.io/kubernetes") == "v1.37.2"
    assert local_cluster.module_version("kubernetes", "k8s.io/kubernetes") == "v1.37.2"

    def requirements(module_dir: str) -> dict[str, str]:
        found = {}
        for line in (local_cluster.GO_MODULES / module_dir / "go.mod").read_text().splitlines():
            words = line.split()
            if len(words) >= 2 and "." in words[0] and words[1].startswith("v"):
                found[words[0]] = words[1]
        return found

    control_plane, kubelet_requirements = requirements("kubernetes"), requirements("kubelet")
    assert {m: v for m, v in kubelet_requirements.items() if m in control_plane} == control_plane
    assert sorted(set(kubelet_requirements) - set(control_plane)) == [
        "github.com/Microsoft/hnslib",
        "go.opentelemetry.io/contrib/instrumentation/github.com/emicklei/go-restful/otelrestful",
        "k8s.io/cri-streaming"]
    assert kubelet_requirements["k8s.io/cri-streaming"] == "v0.37.2"
    assert "-X=k8s.io/component-base/version.gitVersion=v1.37.2" in kubelet.ldflags().split()
    assert local_cluster.upstream_target("kubelet").name.startswith("kubelet-v1.37.2-")


def test_the_pods_subnet_avoids_every_routed_network():
    routes = [{"dst": "default"}, {"dst": "192.0.2.0/24"}, {"dst": "10.244.0.0/24"}, {"dst": "10.244.1.7"},
              {"dst": "fe80::/64"}, {"dst": "127.0.0.0/8"}]
    assert node.pick_subnet(routes) == ipaddress.ip_network("10.244.2.0/24")
    assert node.pick_subnet([]) == ipaddress.ip_network("10.244.0.0/24")
    with pytest.raises(node.NodeError, match=r"no free /24 in 10.244.0.0/16"):
        node.pick_subnet([{"dst": "10.0.0.0/8"}])


def test_the_bridge_name_fits_a_linux_interface_name(tmp_path):
    name = node.bridge_name(tmp_path / ("a" * 200))
    assert len(name) <= 15 and name.startswith("swn")  # IFNAMSIZ 16 with the NUL
    assert node.bridge_name(tmp_path) != node.bridge_name(tmp_path / "other")


def test_pods_get_no_route_off_their_subnet_and_the_host_is_not_rewritten(tmp_path):
    config = node.cni_config("swn01234567", ipaddress.IPv4Network("10.244.3.0/24"), tmp_path)
    [plugin] = config["plugins"]
    # no gateway role (the plugin would turn on IP forwarding and give pods a default route),
    # no masquerade (iptables), no routes but the subnet's own
    assert (plugin["type"], plugin["isGateway"], plugin["isDefaultGateway"], plugin["ipMasq"]) == \
        ("bridge", False, False, False)
    assert plugin["ipam"] == {"type": "host-local", "dataDir": str(tmp_path),
                              "ranges": [[{"subnet": "10.244.3.0/24", "gateway": "10.244.3.1"}]]}
    assert "routes" not in plugin["ipam"]


def test_the_kubelet_settings_this_host_needs(tmp_path):
    config = node.kubelet_configuration(tmp_path, "10.244.3.1", 40000, 40001, tmp_path / "ca.crt")
    assert config["failCgroupV1"] is False and config["cgroupsPerQOS"] is False
    assert config["enforceNodeAllocatable"] == [] and config["failSwapOn"] is False
    assert config["cgroupDriver"] == "cgroupfs"
    assert (config["address"], config["port"], config["readOnlyPort"]) == ("10.244.3.1", 40000, 0)
    assert config["healthzBindAddress"] == "127.0.0.1"
    assert config["authentication"]["anonymous"] == {"enabled": False}
    assert config["containerRuntimeEndpoint"] == f"unix://{tmp_path}/containerd/containerd.sock"
    assert config["imageGCHighThresholdPercent"] == 100


def test_containerd_keeps_everything_under_the_node_directory(tmp_path):
    text = node.containerd_config(tmp_path)
    for line in ("netns_mounts_under_state_dir = true", "restrict_oom_score_adj = true", 'snapshotter = "overlayfs"', "SystemdCgroup = false",
                 f'sandbox_image = "{node.PAUSE_IMAGE}"', 'stream_server_address = "127.0.0.1"',
                 f'conf_dir = "{tmp_path}/cni/net.d"', f'address = "{tmp_path}/containerd/containerd.sock"'):
        assert line in text, line


def test_pods_reach_the_apiserver_through_the_relay():
    assert node.in_cluster_env("10.244.3.1") == {"KUBERNETES_SERVICE_HOST": "10.244.3.1",
                                                 "KUBERNETES_SERVICE_PORT": "6443"}


def read_member(archive: tarfile.TarFile, name: str) -> bytes:
    """The bytes of regular file ``name`` in ``archive``."""
    member = archive.extractfile(name)
    assert member is not None, f"{name} is not a regular file"
    return member.read()


def test_the_pause_image_archive(tmp_path):
    binary = tmp_path / "pause"
    binary.write_bytes(b"\x7fELF fake")
    archive = tmp_path / "pause.tar"
    node.write_image_archive(binary, "/pause", "localhost/segment-webhook-pause:1", archive)
    with tarfile.open(archive) as outer:
        manifest = json.loads(read_member(outer, "manifest.json"))
        assert manifest[0]["RepoTags"] == ["localhost/segment-webhook-pause:1"]
        config = json.loads(read_member(outer, manifest[0]["Config"]))
        assert config["config"]["Entrypoint"] == ["/pause"]
        layer = tarfile.open(fileobj=outer.extractfile("layer.tar"))
        [member] = layer.getmembers()
        assert (member.name, member.mode, member.uid) == ("pause", 0o755, 0)

"""One real node for the local control plane: ``local-cluster.sh up DIR --kubelet`` (DESIGN.md §11).

A kubelet (``k8s.io/kubernetes/cmd/kubelet``, built by ``local_cluster.build_upstream("kubelet")``
from hack/go/kubelet) runs pods through containerd and runc (Debian packages ``containerd``,
``runc``, ``containernetworking-plugins``), everything it writes under ``DIR/node``:

* **Network.** A bridge the run creates (``swn<8 hex>``, from the hash of DIR) holding the
  gateway address ``10.244.K.1/24`` of a /24 no route of this machine uses (K picked at ``up``).
  Each pod gets its own network namespace (made by containerd) with one end of a veth pair on that
  bridge and an address from the /24 (CNI ``bridge`` plugin, ``host-local`` IPAM), and no default
  route: a pod reaches the /24 and nothing else, and ``isGateway``/``ipMasq`` are off, so the
  plugin never turns on IP forwarding nor writes iptables rules. kube-apiserver (host namespace)
  reaches pods through the bridge; it calls a Service at its endpoints
  (``--enable-aggregator-routing=true``, always on in ``up``).
* **kube-apiserver from a pod.** No kube-proxy runs, so the ``kubernetes`` Service's cluster IP
  leads nowhere; ``apiserver-proxy`` (a TCP relay, :func:`relay`) listens on the gateway address,
  port :data:`PROXY_PORT`, and relays to kube-apiserver on loopback. A pod reaches it by
  ``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT`` set to :func:`in_cluster_env` (the chart's
  ``extraEnv``); kube-apiserver's serving certificate is re-issued with the gateway address among
  its names (:func:`reissue_apiserver_certificate`; kube-apiserver reloads it from the file).
* **containerd** with its own root, state, socket and CNI directories (the pods' network
  namespaces mounted under its state directory), the overlayfs snapshotter (:data:`SNAPSHOTTER`),
  runc with cgroupfs, and the sandbox image :data:`PAUSE_IMAGE` built here
  (hack/go/pause, a static Go program) and imported with ``ctr images import``; no registry is
  reachable, so every image a pod uses must be imported (:func:`import_image`).
* **The kubelet** registers Node :data:`NODE_NAME` with the gateway address as its InternalIP,
  authenticates with a client certificate ``system:node:<name>`` / ``system:nodes`` signed by the
  cluster CA (ClusterRole ``system:node`` bound to it: the apiserver runs RBAC only), serves its
  API on the gateway address, and runs with the settings this host needs (:data:`KUBELET_SETTINGS`).

``down`` (:func:`drain` before the processes stop, :func:`cleanup` after) kills every container
task of this containerd, removes the pods' network namespaces, unmounts whatever is mounted under
``DIR/node``, kills any shim of this containerd still alive, removes the kubelet's log links and
deletes the bridge.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from local_cluster import LocalCluster

HACK = Path(__file__).resolve().parent
NODE_NAME = "local-node-0"
#: The /24s tried for the pods, in order: 10.244.K.0/24, the first that no route of this host covers.
POD_SUBNETS = [ipaddress.ip_network(f"10.244.{k}.0/24") for k in range(256)]
#: The port of ``apiserver-proxy`` on the gateway address.
PROXY_PORT = 6443
#: Where Debian's containernetworking-plugins installs the CNI plugins.
CNI_BIN_DIR = Path("/usr/lib/cni")
#: The kubelet links each container's log here (pkg/kubelet/kuberuntime ContainerLogsDir; not configurable).
CONTAINER_LOG_LINKS = Path("/var/log/containers")
#: containerd's snapshotter: overlayfs, its default (overlay mounts work on this host's ext4, tried
#: with ``ctr run --snapshotter overlayfs``; ``native`` is the documented fallback where they do not).
SNAPSHOTTER = "overlayfs"
PAUSE_IMAGE = "localhost/segment-webhook-pause:1"
#: KubeletConfiguration fields chosen for this host (docs/tasks/cluster.md, "A real node"), each a
#: documented kubelet setting: cgroup v1 (hybrid) is refused by default since v1.35
#: (``failCgroupV1``); no per-QoS cgroups and no enforced node allocatable (the kubelet runs in a
#: cgroup it does not own); swap allowed; no image garbage collection (an image removed here cannot
#: be pulled again) and no eviction thresholds.
KUBELET_SETTINGS: dict[str, Any] = {
    "failCgroupV1": False,
    "cgroupDriver": "cgroupfs",
    "cgroupsPerQOS": False,
    "enforceNodeAllocatable": [],
    "failSwapOn": False,
    "imageGCHighThresholdPercent": 100,
    "imageGCLowThresholdPercent": 99,
    "evictionHard": {"memory.available": "1Mi"},
    "evictionPressureTransitionPeriod": "5s",
}
#: Seconds the node gets to report Ready after the kubelet starts.
READY_TIMEOUT = 180


class NodeError(RuntimeError):
    """A step of the node failed; the message names it (and the command's output)."""


def run(argv: list[str], check: bool = True, timeout: float = 300, input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv``; raise NodeError with its output when it fails and ``check``."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input_text)
    if check and done.returncode != 0:
        raise NodeError(f"`{' '.join(argv)}` exited {done.returncode}: {(done.stderr or done.stdout).strip()[-3000:]}")
    return done


def need_tools() -> None:
    """Raise NodeError naming the Debian package of the first program missing."""
    for tool, package in (("containerd", "containerd"), ("ctr", "containerd"), ("runc", "runc"),
                          ("ip", "iproute2")):
        if shutil.which(tool) is None:
            raise NodeError(f"no `{tool}` on PATH: apt-get install -y {package}")
    for plugin in ("bridge", "host-local", "loopback"):
        if not (CNI_BIN_DIR / plugin).is_file():
            raise NodeError(f"no CNI plugin {CNI_BIN_DIR / plugin}: apt-get install -y containernetworking-plugins")
    if os.geteuid() != 0:
        raise NodeError("up --kubelet needs root (network namespaces, a bridge, containerd)")


def bridge_name(directory: Path) -> str:
    """The bridge of the run in ``directory``: ``swn`` + 8 hex digits of its path (15 characters at most)."""
    return "swn" + hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:8]


def pick_subnet(routes: list[dict]) -> ipaddress.IPv4Network:
    """The first of :data:`POD_SUBNETS` that overlaps no destination of ``routes`` (``ip -j route``
    of every table). Raises NodeError when none is free."""
    used = []
    for route in routes:
        destination = route.get("dst", "")
        if destination in ("default", "") or ":" in destination:
            continue
        try:
            used.append(ipaddress.ip_network(destination, strict=False))
        except ValueError:
            continue
    for subnet in POD_SUBNETS:
        if not any(subnet.overlaps(other) for other in used):
            return subnet
    raise NodeError("no free /24 in 10.244.0.0/16 for the pods (every one is routed already)")


def cni_config(bridge: str, subnet: ipaddress.IPv4Network, data_dir: Path) -> dict[str, Any]:
    """The CNI network list: the ``bridge`` plugin on ``bridge`` with ``host-local`` addresses of
    ``subnet`` kept in ``data_dir``; no gateway role, no masquerade, no route but the /24's own."""
    return {
        "cniVersion": "1.0.0", "name": "segment-webhook-local",
        "plugins": [{"type": "bridge", "bridge": bridge, "isGateway": False, "isDefaultGateway": False,
                     "ipMasq": False, "hairpinMode": False,
                     "ipam": {"type": "host-local", "dataDir": str(data_dir),
                              "ranges": [[{"subnet": str(subnet), "gateway": str(subnet[1])}]]}}],
    }


def containerd_config(node_dir: Path) -> str:
    """containerd 1.6's configuration (version 2) with every path under ``node_dir``."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return "\n".join([
        "version = 2",
        f'root = "{node_dir / "containerd" / "root"}"',
        f'state = "{node_dir / "containerd" / "state"}"',
        'disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",'
        ' "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]',
        "[grpc]", f'  address = "{containerd_socket(node_dir)}"',
        "[ttrpc]", f'  address = "{node_dir / "containerd" / "ttrpc.sock"}"',
        "[metrics]", '  address = ""',
        '[plugins."io.containerd.internal.v1.opt"]', f'  path = "{node_dir / "containerd" / "opt"}"',
        f"[{cri}]", f'  sandbox_image = "{PAUSE_IMAGE}"', '  stream_server_address = "127.0.0.1"',
        '  stream_server_port = "0"', "  enable_selinux = false",
        # each pod's network namespace is mounted under the state directory, not /var/run/netns
        "  netns_mounts_under_state_dir = true",
        # no process here may lower an oom_score_adj (CAP_SYS_RESOURCE is not in this host's
        # bounding set): runc fails the sandbox's -998 ("can't get final child's PID from pipe:
        # EOF"); containerd's documented option keeps each container's at least its own
        "  restrict_oom_score_adj = true",
        f"[{cri}.containerd]", f'  snapshotter = "{SNAPSHOTTER}"', '  default_runtime_name = "runc"',
        f"[{cri}.containerd.runtimes.runc]", '  runtime_type = "io.containerd.runc.v2"',
        f"[{cri}.containerd.runtimes.runc.options]", f'  BinaryName = "{shutil.which("runc") or "runc"}"',
        "  SystemdCgroup = false",
        f"[{cri}.cni]", f'  bin_dir = "{CNI_BIN_DIR}"', f'  conf_dir = "{node_dir / "cni" / "net.d"}"',
        "",
    ])


def containerd_socket(node_dir: Path) -> Path:
    return node_dir / "containerd" / "containerd.sock"


def kubelet_configuration(node_dir: Path, gateway: str, port: int, healthz_port: int, ca_file: Path) -> dict[str, Any]:
    """The KubeletConfiguration (kubelet.config.k8s.io/v1beta1): its API on ``gateway``:``port``
    (client certificates of the cluster CA only), health on loopback, paths under ``node_dir``, and
    :data:`KUBELET_SETTINGS`."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": gateway, "port": port, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": healthz_port,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                           "x509": {"clientCAFile": str(ca_file)}},
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": f"unix://{containerd_socket(node_dir)}",
        "podLogsDir": str(node_dir / "pod-logs"),
        "resolvConf": str(node_dir / "resolv.conf"),
        "serializeImagePulls": False,
        "maxPods": 32,
        **KUBELET_SETTINGS,
    }


#: Without per-QoS cgroups the kubelet gives no cgroup parent, and containerd puts each container in
#: ``/k8s.io/<container id>`` of every hierarchy (its namespace's name); runc removes the
#: container's own directory at delete, :func:`cleanup` the ``k8s.io`` ones this run created.
CONTAINERD_CGROUP = "k8s.io"


def cgroup_dirs() -> list[Path]:
    """The ``/sys/fs/cgroup/<hierarchy>/k8s.io`` directories that exist now."""
    return sorted(Path("/sys/fs/cgroup").glob(f"*/{CONTAINERD_CGROUP}")) + \
        sorted(Path("/sys/fs/cgroup").glob(CONTAINERD_CGROUP))


def in_cluster_env(gateway: str) -> dict[str, str]:
    """The variables that point a pod's in-cluster configuration at ``apiserver-proxy``
    (``KUBERNETES_SERVICE_HOST`` and ``KUBERNETES_SERVICE_PORT``; a container's own env wins over
    the ones the kubelet derives from the ``kubernetes`` Service)."""
    return {"KUBERNETES_SERVICE_HOST": gateway, "KUBERNETES_SERVICE_PORT": str(PROXY_PORT)}


# ------------------------------------------------------------------------------------ certificates
def _load_ca(pki: Path):
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    ca_key_path = pki / "ca.key"
    if not ca_key_path.is_file():
        raise NodeError(f"{ca_key_path} is missing: the cluster CA's key is needed to sign the kubelet's certificate")
    ca_cert = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None)
    return ca_cert, ca_key


def _sign(builder, ca_key) -> bytes:
    from cryptography.hazmat.primitives import hashes, serialization

    certificate = builder.sign(ca_key, hashes.SHA256())
    return certificate.public_bytes(serialization.Encoding.PEM)


def issue_client_certificate(pki: Path, common_name: str, organization: str, out: Path) -> None:
    """A client certificate (``out``.crt, ``out``.key) for ``common_name`` in group
    ``organization``, signed by the cluster CA (kube-apiserver's ``--client-ca-file``), 1 day."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_cert, ca_key = _load_ca(pki)
    key = ec.generate_private_key(ec.SECP256R1())
    now = _dt.datetime.now(_dt.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
                                        x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
               .issuer_name(ca_cert.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - _dt.timedelta(minutes=5)).not_valid_after(now + _dt.timedelta(days=1))
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    out.with_suffix(".crt").write_bytes(_sign(builder, ca_key))
    out.with_suffix(".key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))
    out.with_suffix(".key").chmod(0o600)


def reissue_apiserver_certificate(pki: Path, address: str) -> None:
    """Rewrite ``pki/apiserver.crt`` (same key, same names) with ``address`` and 127.0.0.1 added
    to its IP addresses, signed by the cluster CA; kube-apiserver reloads its serving certificate
    from the file."""
    from cryptography import x509

    ca_cert, ca_key = _load_ca(pki)
    current = x509.load_pem_x509_certificate((pki / "apiserver.crt").read_bytes())
    names = list(current.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    for ip in ("127.0.0.1", address):
        name = x509.IPAddress(ipaddress.ip_address(ip))
        if name not in names:
            names.append(name)
    builder = (x509.CertificateBuilder().subject_name(current.subject).issuer_name(ca_cert.subject)
               .public_key(current.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(current.not_valid_before_utc).not_valid_after(current.not_valid_after_utc))
    for extension in current.extensions:
        if not isinstance(extension.value, x509.SubjectAlternativeName):
            builder = builder.add_extension(extension.value, critical=extension.critical)
    builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    partial = pki / "apiserver.crt.partial"
    partial.write_bytes(_sign(builder, ca_key))
    partial.chmod(0o600)
    partial.rename(pki / "apiserver.crt")


def served_ip_names(port: int) -> list[str]:
    """The IP addresses in the certificate kube-apiserver serves on 127.0.0.1:``port``."""
    from cryptography import x509

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="kubernetes") as tls:
        der = tls.getpeercert(binary_form=True)
    certificate = x509.load_der_x509_certificate(der or b"")
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [str(ip) for ip in names.get_values_for_type(x509.IPAddress)]


# -------------------------------------------------------------------------------------------- images
def pause_binary(log=sys.stderr) -> Path:
    """Build (or reuse) hack/go/pause into the cluster cache, keyed by the hash of its sources."""
    import local_cluster

    source = HACK / "go" / "pause"
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(source.glob("*")) if p.is_file())).hexdigest()[:16]
    target = local_cluster.cache_root() / f"pause-{digest}" / "pause"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    print("node: building hack/go/pause", file=log, flush=True)
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-buildvcs=false -trimpath")
    done = subprocess.run(["go", "build", "-ldflags", "-s -w", "-o", str(target) + ".tmp", "."], cwd=source, env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise NodeError(f"go build hack/go/pause failed: {done.stderr[-2000:]}")
    Path(str(target) + ".tmp").rename(target)
    return target


def write_image_archive(binary: Path, entrypoint: str, tag: str, out: Path) -> None:
    """A docker-archive image (``ctr images import`` reads it) of one layer holding ``binary`` as
    ``entrypoint`` (mode 0755, owner 0), tagged ``tag``."""
    work = out.with_suffix(".d")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    layer = work / "layer.tar"
    with tarfile.open(layer, "w", format=tarfile.PAX_FORMAT) as archive:
        info = archive.gettarinfo(str(binary), arcname=entrypoint.lstrip("/"))
        info.mode, info.uid, info.gid, info.uname, info.gname, info.mtime = 0o755, 0, 0, "", "", 0
        with open(binary, "rb") as handle:
            archive.addfile(info, handle)
    diff_id = "sha256:" + hashlib.sha256(layer.read_bytes()).hexdigest()
    config = {"architecture": "amd64", "os": "linux", "config": {"Entrypoint": [entrypoint]},
              "rootfs": {"type": "layers", "diff_ids": [diff_id]}}
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    (work / config_name).write_bytes(config_bytes)
    (work / "manifest.json").write_text(json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": ["layer.tar"]}]))
    with tarfile.open(out, "w") as archive:
        for name in ("manifest.json", config_name, "layer.tar"):
            archive.add(str(work / name), arcname=name)
    shutil.rmtree(work)


def ctr(node_dir: Path, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``ctr`` against this node's containerd, namespace ``k8s.io`` (the CRI plugin's)."""
    return run(["ctr", "--address", str(containerd_socket(node_dir)), "--namespace", "k8s.io", *args],
               check=check, timeout=timeout)


def import_image(node_dir: Path, archive: Path) -> None:
    """``ctr images import`` of a docker or OCI archive into the node's containerd."""
    ctr(node_dir, "images", "import", "--snapshotter", SNAPSHOTTER, str(archive))


def import_podman_image(node_dir: Path, image: str) -> None:
    """Save ``image`` from podman's storage (``podman save``) and import it into the node."""
    archive = node_dir / "images" / (hashlib.sha256(image.encode()).hexdigest()[:12] + ".tar")
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.unlink(missing_ok=True)
    run(["podman", "save", "--format", "docker-archive", "-o", str(archive), image], timeout=900)
    import_image(node_dir, archive)
    archive.unlink()


# ----------------------------------------------------------------------------------------- relay
async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except OSError:
            pass


async def _relay(listen: tuple[str, int], target: tuple[str, int]) -> None:
    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))

    server = await asyncio.start_server(accept, *listen)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    async with server:
        await stopping.wait()


def relay(listen_host: str, listen_port: int, target_port: int) -> int:
    """``apiserver-proxy``: relay TCP connections from ``listen_host``:``listen_port`` to
    127.0.0.1:``target_port`` (kube-apiserver; TLS passes through) until SIGTERM."""
    asyncio.run(_relay((listen_host, listen_port), ("127.0.0.1", target_port)))
    return 0


# --------------------------------------------------------------------------------------------- up
def start(cluster: LocalCluster, log=sys.stderr) -> None:
    """Add the node to ``cluster`` (its control plane running): bridge, containerd, images,
    credentials, relay, kubelet; wait until the Node is Ready. Every step is recorded in
    ``cluster.state["node"]`` before it is taken, so ``down`` undoes it after a failure too.
    Raises NodeError (the local_cluster caller turns it into ClusterError)."""
    import local_cluster

    need_tools()
    started = time.monotonic()
    kubelet = local_cluster.build_upstream("kubelet", log)
    node_dir = cluster.dir / "node"
    for sub in ("cni/net.d", "cni/ipam", "containerd", "kubelet", "pod-logs", "images", "pki"):
        (node_dir / sub).mkdir(parents=True, exist_ok=True)
    routes = json.loads(run(["ip", "-j", "route", "show", "table", "all"]).stdout or "[]")
    subnet = pick_subnet(routes)
    gateway = str(subnet[1])
    bridge = bridge_name(cluster.dir)
    state = cluster.state["node"] = {"name": NODE_NAME, "dir": str(node_dir), "bridge": bridge, "subnet": str(subnet),
                                     "gateway": gateway, "netns": [],
                                     "cgroups_before": [str(path) for path in cgroup_dirs()]}
    cluster.save()
    run(["ip", "link", "add", bridge, "type", "bridge"])
    run(["ip", "addr", "add", f"{gateway}/{subnet.prefixlen}", "dev", bridge])
    run(["ip", "link", "set", bridge, "up"])
    (node_dir / "cni" / "net.d" / "10-segment-webhook.conflist").write_text(
        json.dumps(cni_config(bridge, subnet, node_dir / "cni" / "ipam"), indent=2) + "\n")
    (node_dir / "resolv.conf").write_text("# no DNS on the local node: pods reach nothing off the /24\n"
                                          "nameserver 127.0.0.1\n")
    (node_dir / "containerd" / "config.toml").write_text(containerd_config(node_dir))
    containerd = cluster.start("containerd", ["containerd", "--config", str(node_dir / "containerd" / "config.toml")])
    cluster.wait_until("containerd", containerd, lambda: ctr(node_dir, "version", check=False).returncode == 0,
                       "answering on its socket")

    archive = node_dir / "images" / "pause.tar"
    write_image_archive(pause_binary(log), "/pause", PAUSE_IMAGE, archive)
    import_image(node_dir, archive)

    pki = cluster.dir / "pki"
    reissue_apiserver_certificate(pki, gateway)
    api_port = cluster.state["ports"]["kube-apiserver"]
    deadline = time.monotonic() + 90
    while gateway not in served_ip_names(api_port):
        if time.monotonic() > deadline:
            raise NodeError(f"kube-apiserver did not serve the re-issued certificate naming {gateway} within 90 s")
        time.sleep(1)
    issue_client_certificate(pki, f"system:node:{NODE_NAME}", "system:nodes", node_dir / "pki" / "kubelet-client")
    cluster.kubectl("create", "clusterrolebinding", "segment-webhook-local-node", "--clusterrole", "system:node",
                    "--user", f"system:node:{NODE_NAME}", check=False)
    kubeconfig = {
        "apiVersion": "v1", "kind": "Config", "current-context": "node",
        "clusters": [{"name": "local", "cluster": {"server": f"https://127.0.0.1:{api_port}",
                                                   "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": "kubelet", "user": {"client-certificate": str(node_dir / "pki" / "kubelet-client.crt"),
                                               "client-key": str(node_dir / "pki" / "kubelet-client.key")}}],
        "contexts": [{"name": "node", "context": {"cluster": "local", "user": "kubelet"}}],
    }
    (node_dir / "kubelet.kubeconfig").write_text(yaml.safe_dump(kubeconfig, sort_keys=False))

    proxy = cluster.start("apiserver-proxy", [sys.executable, str(Path(__file__).resolve()), "relay", gateway,
                                              str(PROXY_PORT), str(api_port)])
    cluster.wait_until("apiserver-proxy", proxy, lambda: _port_open(gateway, PROXY_PORT), "listening")

    port, healthz = local_cluster.free_port(), local_cluster.free_port()
    cluster.state["ports"]["kubelet-healthz"] = healthz
    state["kubelet_port"] = port
    cluster.save()
    (node_dir / "kubelet-config.yaml").write_text(yaml.safe_dump(
        kubelet_configuration(node_dir, gateway, port, healthz, pki / "ca.crt"), sort_keys=False))
    process = cluster.start("kubelet", [
        str(kubelet), "--config", str(node_dir / "kubelet-config.yaml"),
        "--kubeconfig", str(node_dir / "kubelet.kubeconfig"),
        "--root-dir", str(node_dir / "kubelet"), "--cert-dir", str(node_dir / "kubelet" / "pki"),
        "--hostname-override", NODE_NAME, "--node-ip", gateway, "--v", "2",
    ])
    local_cluster.START_TIMEOUT.setdefault("kubelet", READY_TIMEOUT)
    cluster.wait_until("kubelet", process, lambda: node_ready(cluster, NODE_NAME), "reporting its Node Ready")
    state["seconds"] = round(time.monotonic() - started, 1)
    cluster.save()


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, port)) == 0


def node_ready(cluster: LocalCluster, name: str) -> bool:
    """True when Node ``name`` has Ready=True and no ``node.kubernetes.io/not-ready`` taint."""
    done = cluster.kubectl("get", "node", name, "-o", "json", check=False)
    if done.returncode != 0:
        return False
    node = json.loads(done.stdout)
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])
    tainted = any(t["key"] == "node.kubernetes.io/not-ready" for t in node["spec"].get("taints") or [])
    return ready and not tainted


# ------------------------------------------------------------------------------------------- down
#: What ``ctr tasks delete`` says of a task whose process and shim are gone (containerd 1.7's
#: ``failed to load task from <id>: no running task found``): nothing is left to delete.
TASK_GONE = "no running task found"


def drain(cluster: LocalCluster) -> None:
    """Before the processes stop: stop the kubelet (it would restart what is killed), then kill
    and delete every task and container of this containerd, recording their network namespaces
    in ``state["node"]["netns"]``. Errors are printed, not raised (``down`` goes on)."""
    state = cluster.state.get("node") or {}
    node_dir = Path(state.get("dir", cluster.dir / "node"))
    cluster.stop_component("kubelet")
    if "containerd" not in cluster.state.get("components", []):
        return
    try:
        containers = ctr(node_dir, "containers", "list", "--quiet", check=False, timeout=60).stdout.split()
        netns = set(state.get("netns", []))
        for container in containers:
            info = ctr(node_dir, "containers", "info", container, check=False, timeout=60)
            try:
                spec = json.loads(info.stdout).get("Spec") or {}
            except ValueError:
                continue
            for namespace in (spec.get("linux") or {}).get("namespaces") or []:
                path = namespace.get("path") or ""
                if namespace.get("type") == "network" and Path(path).is_relative_to(node_dir):
                    netns.add(path)
        state["netns"] = sorted(netns)
        cluster.save()
        for task in ctr(node_dir, "tasks", "list", "--quiet", check=False, timeout=60).stdout.split():
            ctr(node_dir, "tasks", "kill", "--signal", "SIGKILL", task, check=False, timeout=60)
        started = time.monotonic()
        deadline = started + 30
        for task in ctr(node_dir, "tasks", "list", "--quiet", check=False, timeout=60).stdout.split():
            # a task listed whose shim is already gone says "no running task found" on delete: it is
            # deleted (retrying it waited out the whole 30 s in every node teardown, issue 35)
            while (deleted := ctr(node_dir, "tasks", "delete", task, check=False, timeout=60)).returncode != 0 \
                    and TASK_GONE not in deleted.stderr and time.monotonic() < deadline:
                time.sleep(0.5)
            if deleted.returncode != 0 and TASK_GONE not in deleted.stderr:
                print(f"down: node: task {task} not deleted: {deleted.stderr.strip()[:200]}", file=sys.stderr)
        if time.monotonic() - started > 5:
            print(f"down: node: deleting the tasks took {time.monotonic() - started:.1f} s", file=sys.stderr)
        for container in containers:
            ctr(node_dir, "containers", "delete", container, check=False, timeout=60)
    except (NodeError, subprocess.TimeoutExpired, OSError) as error:
        print(f"down: node: {error}", file=sys.stderr)


def shim_pids(node_dir: Path) -> list[int]:
    """Processes whose command line names this node's containerd socket (its runc shims)."""
    address = str(containerd_socket(node_dir)).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if address in words and b"-address" in words:
            found.append(int(entry.name))
    return found


def mounts_under(directory: Path) -> list[str]:
    """Mount points at or below ``directory`` (``/proc/self/mountinfo``), deepest first."""
    prefix = str(directory.resolve())
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return sorted(set(points), key=len, reverse=True)


def cleanup(cluster: LocalCluster) -> list[str]:
    """After the processes stopped: kill this containerd's shims still alive, remove the recorded
    network namespaces, unmount everything under ``DIR/node``, remove the kubelet's log links into
    it and delete the bridge. Returns what is left (expected: nothing)."""
    state = cluster.state.get("node")
    if not state:
        return []
    node_dir = Path(state["dir"])
    for pid in shim_pids(node_dir):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for path in state.get("netns", []):
        if Path(path).is_relative_to(node_dir) and Path(path).exists():
            run(["umount", path], check=False)
            Path(path).unlink(missing_ok=True)
    for point in mounts_under(node_dir):
        run(["umount", "-l", point], check=False)
    if CONTAINER_LOG_LINKS.is_dir():
        logs = str((node_dir / "pod-logs").resolve())
        for link in CONTAINER_LOG_LINKS.iterdir():
            if link.is_symlink() and os.readlink(link).startswith(logs + "/"):
                link.unlink()
    if state.get("bridge"):
        run(["ip", "link", "delete", state["bridge"]], check=False)
    for directory in made_cgroups(state):  # empty once every container is deleted
        _rmdir(directory)
    return leftovers(cluster)


def made_cgroups(state: dict[str, Any]) -> list[Path]:
    """The ``k8s.io`` cgroup directories that exist now and did not before ``up``."""
    before = set(state.get("cgroups_before", []))
    return [path for path in cgroup_dirs() if str(path) not in before]


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError as error:
        print(f"down: node: cannot remove cgroup {path}: {error.strerror}", file=sys.stderr)


def leftovers(cluster: LocalCluster) -> list[str]:
    """What of the node is still there: shims, network namespaces, mounts, the bridge."""
    state = cluster.state.get("node") or {}
    if not state:
        return []
    node_dir = Path(state["dir"])
    left = [f"process {pid}" for pid in shim_pids(node_dir)]
    left += [f"netns {path}" for path in state.get("netns", []) if Path(path).exists()]
    left += [f"mount {point}" for point in mounts_under(node_dir)]
    if state.get("bridge") and run(["ip", "link", "show", state["bridge"]], check=False).returncode == 0:
        left.append(f"interface {state['bridge']}")
    left += [f"cgroup {path}" for path in made_cgroups(state)]
    return left


def main(argv: list[str]) -> int:
    """``node.py relay HOST PORT TARGET_PORT`` (the ``apiserver-proxy`` component)."""
    if len(argv) == 4 and argv[0] == "relay":
        return relay(argv[1], int(argv[2]), int(argv[3]))
    print("usage: node.py relay HOST PORT TARGET_PORT", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

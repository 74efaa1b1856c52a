"""One way to reach the API server: a ``kubernetes.client.ApiClient`` from a kubeconfig file or
from the pod's in-cluster service account. Shared by the live Topology catalog and the controller."""

from __future__ import annotations

import os

import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from webhook.cluster.api_server import client_retries
from webhook.errors import SegmentWebhookError
from webhook.text.yamltext import yaml_error_text

IN_CLUSTER_SOURCE = "in-cluster service account (KUBERNETES_SERVICE_HOST, token, ca.crt)"


class KubeconfigError(SegmentWebhookError, ValueError):
    """No usable configuration: the message names the source that failed (the kubeconfig path, or
    the in-cluster service account) and what is wrong with it."""


def api_client_from_kubeconfig(path: str | None) -> k8s_client.ApiClient:
    """An API client from the kubeconfig file ``path``, or, when ``path`` is None, from the pod's
    in-cluster configuration (``kubernetes.config.load_incluster_config``: the service account
    token and CA, ``KUBERNETES_SERVICE_HOST``/``_PORT``).

    The client does not retry a connection that cannot be made or a TLS failure at once
    (:func:`webhook.cluster.api_server.client_retries`): its callers retry those with back-off.

    Raises :class:`KubeconfigError` naming the source when the configuration cannot be loaded.
    """
    configuration = k8s_client.Configuration()
    configuration.retries = client_retries()
    if path is not None and not os.path.lexists(os.path.expanduser(path)):
        # the client's own words are "Invalid kube-config file. No configuration found."
        raise KubeconfigError(f"cannot load kubeconfig {path!r}: no such file; fix: name a kubeconfig file "
                              "(kubectl config view --raw --minify > FILE)")
    try:
        if path is None:
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            k8s_config.load_kube_config(config_file=path, client_configuration=configuration)
    except (k8s_config.ConfigException, OSError, TypeError, ValueError, AttributeError, yaml.YAMLError) as exc:
        source = IN_CLUSTER_SOURCE if path is None else f"kubeconfig {path!r}"
        # The client's own message for a file that is not a kubeconfig mapping is a Python
        # internal one ("'str' object does not support item assignment"): say what is wrong.
        if isinstance(exc, yaml.YAMLError) and path is not None:
            # the file is not YAML: the line, the problem and the fix, as for a manifest
            why = yaml_error_text(exc, _text_of(path))
        elif isinstance(exc, OSError) and exc.strerror:  # "[Errno 21] Is a directory: '/x'": the reason alone
            why = f"{exc.strerror}; fix: name a kubeconfig file (kubectl config view --raw --minify > FILE)"
        elif isinstance(exc, (k8s_config.ConfigException, OSError, yaml.YAMLError)):
            why = str(exc)
        else:
            why = "not a kubeconfig (a YAML mapping with clusters, users and contexts)"
        raise KubeconfigError(f"cannot load {source}: {why}") from exc
    return k8s_client.ApiClient(configuration)


def _text_of(path: str) -> str:
    """The text of the file at ``path`` (undecodable bytes replaced), ``""`` when it cannot be read:
    the line a YAML error points at is shown from it."""
    try:
        with open(path, encoding="utf-8", errors="replace") as stream:
            return stream.read()
    except OSError:
        return ""


def main(argv: list[str]) -> int:
    """``python -m webhook.cluster.kubeconfig [PATH]``: exit 0 when an API client can be built
    from the kubeconfig ``PATH`` (no argument or ``""``: the in-cluster configuration), else print
    the :class:`KubeconfigError` message on stderr and exit 2.

    ``serve`` runs this in a child process to check its configuration before gunicorn forks: the
    kubernetes client imports urllib3, and urllib3 imported in gunicorn's master keeps the ``ssl``
    classes that gevent's monkey-patching replaces in each worker, so every TLS request of the
    worker's Topology watch then failed with RecursionError (found against the real
    kube-apiserver, hack/local-cluster.sh).
    """
    import sys

    path = argv[0] if argv and argv[0] else None
    try:
        api_client_from_kubeconfig(path)
    except KubeconfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))

"""The controller reads every answer it asks for unparsed (``_preload_content=False``) before it
hands the connection back: urllib3 reuses a released connection, and an unread body is then read as
the next answer's status line (``BadStatusLine('...{"kind":"Job"...')``, seen beside a live Kueue
when the advisory controller patched ``segments.dev/gang-state`` on Jobs, issue 36)."""

from __future__ import annotations

import threading

from kubernetes import client as k8s_client
from prometheus_client import CollectorRegistry, Counter

from webhook.cluster.api_server import ApiServerReachability, JsonClient
from webhook.controller.patches import PatchSender
from webhook.gating.decision import StrandedPod
from webhook.gating.reconcile import ObjectRef, OwnerPatch


class Answer:
    """An unparsed answer that remembers whether its body was read before its release."""

    def __init__(self) -> None:
        self.read = False
        self.released_unread = False

    @property
    def data(self) -> bytes:
        self.read = True
        return b"{}"

    def release_conn(self) -> None:
        self.released_unread = not self.read


class Api:
    def __init__(self) -> None:
        self.answers: list[Answer] = []

    def _answer(self, *args, **kwargs) -> Answer:
        assert kwargs["_preload_content"] is False
        self.answers.append(Answer())
        return self.answers[-1]

    patch_namespaced_custom_object = delete_namespaced_pod = _answer


def sender() -> tuple[PatchSender, Api]:
    api = Api()
    cfg = k8s_client.Configuration()
    cfg.host = "https://127.0.0.1:1"
    client = JsonClient(k8s_client.ApiClient(cfg), ApiServerReachability(cfg.host))
    client.custom = api  # type: ignore[assignment]
    client.core = api  # type: ignore[assignment]
    out = PatchSender(client, Counter("errors", "e", ["code"], registry=CollectorRegistry()), threading.Event())
    return out, api


def test_the_owner_annotation_answer_is_read_before_its_connection_is_released():
    patches, api = sender()
    target = ObjectRef("batch/v1", "Job", "default", "trace-0012", "uid-1")
    assert patches.annotate_owner(OwnerPatch(target, "jobs", "gang default/trace-0012: fits now"))
    [answer] = api.answers
    assert (answer.read, answer.released_unread) == (True, False)


def test_the_stranded_pod_delete_answer_is_read_before_its_connection_is_released():
    patches, api = sender()
    assert patches.delete_stranded(StrandedPod("default", "p-0", "uid-p", "node-1", "0/1 nodes are available", "2026-12-07T07:00:00Z", True))
    [answer] = api.answers
    assert (answer.read, answer.released_unread) == (True, False)

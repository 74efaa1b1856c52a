"""dispatch / review never raise for any JSON value and never answer other than 200/400/403
(DESIGN.md §5: denials never become an HTTP 5xx)."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import load_example, make_request
from webhook.admission.config import AdmissionSettings
from webhook.admission.kinds import dispatch
from webhook.admission.review import review
from webhook.topology.objects import default_catalog

CATALOG = default_catalog()
SETTINGS = AdmissionSettings(platform_users=frozenset({"platform"}), default_topology="cluster-topology")
EXAMPLE_NAMES = ["pytorchjob-tp4.yaml", "pytorchjob-zone-and-rack.yaml", "lws-segmented.yaml", "distributedworkload-native.yaml"]
EXAMPLES = {name: load_example(name) for name in EXAMPLE_NAMES}
POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "p", "labels": {"training.kubeflow.org/replica-type": "worker",
                                            "training.kubeflow.org/replica-index": "3",
                                            "leaderworkerset.sigs.k8s.io/worker-index": "2"},
                    "annotations": {"kai.scheduler/segment-size": "4", "leaderworkerset.sigs.k8s.io/size": "5"}}}
EXAMPLES["pod"] = POD

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**40, max_value=2**40) | st.floats(allow_nan=False)
    | st.text(max_size=12) | st.sampled_from(["4", "", " 4", "LeaderExcluded", "cluster-topology", "kubernetes.io/hostname"])
    | st.text(alphabet="0123456789", min_size=19, max_size=6000),  # beyond int64 and Python's 4,300-digit limit
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


def paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from paths(v, prefix + (i,))


@st.composite
def mutated_objects(draw):
    name = draw(st.sampled_from(sorted(EXAMPLES)))
    obj = copy.deepcopy(EXAMPLES[name])
    all_paths = [p for p in paths(obj) if p]
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(all_paths))
        node = obj
        try:
            for part in path[:-1]:
                node = node[part]
            node[path[-1]] = draw(json_values)
        except (KeyError, IndexError, TypeError):
            pass
    return name, obj


def check(decision):
    assert decision.code in (200, 400, 403)
    assert isinstance(decision.patch, list)
    if not decision.allowed:
        assert decision.patch == [] and decision.message
    assert all(len(w) <= 120 for w in decision.warnings)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_objects(), st.sampled_from(["CREATE", "UPDATE"]), st.sampled_from(["platform", "alice"]))
def test_mutated_examples_never_raise(named, operation, user):
    name, obj = named
    request = make_request(obj, operation=operation, old=EXAMPLES[name] if operation == "UPDATE" else None, user=user)
    request["kind"] = make_request(EXAMPLES[name])["kind"]  # exercise the handler even if apiVersion/kind were mutated
    check(review(request, CATALOG, SETTINGS))
    check(review(request, CATALOG, SETTINGS, mutate=False))


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_any_request_value_never_raises(value):
    check(dispatch(value, CATALOG, SETTINGS, mutate=True))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([("kubeflow.org", "PyTorchJob"), ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
                        ("segments.dev", "DistributedWorkload"), ("", "Pod")]),
       json_values, json_values, st.sampled_from(["CREATE", "UPDATE", "DELETE", None, 7]))
def test_any_object_of_a_handled_kind_never_raises(group_kind, obj, old, operation):
    request = {"uid": "u", "kind": {"group": group_kind[0], "version": "v1", "kind": group_kind[1]},
               "operation": operation, "object": obj, "oldObject": old, "userInfo": {"username": "platform"}}
    check(dispatch(request, CATALOG, SETTINGS, mutate=True))


def test_unexpected_handler_exception_is_not_disguised_as_a_user_error(monkeypatch):
    """A bug must surface (the HTTP envelope turns it into status.code 500, tested in
    test_http_app.py), not masquerade as a 400 'malformed object' blaming the user."""
    from webhook.admission import kinds
    def boom(*args, **kwargs):
        raise RuntimeError("bug")

    monkeypatch.setitem(kinds.HANDLERS, ("kubeflow.org", "PyTorchJob"), boom)
    with pytest.raises(RuntimeError, match="bug"):
        dispatch(make_request(EXAMPLES["pytorchjob-tp4.yaml"]), CATALOG, SETTINGS, mutate=True)

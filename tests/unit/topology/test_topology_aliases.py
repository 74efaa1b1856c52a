"""KAI's topology level aliases (DESIGN.md §5; issue 37 item 1).

Facts from KAI-Scheduler d5bc503: ``pkg/apis/kai/v1alpha1/topology_types.go`` (``TopologyLevel.Alias``,
optional, a label key by the CRD's pattern); ``pkg/scheduler/api/topology_info/topology_info.go``
``ResolveAliases`` (an alias resolves to its level's nodeLabel, anything else passes through: "raw
label keys always keep working"); ``pkg/admission/webhook/topologyhooks/topology_validator.go``
``validateAliases`` (aliases unique within a Topology, none equal to a nodeLabel); the example
``examples/topology-aliases/topology-aliases.yaml`` (Topology ``network``: ``accelerator.nvidia.com/rack``
alias ``rack``, ``kubernetes.io/hostname`` alias ``node``), used here as written.
"""

from __future__ import annotations

import jsonpatch
import pytest

from tests.conftest import SEG_REQ, SIZE, TOPO, WL_PREF, WL_REQ, make_request
from webhook.admission import workload_api
from webhook.admission.config import AdmissionSettings
from webhook.admission.review import review
from webhook.kube.nodes import Node
from webhook.placement.cluster_index import ClusterIndex
from webhook.topology.objects import StaticTopologyCatalog, TopologyError, load_topology_text

KAI_EXAMPLE = """\
apiVersion: kai.scheduler/v1alpha1
kind: Topology
metadata:
  name: network
spec:
  levels:
    - nodeLabel: accelerator.nvidia.com/rack
      alias: rack
    - nodeLabel: kubernetes.io/hostname
      alias: node
"""
RACK, HOST = "accelerator.nvidia.com/rack", "kubernetes.io/hostname"
[NETWORK] = load_topology_text(KAI_EXAMPLE)
CATALOG = StaticTopologyCatalog([NETWORK])
K_REQ = "kueue.x-k8s.io/podset-required-topology"
K_SLICE, K_SIZE = "kueue.x-k8s.io/podset-slice-required-topology", "kueue.x-k8s.io/podset-slice-size"
WORKER_ANNOTATIONS = 'spec.template.metadata.annotations'


def job(root_level: str | None = "rack", segment_level: str | None = None, size: str | None = None,
        labels: dict | None = None) -> dict:
    """An Indexed Job of 8 pods against Topology ``network``."""
    root = {TOPO: "network"}
    if root_level is not None:
        root[WL_REQ] = root_level
    template: dict[str, str] = {}
    if size is not None:
        template[SIZE] = size
    if segment_level is not None:
        template[SEG_REQ] = segment_level
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "aliased", "namespace": "default", "annotations": root, "labels": labels or {}},
            "spec": {"completionMode": "Indexed", "completions": 8, "parallelism": 8,
                     "template": {"metadata": {"annotations": template},
                                  "spec": {"restartPolicy": "Never", "containers": [{"name": "w", "image": "i"}]}}}}


def admitted(obj: dict, decision) -> dict:
    return jsonpatch.apply_patch(obj, decision.patch)


def test_the_model_reads_kai_example_aliases():
    assert NETWORK.levels == (RACK, HOST)
    assert NETWORK.label_of("rack") == RACK and NETWORK.label_of("node") == HOST
    assert NETWORK.label_of(RACK) == RACK  # raw label keys pass through
    assert NETWORK.label_of("row") == "row"
    assert NETWORK.depth("rack") == 0 and NETWORK.depth("node") == 1 and NETWORK.depth(HOST) == 1
    assert NETWORK.level_names() == ("accelerator.nvidia.com/rack (alias rack)",
                                     "kubernetes.io/hostname (alias node)")


def test_a_root_level_named_by_its_alias_is_admitted():
    # before: denied, rule unknown-level ("not a level of topology "network"")
    d = review(make_request(job(root_level="rack")), CATALOG, AdmissionSettings())
    assert d.allowed, d.message
    assert d.warnings == []
    assert admitted(job(), d)["metadata"]["annotations"][WL_REQ] == "rack"  # KAI resolves it: left as written


def test_a_segment_level_named_by_its_alias_is_admitted():
    obj = job(root_level="rack", segment_level="node", size="4")
    d = review(make_request(obj), CATALOG, AdmissionSettings())
    assert d.allowed, d.message
    template = admitted(obj, d)["spec"]["template"]["metadata"]["annotations"]
    assert template[SEG_REQ] == "node" and template[SIZE] == "4" and template[TOPO] == "network"


def test_alias_and_label_of_one_level_compare_as_equal():
    # workload preferred RACK (label) == required "rack" (alias): equal levels are fine (§5)
    obj = job(root_level="rack")
    obj["metadata"]["annotations"][WL_PREF] = RACK
    d = review(make_request(obj), CATALOG, AdmissionSettings())
    assert d.allowed, d.message
    # a segment named by the node label inside a workload named by its alias: nested
    d = review(make_request(job(root_level="rack", segment_level=HOST, size="4")), CATALOG, AdmissionSettings())
    assert d.allowed, d.message
    # and swapped by alias: the segment level "rack" is broader than the workload's "node"
    d = review(make_request(job(root_level="node", segment_level="rack", size="4")), CATALOG, AdmissionSettings())
    assert [v.rule for v in d.violations] == ["segment-required-broader-than-workload"]


def test_the_unknown_level_denial_lists_each_alias_beside_its_level():
    d = review(make_request(job(root_level="row")), CATALOG, AdmissionSettings())
    assert d.message == (
        'metadata.annotations["kai.scheduler/topology-required-placement"] = "row": not a level of topology '
        '"network" (rule unknown-level); fix: use one of its levels, broadest first: accelerator.nvidia.com/rack '
        '(alias rack), kubernetes.io/hostname (alias node).')


def test_the_kueue_target_writes_the_node_label_kueue_knows():
    obj = job(root_level="rack", segment_level="node", size="4")
    d = review(make_request(obj), CATALOG, AdmissionSettings(target="kueue"))
    assert d.allowed, d.message
    template = admitted(obj, d)["spec"]["template"]["metadata"]["annotations"]
    assert {k: v for k, v in template.items() if k.startswith("kueue.x-k8s.io/")} == {
        K_REQ: RACK, K_SLICE: HOST, K_SIZE: "4"}


def test_the_workload_api_target_gets_node_labels():
    obj = job(root_level="rack", segment_level="node", size="4")
    settings = AdmissionSettings(target="workload-api")
    d = review(make_request(obj), CATALOG, settings)
    assert d.allowed, d.message
    template = admitted(obj, d)["spec"]["template"]["metadata"]["annotations"]
    assert template["segments.dev/topology-required-placement"] == RACK
    assert template["segments.dev/segment-topology-required-placement"] == HOST
    pods = [{"metadata": {"name": f"aliased-{i}", "labels": {"kai.scheduler/segment-index": str(i // 4)},
                          "annotations": template}} for i in range(8)]
    shape = workload_api.gang_shape("default", "default/aliased", pods)
    keys_written = sorted({c["key"] for obj in shape.objects or [] for c in
                           obj["spec"].get("schedulingConstraints", {}).get("topology", [])})
    assert keys_written == [RACK, HOST]


def test_no_segment_alias_writes_no_extra_gang_fact():
    obj = job(root_level="rack", segment_level=HOST, size="4")
    d = review(make_request(obj), CATALOG, AdmissionSettings(target="workload-api"))
    template = admitted(obj, d)["spec"]["template"]["metadata"]["annotations"]
    assert "segments.dev/segment-topology-required-placement" not in template


def test_the_engine_resolves_an_alias_to_its_depth():
    nodes = [Node(name=f"n{i}", labels={RACK: f"r{i // 2}", HOST: f"n{i}"}, allocatable={"cpu": 1000},
                  free={"cpu": 1000}) for i in range(4)]
    index = ClusterIndex(nodes, NETWORK)
    assert index.depth_of("rack") == index.depth_of(RACK) == 1
    assert index.depth_of("node") == index.depth_of(HOST) == 2


@pytest.mark.parametrize("levels, message", [
    ("[{nodeLabel: a.io/x, alias: r}, {nodeLabel: b.io/y, alias: r}]",
     '<text>: Topology "t": alias "r" is given to more than one level, and KAI refuses the Topology (an alias '
     'names exactly one level); fix: give each level its own alias, none equal to a nodeLabel'),
    ("[{nodeLabel: a.io/x, alias: b.io/y}, {nodeLabel: b.io/y}]",
     '<text>: Topology "t": alias "b.io/y" equals a level\'s nodeLabel, and KAI refuses the Topology (an alias '
     'names exactly one level); fix: give each level its own alias, none equal to a nodeLabel'),
    ("[{nodeLabel: a.io/x, alias: 'rack!'}]",
     '<text>: Topology "t": spec.levels[0].alias "rack!" is not a valid alias (a label key, e.g. rack); '
     'fix: rename it or remove it'),
])
def test_conflicting_aliases_are_refused_as_kai_refuses_them(levels, message):
    text = f"apiVersion: kai.scheduler/v1alpha1\nkind: Topology\nmetadata: {{name: t}}\nspec: {{levels: {levels}}}\n"
    with pytest.raises(TopologyError) as caught:
        load_topology_text(text)
    assert str(caught.value) == message


@pytest.mark.parametrize("levels, message", [
    # issue 37 "a misspelled nodelabel field in a Topology level is not named"
    ("[{nodelabel: a.io/x}]",
     '<text>: Topology "t": spec.levels[0] has field "nodelabel", which a Topology level does not have '
     '(nodeLabel, alias); fix: rename nodelabel to nodeLabel'),
    ("[{nodeLabel: a.io/x, Alias: x}]",
     '<text>: Topology "t": spec.levels[0] has field "Alias", which a Topology level does not have '
     '(nodeLabel, alias); fix: rename Alias to alias'),
    # trial 2026-12-07: "alais" was ignored without a word, and workloads using the alias were denied
    ("[{nodeLabel: a.io/x, alais: x}]",
     '<text>: Topology "t": spec.levels[0] has field "alais", which a Topology level does not have '
     '(nodeLabel, alias); fix: rename alais to alias'),
    ("[{nodeLabels: a.io/x}]",
     '<text>: Topology "t": spec.levels[0] has field "nodeLabels", which a Topology level does not have '
     '(nodeLabel, alias); fix: rename nodeLabels to nodeLabel'),
    ("[{label: a.io/x}]",
     '<text>: Topology "t": spec.levels[0] has field "label", which a Topology level does not have '
     '(nodeLabel, alias); fix: remove label; set nodeLabel'),
    # issue 37 "review accepts a Topology whose first level is kubernetes.io/hostname"
    ("[{nodeLabel: kubernetes.io/hostname}, {nodeLabel: a.io/x}]",
     '<text>: Topology "t": spec.levels[0].nodeLabel kubernetes.io/hostname is not the lowest level, and '
     'Kubernetes refuses the Topology (its CRD: kubernetes.io/hostname can only be the lowest level); '
     'fix: move kubernetes.io/hostname to the end of spec.levels'),
])
def test_a_level_kai_would_not_read_is_named(levels, message):
    text = f"apiVersion: kai.scheduler/v1alpha1\nkind: Topology\nmetadata: {{name: t}}\nspec: {{levels: {levels}}}\n"
    with pytest.raises(TopologyError) as caught:
        load_topology_text(text)
    assert str(caught.value) == message


def test_two_topologies_of_one_name_that_differ_in_aliases_show_the_aliases(tmp_path):
    # trial 2026-12-07: the message printed two identical level lists (only the aliases differed)
    from webhook.planning import manifests
    one, other = tmp_path / "a.yaml", tmp_path / "b.yaml"
    one.write_text("kind: Topology\nmetadata: {name: t}\nspec: {levels: [{nodeLabel: a.io/zone}, {nodeLabel: a.io/rack}]}\n")
    other.write_text("kind: Topology\nmetadata: {name: t}\nspec: {levels: [{nodeLabel: a.io/zone, alias: zone}, "
                     "{nodeLabel: a.io/rack, alias: rack}]}\n")
    with pytest.raises(manifests.ManifestError) as raised:
        manifests.load_topology_files([str(one), str(other)])
    assert str(raised.value) == (
        f'{other}: Topology "t" is defined twice with different levels or aliases (also at {one}: a.io/zone, a.io/rack; '
        'here: a.io/zone (alias zone), a.io/rack (alias rack)); fix: keep one of them or rename one')

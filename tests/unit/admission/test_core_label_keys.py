"""``check_label_keys`` (DESIGN.md §5, rule placement-key-as-label) finds the labels beside each
annotation map by the map's container path: through mappings and list items, and not through
missing, null or mistyped steps."""

from webhook.admission.constraints import check_label_keys
from webhook.admission.reading import AnnotationMap
from webhook.admission.verdict import Decision

SIZE = "kai.scheduler/segment-size"


def _fields(obj, maps):
    decision = Decision(kind="JobSet")
    check_label_keys(obj, maps, decision)
    return [(v.rule, v.field) for v in decision.violations]


def test_labels_found_at_the_root_and_through_a_list_item():
    obj = {"metadata": {"labels": {SIZE: "4"}},
           "spec": {"replicatedJobs": [{"template": {"metadata": {"labels": {SIZE: "2", "app": "x"}}}}]}}
    maps = [AnnotationMap("metadata.annotations", (), {}),
            AnnotationMap("spec.replicatedJobs[0].template.metadata.annotations",
                          ("spec", "replicatedJobs", "0", "template"), {})]
    assert _fields(obj, maps) == [
        ("placement-key-as-label", 'metadata.labels["kai.scheduler/segment-size"]'),
        ("placement-key-as-label", 'spec.replicatedJobs[0].template.metadata.labels["kai.scheduler/segment-size"]'),
    ]


def test_missing_null_and_mistyped_steps_find_no_labels():
    maps = [AnnotationMap("a.metadata.annotations", ("spec", "jobs", "3", "template"), {})]
    assert _fields({"spec": {"jobs": [{"template": {"metadata": {"labels": {SIZE: "2"}}}}]}}, maps) == []  # no item 3
    assert _fields({"spec": None}, maps) == []
    assert _fields({"spec": {"jobs": {"3": {"template": {"metadata": {"labels": {SIZE: "2"}}}}}}}, maps) == [
        ("placement-key-as-label", 'a.metadata.labels["kai.scheduler/segment-size"]')]  # a map keyed "3"
    assert _fields({"spec": "text"}, maps) == []
    root = [AnnotationMap("metadata.annotations", (), {})]
    assert _fields({"metadata": None}, root) == []
    assert _fields({"metadata": {"labels": None}}, root) == []
    assert _fields({"metadata": {"labels": ["kai.scheduler/segment-size"]}}, root) == []
    assert _fields({"metadata": ["labels"]}, root) == []

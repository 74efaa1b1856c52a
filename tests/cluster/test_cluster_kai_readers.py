"""Classes A-E of DESIGN.md §4.5 through the real kube-apiserver and kubectl (marker ``cluster``).

Each ``tests/data/manifests/kai-reader-class-*.yaml`` is created with kubectl and compared with
``segment-webhook review`` of the same file: an admitted one is stored with exactly the values
review's patch writes and the same ``Warning:`` lines (and re-reviews to an empty patch); a denied
one fails with kubectl's stderr equal to review's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.cluster.test_cluster_admission import create_and_compare, review_flags, topologies  # noqa: F401 (fixture)
from tests.support import paths
from tests.support.cluster_support import review, write_manifest

pytestmark = pytest.mark.cluster

MANIFESTS = paths.DATA / "manifests"
#: manifest → allowed (True) or denied (False), as DESIGN.md §4.5 states for its class
CLASSES = {
    "kai-reader-class-a-pytorchjob.yaml": True,
    "kai-reader-class-a-no-topology.yaml": False,
    "kai-reader-class-b-distributedworkload.yaml": True,
    "kai-reader-class-c-raycluster-no-topology.yaml": False,
    "kai-reader-class-c-raycluster-with-topology.yaml": True,
    "kai-reader-class-d-ray-head.yaml": False,
    "kai-reader-class-e-jobset-user-keys.yaml": False,
    "kai-reader-class-e-jobset-same-keys.yaml": True,
}


def test_each_class_is_stored_or_denied_as_review_says(kubectl, topologies, tmp_path, capsys):  # noqa: F811
    kubectl("create", "namespace", "team-a")
    stored_count = denied_count = 0
    for name, allowed in CLASSES.items():
        obj = yaml.safe_load((MANIFESTS / name).read_text(encoding="utf-8"))
        if allowed:
            stored = create_and_compare(kubectl, tmp_path, topologies, Path(name).stem, obj)
            assert stored["metadata"]["name"] == obj["metadata"]["name"]
            stored_count += 1
            continue
        path = write_manifest(tmp_path, Path(name).stem, obj)
        real = kubectl("create", "-f", str(path))
        offline = review("-f", str(path), *review_flags(topologies))
        assert real.returncode == 1 and offline.returncode == 1, f"{name}: {real.stderr} / {offline.stderr}"
        assert real.stderr.strip() == offline.stderr.strip(), name
        denied_count += 1
    with capsys.disabled():
        print(f"\ncluster: classes A-E: {stored_count} stored as review patches them, {denied_count} denied with "
              "review's message")
    assert (stored_count, denied_count) == (4, 4)

"""The YAML loader of the package: PyYAML's libyaml ``CSafeLoader`` (``SafeLoader`` when libyaml
is missing) with timestamps read as the text they were written as, as kubectl reads YAML.

Every YAML reader of the package builds on :class:`TextTimestampLoader`: the manifest reader
(``webhook.manifests.UniqueKeyLoader`` adds kubectl's duplicate-key rule) and
:func:`webhook.core.topology.load_topology_text`. PyYAML's own loaders are left untouched.
"""

from __future__ import annotations

from typing import Any

import yaml

try:
    _BaseLoader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _BaseLoader = yaml.SafeLoader

TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


def _timestamp_as_text(loader: Any, node: Any) -> str:
    """A YAML timestamp (``2024-01-01``, ``2024-01-01T10:00:00Z``) as the text it was written as.

    kubectl converts YAML to JSON with go-yaml v2, which keeps timestamp-like scalars as strings
    when decoding into an untyped value (its decoder says so: "for backward compatibility reasons
    we set it as a string"), so the API server, and the webhook behind it, receive the string
    ``"2024-01-01T10:00:00Z"``. PyYAML would build a ``datetime``; reading the text instead keeps
    ``review`` and ``place`` answering what the cluster would (an unquoted date in an annotation is
    a valid string there, not a type error)."""
    return loader.construct_scalar(node)


class TextTimestampLoader(_BaseLoader):  # type: ignore[misc,valid-type]
    """``CSafeLoader`` (``SafeLoader`` without libyaml) that reads timestamps as text."""


TextTimestampLoader.add_constructor(TIMESTAMP_TAG, _timestamp_as_text)

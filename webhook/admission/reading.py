"""Reading a workload object: typed views of its annotation maps and checked fields.

Every reader validates before it reads: a value of the wrong JSON type is recorded as a
``malformed-object`` violation (status 400, :func:`webhook.admission.rules.malformed`) naming the field,
and the reader returns ``None``. Field paths look like
``spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/segment-size"]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from webhook.admission.rules import INT32_MAX, malformed, violate
from webhook.admission.verdict import Decision
from webhook.kube.core import OBJECT_FIELDS, OBJECT_META_FIELDS
from webhook.text.messages import UNSET, closest, join_field, key_field, key_text

# --------------------------------------------------------------------------------------------
# message helpers
# --------------------------------------------------------------------------------------------


class Sourced(NamedTuple):
    """A string value and the field path it was read from (for messages). Immutable (a named
    tuple: a few are made per review, and a tuple is the cheapest immutable record)."""

    value: str
    field: str


class AnnotationMap(NamedTuple):
    """The ``metadata.annotations`` of one object or PodTemplateSpec (immutable, a named tuple).

    ``field``: human path of the map (``metadata.annotations`` for the workload root);
    ``container``: JSON Pointer parts of the object that owns ``metadata`` (``()`` for the root);
    ``values``: the entries (all strings, validated).
    """

    field: str
    container: tuple[str, ...]
    values: Mapping[str, str]

    def get(self, key: str) -> Sourced | None:
        """The entry ``key`` with its field path, or ``None`` when absent."""
        if key in self.values:
            return Sourced(self.values[key], key_field(self.field, key))
        return None

    def has_any(self, *names: str) -> bool:
        """True when any of ``names`` is present."""
        return not self.values.keys().isdisjoint(names)


def get_mapping(parent: Mapping[str, Any], key: str, parent_field: str, decision: Decision, *, required: bool = False) -> Mapping[str, Any] | None:
    """``parent[key]`` when it is a mapping; ``{}``-like ``None`` when absent/null (a denial
    naming the field when ``required``); a 400 denial naming the field when it is another type."""
    value = parent.get(key)
    if isinstance(value, (dict, Mapping)):
        return value
    if value is None:
        if required:
            malformed(decision, join_field(parent_field, key), UNSET if key not in parent else None,
                      "an object (it is required)")
        return None
    malformed(decision, join_field(parent_field, key), value, "an object")
    return None


#: ``INT32_MAX`` (from rules): the largest value of an ``int32`` field: PyTorchJob ``replicas`` and
#: LWS ``size`` are int32 in their CRDs (``shared/crds``), and kube-apiserver checks that schema
#: only after mutating admission.


def get_int(parent: Mapping[str, Any], key: str, parent_field: str, decision: Decision, *, default: int | None,
            minimum: int = 0, maximum: int = INT32_MAX) -> int | None:
    """``parent[key]`` as an integer in ``[minimum, maximum]`` (``default`` when absent or null).
    Booleans, floats, strings and out-of-range numbers → 400 denial naming the field, returns
    ``None``. The int32 upper bound keeps every later computation small."""
    value = parent.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        malformed(decision, join_field(parent_field, key), value, f"an integer from {minimum} to {maximum}")
        return None
    return value


def read_string_map(owner: Mapping[str, Any], owner_field: str, map_name: str, decision: Decision) -> Mapping[str, str] | None:
    """Validate ``owner.metadata.<map_name>`` (``annotations`` or ``labels``) as a map of
    strings. Returns the map (``{}`` when ``metadata`` or the map is absent or null), or ``None``
    after a 400 denial naming the offending field (metadata not an object, map not an object,
    a value that is not a string: Kubernetes annotation and label values are always strings)."""
    meta = owner.get("metadata")
    if meta is None:
        return {}
    if not isinstance(meta, (dict, Mapping)):
        malformed(decision, join_field(owner_field, "metadata"), meta, "an object")
        return None
    values = meta.get(map_name)
    if values is None:
        return {}
    if isinstance(values, (dict, Mapping)):
        for k, v in values.items():
            if not (isinstance(k, str) and isinstance(v, str)):
                break
        else:
            return values  # every key and value a string: the common case
    map_field = join_field(join_field(owner_field, "metadata"), map_name)  # named by the denials below
    if not isinstance(values, (dict, Mapping)):
        malformed(decision, map_field, values, "a map of string keys to string values")
        return None
    for k, v in values.items():
        if not isinstance(k, str):  # a YAML date or number as the key: name the key, not its value
            malformed(decision, key_field(map_field, key_text(k)), k, "a string key (quote the key in YAML)")
        elif not isinstance(v, str):
            malformed(decision, key_field(map_field, k), v, "a string (quote it in YAML)")
    return None


def warn_misspelled_field(container: Mapping[Any, Any], container_field: str, expected: str,
                          defined: frozenset[str], decision: Decision) -> None:
    """Warning ``misspelled-field`` for each key of ``container`` not in ``defined`` (the fields of
    its schema: ``expected`` among them) that is a likely misspelling of the absent ``expected`` (:func:`webhook.text.messages.closest`: ``metdata``, ``Annotations``,
    ``annotation``): the API server drops (prunes) it, and the annotations it holds, the segment
    constraints among them, would be lost in silence (DESIGN.md §5). When the misspelled value holds
    a key that opts in, the warning is also listed in :attr:`Decision.lost_opt_ins` (kept when the
    object, as read, did not opt in)."""
    from webhook.admission.warning_rules import say
    from webhook.kube.kai_scheduler import OPT_IN_KEYS

    for key, value in container.items():
        # a field the object's schema defines is no misspelling: no string matching on the common case
        if isinstance(key, str) and key not in defined and closest(key, (expected,)) is not None:
            before = len(decision.warnings)
            say(decision, "misspelled-field", field=join_field(container_field, key), expected=expected)
            if len(decision.warnings) > before and any(k in repr(value) for k in OPT_IN_KEYS):
                decision.lost_opt_ins.append(decision.warnings[-1])


def read_annotations(owner: Mapping[str, Any], owner_field: str, container: tuple[str, ...], decision: Decision) -> AnnotationMap | None:
    """:func:`read_string_map` for ``annotations``, wrapped in an :class:`AnnotationMap`; a likely
    misspelling of an absent ``metadata`` or ``annotations`` gets warning ``misspelled-field``
    (:func:`warn_misspelled_field`)."""
    values = read_string_map(owner, owner_field, "annotations", decision)
    if values is None:
        return None
    meta = owner.get("metadata")
    if meta is None:
        warn_misspelled_field(owner, owner_field, "metadata", OBJECT_FIELDS, decision)
    elif isinstance(meta, Mapping) and meta.get("annotations") is None:
        warn_misspelled_field(meta, join_field(owner_field, "metadata"), "annotations", OBJECT_META_FIELDS, decision)
    return AnnotationMap(join_field(join_field(owner_field, "metadata"), "annotations"), container, values)


#: How a denial names the value a metadata field takes ("write one name").
_META_NOUN = {"name": "name", "namespace": "namespace name"}
_EXAMPLE_META = {"name": "train-job", "namespace": "team-a"}


def check_object_meta(obj: Mapping[str, Any], decision: Decision) -> bool:
    """The object's own ``metadata.name`` and ``metadata.namespace``, when set, are strings
    (Kubernetes ObjectMeta); another type is a 400 denial naming that field (``metadata.namespace
    = ["a"]``), so no request field built from it (``request.namespace``) is blamed instead.
    ``metadata`` that is not an object is :func:`read_string_map`'s to deny. Returns True when ok."""
    meta = obj.get("metadata")
    if not isinstance(meta, (dict, Mapping)):
        return True
    ok = True
    for key in ("name", "namespace"):
        value = meta.get(key)
        if value is not None and not isinstance(value, str):
            violate(decision, "malformed-object", f"metadata.{key}", value, f"the object's {key} must be a string",
                    f"write one {_META_NOUN[key]}, e.g. metadata.{key}: {_EXAMPLE_META[key]}")
            ok = False
    return ok

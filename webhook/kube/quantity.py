"""Kubernetes resource quantities, parsed exactly.

Rule source: Kubernetes apimachinery ``resource.Quantity`` (``ParseQuantity``): a signed decimal
number, then an optional suffix — binary SI (``Ki Mi Gi Ti Pi Ei``), decimal SI
(``n u m k M G T P E``) or a decimal exponent (``e3``, ``E-2``). Values are kept as
:class:`fractions.Fraction` (no floats); the engine compares integer milli-units.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache

from webhook.errors import SegmentWebhookError
from webhook.text.messages import json_type, quote

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
}
_QUANTITY_RE = re.compile(
    r"^(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)
#: Largest milli-value the engine handles (int64 arrays); larger values are clamped to it.
MAX_MILLI = 2**62


class QuantityError(SegmentWebhookError, ValueError):
    """A value is not a Kubernetes quantity (or a negative one where Kubernetes forbids it); the
    message quotes the value as JSON."""


#: Longest number part accepted in a quantity (Kubernetes' own parser keeps far fewer digits).
MAX_QUANTITY_DIGITS = 100

_EXPECTED = 'expected a string such as "500m" or "64Gi"'


def parse_quantity(value: object) -> Fraction:
    """Parse a Kubernetes quantity into an exact :class:`Fraction` of base units.

    ``value``: a string such as ``"500m"``, ``"64Gi"``, ``"1e3"``, ``"1.5"``, or an int (YAML
    ``cpu: 2``). Floats from YAML (``cpu: 1.5``) are taken through their decimal text.
    Returns e.g. ``Fraction(1, 2)`` for ``"500m"``, ``68719476736`` for ``"64Gi"``.
    Raises :class:`QuantityError` for anything else (``"1.5.2"``, ``"10 Gi"``, ``"abc"``, ``""``,
    ``null``, ``true``, an object); the message renders the value as JSON (``null``, ``true``).
    """
    if isinstance(value, bool) or value is None:
        raise QuantityError(f"{quote(value)} is not a quantity ({_EXPECTED})")
    if isinstance(value, str):
        return _parse_text(value)
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{quote(value)} is not a quantity (not a finite number; a JSON number too large to "
                                f"read, such as 1e400, reads as .inf too; {_EXPECTED})")
        value = repr(value)
    if not isinstance(value, str):
        raise QuantityError(f"{quote(value)} is not a quantity ({_EXPECTED}, got {json_type(value)})")
    return _parse_text(value)


@lru_cache(maxsize=65536)
def _parse_text(value: str) -> Fraction:
    """:func:`parse_quantity` of a string, cached: a cluster dump repeats a few hundred distinct
    quantities over tens of thousands of objects."""
    m = _QUANTITY_RE.match(value)
    if not m:
        raise QuantityError(f'{quote(value)} is not a Kubernetes quantity (examples: "500m", "2", "64Gi", "1e3"); '
                            "fix: write a number with an optional suffix (m, k, M, G, Ki, Mi, Gi, Ti) and no spaces")
    if len(m.group("num")) > MAX_QUANTITY_DIGITS:
        # Python refuses to convert more than 4,300 digits; no real quantity comes close
        raise QuantityError(f"{quote(value, 24)}: more than {MAX_QUANTITY_DIGITS} digits is not a quantity")
    num = Fraction(m.group("num"))
    suffix = m.group("suffix") or ""
    if suffix in _BINARY:
        return num * _BINARY[suffix]
    if suffix in _DECIMAL:
        return num * _DECIMAL[suffix]
    exp = int(suffix[1:])
    if abs(exp) > 30:
        raise QuantityError(f"{quote(value)}: exponent out of range (at most 30 either way)")
    return num * Fraction(10) ** exp


def negative_quantity(value: object) -> QuantityError:
    """The error for a negative quantity where Kubernetes API validation forbids one (container
    requests and limits, pod overhead, node allocatable)."""
    return QuantityError(f"{quote(value)} is negative: Kubernetes API validation rejects negative requests, "
                         "limits, overhead and allocatable (quantities must be non-negative); fix: use 0 or more")


def non_negative_quantity(value: object) -> Fraction:
    """:func:`parse_quantity`, and :func:`negative_quantity` when the value is below 0."""
    q = parse_quantity(value)
    if q < 0:
        raise negative_quantity(value)
    return q


def to_milli(q: Fraction, *, round_up: bool) -> int:
    """Integer milli-units of ``q`` (``Fraction(1, 2)`` → 500), clamped to ±:data:`MAX_MILLI`.

    ``round_up=True`` (requests) rounds towards +∞ like Kubernetes ``MilliValue``;
    ``round_up=False`` (allocatable) rounds towards −∞, so a comparison never over-commits.
    """
    m = q * 1000
    v = math.ceil(m) if round_up else math.floor(m)
    return max(-MAX_MILLI, min(MAX_MILLI, v))


@lru_cache(maxsize=65536)
def _milli_of_text(value: str, round_up: bool) -> int:
    return to_milli(_parse_text(value), round_up=round_up)


def quantity_milli(value: object, *, round_up: bool) -> int:
    """``to_milli(parse_quantity(value), round_up=…)``, cached for strings. Raises
    :class:`QuantityError` like :func:`parse_quantity`."""
    if isinstance(value, str):
        return _milli_of_text(value, round_up)
    return to_milli(parse_quantity(value), round_up=round_up)


def allocatable_milli(value: object) -> int:
    """Milli-units of a node's allocatable quantity, rounded down (:func:`quantity_milli`);
    :func:`negative_quantity` when it is below 0 (rounded down, a negative value stays negative)."""
    milli = quantity_milli(value, round_up=False)
    if milli < 0:
        raise negative_quantity(value)
    return milli


@lru_cache(maxsize=65536)
def exact_milli(value: str) -> int | None:
    """Milli-units of a quantity string when that is a whole number (``"500m"`` → 500,
    ``"64Gi"`` → 68719476736000), ``None`` when it is not (``"1n"``). Raises
    :class:`QuantityError` like :func:`parse_quantity`. Cached (see :func:`_parse_text`)."""
    m = _parse_text(value) * 1000
    return int(m) if m.denominator == 1 and abs(m) <= MAX_MILLI else None


def is_integer_resource(name: str) -> bool:
    """True for a resource Kubernetes counts in whole units only: ``pods`` and every extended
    resource (a name with a ``/`` outside the ``kubernetes.io/`` namespace and not ``requests.*``:
    ``nvidia.com/gpu``). Rule source: k8s.io/kubernetes ``pkg/apis/core/helper``
    ``IsIntegerResourceName`` / ``IsExtendedResourceName``; kube-apiserver denies a fractional
    request of one ("must be an integer", ``ValidateResourceQuantityValue``)."""
    if name == "pods":
        return True
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")

"""``envelope.decode_json`` decodes review bodies with orjson where that cannot differ from
:mod:`json`: the value (types included: ``1`` is not ``1.0`` or ``True``) or the error must be the
one of the plain :mod:`json` path (``json.JSONDecoder`` with ``NaN``/``Infinity`` refused, on the
body decoded as UTF-8), for any body; an empty (or all-blank) body is named as empty.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook.http import envelope


def reference(raw: bytes):
    """What the json-only decoder gives: ``("value", v)`` or ``("error", message)``."""
    def reject(name):
        raise ValueError(f"{name} is not valid JSON")

    if not raw.strip():  # the one answer of its own: an empty body is named as such
        return "error", "request body is empty: send the AdmissionReview as JSON (with Content-Length, or chunked)"
    try:
        return "value", json.JSONDecoder(parse_constant=reject).decode(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return "error", "request body is not UTF-8 text"
    except RecursionError:
        return "error", "request body is nested too deeply to be an AdmissionReview"
    except ValueError as exc:
        if "integer string conversion" in str(exc):
            return "error", ("request body holds a number of more than 4300 digits; no Kubernetes field "
                             "takes one")
        return "error", f"request body is not valid JSON: {exc}"


def decoded(raw: bytes):
    try:
        return "value", envelope.decode_json(raw)
    except envelope.EnvelopeError as exc:
        assert exc.field == "body"
        return "error", exc.message


def typed(value):
    """``value`` with every leaf tagged by its type, and floats by their exact text."""
    if isinstance(value, dict):
        return ("dict", [(key, typed(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("list", [typed(item) for item in value])
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else repr(value))
    return (type(value).__name__, value)


def assert_same(raw: bytes) -> None:
    want, got = reference(raw), decoded(raw)
    assert want[0] == got[0], (raw[:200], want, got)
    if want[0] == "value":
        assert typed(got[1]) == typed(want[1]), raw[:200]
    else:
        assert got[1] == want[1]


json_leaves = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
               | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))
json_values = st.recursive(json_leaves, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)
# Number literals as a client may write them: long mantissas, exponents, leading zeros (invalid).
number_literals = st.from_regex(r"\A-?[0-9]{1,25}(\.[0-9]{1,25})?([eE][-+]?[0-9]{1,4})?\Z")


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_any_json_document_decodes_as_json_does(value):
    assert_same(json.dumps(value).encode())
    assert_same(json.dumps(value, ensure_ascii=False).encode())


@settings(max_examples=400)
@given(number_literals)
def test_any_number_literal_decodes_as_json_does(literal):
    assert_same(literal.encode())
    assert_same(b'{"replicas": ' + literal.encode() + b"}")


@settings(max_examples=300)
@given(st.binary(max_size=64))
def test_any_bytes_decode_or_fail_as_json_does(raw):
    assert_same(raw)


@pytest.mark.parametrize("raw", [
    b'{"n": 10000000000000000000000}',          # beyond 64 bits: json keeps the integer
    b'{"n": 18446744073709551616}',
    b'{"n": -9223372036854775809}',
    b'{"n": 999999999999999999}',               # 18 digits
    b'{"f": 1e400}',                            # json: inf
    b'{"x": NaN}', b'{"x": -Infinity}',         # refused
    b'{"s": "\\ud800"}',                        # lone surrogate escape: json accepts it
    b'{"s": "\xed\xa0\x80"}',                   # a surrogate in UTF-8: not UTF-8
    b'\xef\xbb\xbf{"a": 1}',                    # byte order mark
    b'{"a": 1, "a": 2}',                        # duplicate key: the last wins
    b'[' * 5000 + b']' * 5000,                  # deeper than json goes (orjson 3.8 has no limit)
    b'[' * 400 + b']' * 400, b'[' * 401 + b']' * 401, b'{"a":' * 300 + b'1' + b'}' * 300,
    b'{"a": 1} x', b'', b' ', b'"text"', b'{"a": "\x01"}',
])
def test_edge_cases_decode_as_json_does(raw):
    assert_same(raw)


def test_values_are_literal():
    # the figures json gives (Python's json module documentation), not what this code prints
    assert envelope.decode_json(b'{"n": 10000000000000000000000}') == {"n": 10**22}
    assert type(envelope.decode_json(b'{"n": 18446744073709551616}')["n"]) is int
    assert envelope.decode_json(b'{"f": 1e400}') == {"f": math.inf}
    assert envelope.decode_json(b'{"a": 1, "a": 2}') == {"a": 2}
    assert envelope.decode_json(b'{"s": "\\ud800"}') == {"s": "\ud800"}
    with pytest.raises(envelope.EnvelopeError, match="NaN is not valid JSON"):
        envelope.decode_json(b'{"x": NaN}')


# ------------------------------------------------------------------ envelope.patch_json: orjson where it equals json

def json_patch_text(value) -> bytes:
    """The reference: json's compact, ASCII text (what ``response.patch`` decoded from base64 was
    before orjson encoded it)."""
    return json.dumps(value, separators=(",", ":")).encode()


float_free_leaves = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
                     | st.text(max_size=20))
float_free_values = st.recursive(float_free_leaves, lambda inner: st.lists(inner, max_size=4)
                                 | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(float_free_values)
def test_a_patch_without_floats_is_json_text_byte_for_byte(value):
    """Non-ASCII text, control characters, lone surrogates, integers beyond 64 bits: all as json."""
    assert envelope.patch_json(value) == json_patch_text(value)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_a_patch_with_floats_reads_back_as_the_same_value(value):
    assert typed(json.loads(envelope.patch_json(value))) == typed(json.loads(json_patch_text(value)))
    assert envelope.patch_json(value).isascii()


def test_patch_json_literal_cases():
    patch = [{"op": "add", "path": "/metadata/labels/kai.scheduler~1segment-index", "value": "0"}]
    assert envelope.patch_json(patch) == (
        b'[{"op":"add","path":"/metadata/labels/kai.scheduler~1segment-index","value":"0"}]')
    assert envelope.patch_json([{"value": "名\x01"}]) == b'[{"value":"\\u540d\\u0001"}]'
    assert envelope.patch_json([2**64]) == b"[18446744073709551616]"
    assert envelope.patch_json([{"value": "\ud800"}]) == b'[{"value":"\\ud800"}]'
    assert envelope.patch_json([{"value": "\x7f"}]) == b'[{"value":"\\u007f"}]'  # DEL: json escapes it
    assert envelope.patch_json([{1: "x"}]) == b'[{"1":"x"}]'


def test_one_mask_marks_digits_and_opening_brackets():
    """decode_json reads the orjson preconditions (no run of 19 digits, at most 400 ``[``/``{``)
    from one translated copy of the body: digits as ``0``, both opening brackets as ``[``."""
    assert b'{"a": [12, "x9"]}'.translate(envelope._DIGIT_MASK) == b'[.....[00....0...'
    assert bytes(range(256)).translate(envelope._DIGIT_MASK).count(b"[") == 2
    assert bytes(range(256)).translate(envelope._DIGIT_MASK).count(b"0") == 10

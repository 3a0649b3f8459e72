"""JSON text with every kind of string the fuzz strategies make (lone surrogates, surrogateescape
bytes, pairs, hostile text): accepted, as ``JSON.stringify`` accepts it (SPEC §2 "Text"). The
canonical text is always UTF-8, and reads back to the value it was made from (pairs joined)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jobledger.contract import canonical_json, json_text, normalize_json, parse_stored_json

from .support import budget, text

json_strings = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), text()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(text(), inner, max_size=4)
    ),
    max_leaves=12,
)


def _joined(value: object) -> object:
    if isinstance(value, str):
        return json_text(value)
    if isinstance(value, list):
        return [_joined(item) for item in value]
    if isinstance(value, dict):
        return {json_text(key): _joined(item) for key, item in value.items()}
    return value


@budget(300, 5_000)
@given(value=json_strings)
def test_any_text_in_json_is_accepted_and_round_trips(value):
    normalized = normalize_json(value, "payload")
    assert normalized == _joined(value)
    encoded = canonical_json(value, "payload")
    encoded.encode("utf-8")  # never text UTF-8 cannot hold
    assert parse_stored_json(encoded) == normalized
    assert canonical_json(parse_stored_json(encoded)) == encoded

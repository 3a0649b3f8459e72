"""Differential test: ``canonical_json`` against Node's ``JSON.stringify`` of the key-sorted value.

One ``node`` process serves the whole module: it reads one JSON document per line, rebuilds every
object with its keys inserted in ``Object.keys(o).sort()`` order (default sort: UTF-16 code units;
the engine then enumerates array-index keys first on its own) and answers with one
``JSON.stringify`` line. Values go out as ``json.dumps(..., ensure_ascii=True)`` so surrogates
travel as ``\\udxxx`` escapes and JS sees the same UTF-16 string Python holds.

Every value is byte-identical to Node's answer, a value holding a *lone* surrogate (after a high
and a low one next to each other are joined, as JS reads them) included: both write it as its
``\\udxxx`` escape (SPEC §2 "Text"). The occurrence identity of material holding lone
surrogates is checked against Node's ``JSON.stringify`` of the same material too.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobledger.contract import IDENTITY_PREFIX, canonical_json, derive_occurrence_identity

NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(
    NODE is None, reason="node is not installed: the differential test needs Node's JSON.stringify"
)

# defineProperty, not assignment: `out["__proto__"] = v` would set the prototype instead of
# creating an own key.
SORT_AND_STRINGIFY = r"""
const readline = require("readline");
function sortKeys(value) {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value !== null && typeof value === "object") {
    const out = {};
    for (const key of Object.keys(value).sort()) {
      Object.defineProperty(out, key, {
        value: sortKeys(value[key]), enumerable: true, writable: true, configurable: true,
      });
    }
    return out;
  }
  return value;
}
const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
rl.on("line", (line) => {
  let answer;
  try {
    answer = JSON.stringify(sortKeys(JSON.parse(line)));
  } catch (err) {
    answer = "!ERROR " + String(err);
  }
  process.stdout.write(answer + "\n");
});
"""


class NodeStringify:
    def __init__(self, node: str) -> None:
        self._proc = subprocess.Popen(
            [node, "-e", SORT_AND_STRINGIFY],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def __call__(self, value: object) -> str:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        request = json.dumps(value, ensure_ascii=True, allow_nan=False)
        self._proc.stdin.write(request.encode("ascii") + b"\n")
        self._proc.stdin.flush()
        # Binary read: the answer may hold raw U+2028, which text-mode readers could split on.
        line = self._proc.stdout.readline()
        if not line:
            stderr = self._proc.stderr.read().decode() if self._proc.stderr else ""
            pytest.fail(f"node exited (code {self._proc.poll()}): {stderr}")
        answer = line.decode("utf-8").removesuffix("\n")
        assert not answer.startswith("!ERROR"), f"node could not handle {request!r}: {answer}"
        return answer

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture(scope="module")
def node_stringify():
    assert NODE is not None
    stringify = NodeStringify(NODE)
    try:
        yield stringify
    finally:
        stringify.close()


# ---------------------------------------------------------------------------------------------
# Strategies

TRICKY_KEYS = [
    "",
    "0",
    "1",
    "2",
    "10",
    "01",
    "00",
    "-0",
    "-1",
    "1.5",
    "1e3",
    " 1",
    "4294967294",
    "4294967295",
    "4294967296",
    "9007199254740993",
    "__proto__",
    "constructor",
    "toString",
    "a",
    "B",
    "é",
    "\U0001f600",
    "\uffff",
    "\ue000",
    "\u2028",
    "\ud800",
    "\udfff",
    "\x00",
    "\x7f",
]

# Every code point, surrogates included (Hypothesis excludes category Cs unless told otherwise).
any_char = st.characters(exclude_categories=())
text = st.one_of(
    st.text(any_char, max_size=12),
    st.text(st.sampled_from(["\x00", "\x1f", "\n", '"', "\\", "\u2028", "\ud83d", "\ude00"])),
)
keys = st.one_of(
    st.sampled_from(TRICKY_KEYS),
    st.integers(min_value=0, max_value=2**32 + 2).map(str),
    text,
)
floats = st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=True)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    floats,
    st.integers(min_value=-(2**53), max_value=2**53),
    text,
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(keys, children, max_size=6),
    ),
    max_leaves=25,
)


def _holds_lone_surrogate(value: object) -> bool:
    """Independently of jobledger: does a string of ``value`` hold a surrogate that is not half
    of a high-low pair? (UTF-16 with ``surrogatepass`` joins the pairs; strict UTF-8 then fails
    on what is left.)"""
    if isinstance(value, str):
        joined = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
        try:
            joined.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, list):
        return any(_holds_lone_surrogate(item) for item in value)
    if isinstance(value, dict):
        return any(_holds_lone_surrogate(k) or _holds_lone_surrogate(v) for k, v in value.items())
    return False


def _check(node_stringify: NodeStringify, value: object) -> None:
    assert canonical_json(value) == node_stringify(value)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(value=json_values)
def test_canonical_json_matches_node(node_stringify, value):
    _check(node_stringify, value)


@settings(max_examples=300, deadline=None)
@given(number=floats)
def test_number_formatting_matches_node(node_stringify, number):
    assert canonical_json([number]) == node_stringify([number])


HAND_PICKED = [
    {"b": 1, "10": 2, "2": 3, "a": {"é": 1, "e": 2, "Z": 0}, "4294967295": 9, "4294967294": 8},
    {"__proto__": {"polluted": True}, "constructor": "payload"},
    {"\uffff": 1, "\U0001f600": 2, "\ue000": 3, "\U00010000": 4},
    {"01": 0, "-1": 0, "1.5": 0, "1": 0, "0": 0, " 1": 0, "1e3": 0, "4294967296": 0},
    [1.0, 0.1, 1e21, 1.5e-7, -0.0, 123456789012345680000.0, 5e-324, 1e-7, 1e-6, 2**53],
    [9.999999999999999e20, 1e20, 1.7976931348623157e308, 2.2250738585072014e-308, 0.1 + 0.2],
    [2.0**54, -(2.0**60), 1e-6 * 0.999, 123e-20, 4.35, 0.000001, 0.0000015],
    [2**60, -(2**60), 2**63, 2**1023],
    "".join(chr(c) for c in range(0x20)) + '"\\/<>&\x7f\x85\u2028\u2029é😀',
    ["\ud83d\ude00", "a\ud83d\ude00b", "\U0001f600\ud83d\ude00"],
    {"\ud83d\ude00": "\ud83d\ude00", "\U0001f600x": 1},
    [[], {}, [[]], [{}], {"": {"": []}}, None, True, False, ""],
]
LONE_SURROGATES = [
    ["\ud800", "\ud83d\ude00"],
    ["a\udfffb"],
    ["\udbff\ud800"],  # high, high: both lone
    ["\ude00\ud83d"],  # low before high: not a pair
    {"\udc00": "\ud83d\ude00"},
    {"\ud83d\ude00": "\udc00"},
]


@pytest.mark.parametrize("value", HAND_PICKED)
def test_hand_picked_values_match_node(node_stringify, value):
    assert not _holds_lone_surrogate(value)
    assert canonical_json(value) == node_stringify(value)


@pytest.mark.parametrize("value", LONE_SURROGATES)
def test_lone_surrogates_are_escaped_as_node_escapes_them(node_stringify, value):
    assert _holds_lone_surrogate(value)
    answer = node_stringify(value)
    assert "\\ud" in answer  # JSON.stringify writes an escape
    assert canonical_json(value) == answer


IDENTITY_MATERIAL = [
    ("lone\ud800", "t"),
    ("job-a", "key:a\udfffb"),
    (" \udbff\ud800 ", "\ude00\ud83d"),  # trimmed first; two lone ones in each
    ("\ud83d\ude00", "slot:\udc80"),  # a pair (one character); surrogateescape's 0x80
]


@pytest.mark.parametrize(("job_id", "trigger_key"), IDENTITY_MATERIAL)
def test_identity_of_material_with_lone_surrogates_is_the_references(
    node_stringify, job_id, trigger_key
):
    # The reference hashes canonicalJson of the material: JSON.stringify of these keys in order.
    material = {
        "contractVersion": 1,
        "jobId": job_id.strip(),
        "jobRevision": 7,
        "scheduledFor": 1_700_000_000_000,
        "triggerKey": trigger_key,
    }
    digest = hashlib.sha256(IDENTITY_PREFIX + node_stringify(material).encode("utf-8")).hexdigest()
    assert derive_occurrence_identity(
        job_id=job_id, job_revision=7, scheduled_for=1_700_000_000_000, trigger_key=trigger_key
    ) == (f"occ_{digest}", f"scheduler:v1:{digest}")

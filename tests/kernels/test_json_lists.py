"""The compiled pass that lifts integer arrays out of JSONL lines, against the json module."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtrace.kernels.json_lists import key_table, lift_int_lists

LIFTED, DROPPED = "selected_token_pos", "selected_block_ids"


def lift(lines: list[bytes], lifted: tuple[str, ...] = (LIFTED,), dropped=(DROPPED,)):
    """The kernel's results for ``lines``: None when it gives up, else (the rewritten
    lines, per lifted key the list of each line's integers or None)."""
    data = b"".join(line + b"\n" for line in lines)
    keys, lengths = key_table([k.encode() for k in lifted + dropped])
    handled, rest, size, values, offsets, present = lift_int_lists(
        np.frombuffer(data, dtype=np.uint8),
        len(lines),
        keys,
        lengths,
        len(lifted),
        data.count(b","),
    )
    if not handled:
        return None
    rewritten = bytes(rest[:size]).split(b"\n")[:-1]
    lists = {
        key: [
            values[k, offsets[k, i] : offsets[k, i + 1]].tolist() if present[k, i] else None
            for i in range(len(lines))
        ]
        for k, key in enumerate(lifted)
    }
    return rewritten, lists


# values that put the keys' names and JSON's special characters where they must be ignored
_text = st.sampled_from(
    ["", "x", LIFTED, DROPPED, '"', "\\", '\\"', "[1,2]", "{", "}", ",", ":", "é", "\u2028"]
)
_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**6), 10**6), st.floats(-1e3, 1e3), _text
)
_nested = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from([LIFTED, DROPPED, "a", "b"]), inner, max_size=3),
    ),
    max_leaves=6,
)
_ints = st.lists(st.integers(-(10**18) + 1, 10**18 - 1), max_size=12)


@st.composite
def records(draw) -> dict:
    record = draw(st.dictionaries(st.sampled_from(["event", "a", "b", "c"]), _nested, max_size=4))
    if draw(st.booleans()):
        record[LIFTED] = draw(_ints)
    if draw(st.booleans()):
        record[DROPPED] = draw(_ints)
    keys = list(record)
    order = draw(st.permutations(keys))
    return {key: record[key] for key in order}


@settings(max_examples=300, deadline=None)
@given(st.lists(records(), min_size=1, max_size=5), st.sampled_from([None, (", ", ": ")]))
def test_plain_records_are_lifted_exactly(batch, separators):
    lines = [json.dumps(r, separators=separators, ensure_ascii=False).encode() for r in batch]
    result = lift(lines)
    assert result is not None
    rewritten, lists = result
    for record, line, got in zip(batch, rewritten, lists[LIFTED], strict=True):
        expected = dict(record)
        for key in (LIFTED, DROPPED):
            if key in expected:
                expected[key] = None
        assert json.loads(line) == expected
        assert got == record.get(LIFTED)


@pytest.mark.parametrize(
    "line",
    [
        b'{"selected_token_pos":[1,2.5]}',  # a float
        b'{"selected_token_pos":[1,null]}',  # a null inside
        b'{"selected_token_pos":null}',  # not an array
        b'{"selected_token_pos":"1,2"}',
        b'{"selected_token_pos":[1,2],"selected_token_pos":[3]}',  # the key twice
        b'{"selected_token_po\\u0073":[1]}',  # an escaped key
        b'{"selected_token_pos":[01]}',  # a leading zero
        b'{"selected_token_pos":[1234567890123456789]}',  # 19 digits
        b'{"selected_token_pos":[1,2',  # cut inside the array
        b'{"selected_token_pos":[1,]}',  # a trailing comma
        b'{"selected_token_pos":[-]}',
        b'{"selected_block_ids":[1,true]}',  # a dropped key is checked too
    ],
)
def test_anything_but_plain_integers_gives_the_chunk_up(line):
    assert lift([b'{"selected_token_pos":[1]}', line]) is None


def test_keys_inside_strings_and_nested_objects_are_left_alone():
    line = (
        b'{"s":"\\"selected_token_pos\\":[9]","n":{"selected_token_pos":[8]},'
        b'"selected_token_pos":[ 3 , -1 ]}'
    )
    rewritten, lists = lift([line])
    assert lists[LIFTED] == [[3, -1]]
    assert json.loads(rewritten[0]) == {
        "s": '"selected_token_pos":[9]',
        "n": {"selected_token_pos": [8]},
        "selected_token_pos": None,
    }


def test_two_lifted_keys_and_a_missing_one():
    lines = [b'{"a":[1,2],"b":[3]}', b'{"b":[]}', b"{}"]
    _, lists = lift(lines, lifted=("a", "b"), dropped=())
    assert lists == {"a": [[1, 2], None, None], "b": [[3], [], None]}

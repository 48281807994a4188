"""Every public view and macro says what it answers and documents each column."""

from __future__ import annotations

import re

from kvtrace import connect
from kvtrace.sql.catalog import documented_objects, library

# Arguments for macros whose parameters have no default.
ARGUMENTS = {
    "dsa_blocks": "(16)",
    "operator_roofline": "('a100-80gb')",
    "dsa_prefix": "(16)",
    "dsa_prefix_hot_blocks": "(16)",
    "run_compare": "('a', 'b')",
    "dsa_access": "(16)",
    "dsa_block_keys": "(16)",
    "dsa_step_overlap": "(16)",
    "dsa_working_set": "(16, 4)",
    "dsa_reuse": "(16)",
    "dsa_hit_curve": "(16)",
    "dsa_shape": "(16)",
    "dsa_shape_layers": "(16)",
    "dsa_reuse_steps": "(16)",
    "dsa_reuse_steps_by_layer": "(16)",
    "dsa_one_shot": "(16)",
    "dsa_lru_knee": "(16)",
    "request_execution_mode_compare": "('a', 'b')",
    "eval_diff": "('a', 'b')",
    "eval_diff_summary": "('a', 'b')",
    "eval_needle_recall": "(16)",
    "eval_needle_recall_by_layer": "(16)",
    "timing_fidelity": "('a', 'b')",
    "timeline_overlap": "([7], [20])",
    "timeline_copy_by_annotation": "('^layer')",
    "timeline_diff": "('a', 'b')",
    "timeline_kernel_sequences": "('aten::')",
    "runs_named": "(['a'])",
    "serving_capacity": "('a')",
    "dsa_group_density": "(16)",
    "dsa_group_union": "(16)",
    "dsa_group_savings": "(16)",
}


def test_every_created_object_is_documented():
    created = {name for f in library() for name in f.creates if not name.startswith("_")}
    documented = {obj.name for obj in documented_objects() if obj.public}
    assert created == documented


def test_every_public_object_documents_exactly_its_columns(warehouse):
    con = connect(warehouse)
    for obj in documented_objects():
        if not obj.public:
            continue
        assert obj.description, f"{obj.name} has no description"
        call = obj.name
        if obj.kind == "macro":
            call += ARGUMENTS.get(obj.name, "()")
        columns = [row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {call}").fetchall()]
        assert columns == list(obj.columns), obj.name
        assert all(obj.columns.values()), f"{obj.name} has an undescribed column"


def _used_files(text: str, creator: dict[str, str], own: str) -> set[str]:
    """The files whose objects a file's SQL (comments and string literals left out) names."""
    code = re.sub(r"'(?:[^']|'')*'", "", re.sub(r"--[^\n]*", "", text))
    words = set(re.findall(r"\w+", code))
    return {creator[name] for name in words & set(creator) if creator[name] != own}


def test_every_file_declares_exactly_the_files_it_uses():
    files = library()
    creator = {name: f.name for f in files for name in f.creates}
    for sql_file in files:
        used = _used_files(sql_file.text, creator, sql_file.name)
        assert set(sql_file.requires) == used, sql_file.name


def test_a_file_that_uses_an_undeclared_file_is_caught():
    creator = {"dsa_steps": "dsa_steps.sql", "runs": "runs.sql"}
    text = "-- uses runs in a comment only\nCREATE VIEW x AS SELECT * FROM dsa_steps;"
    assert _used_files(text, creator, "x.sql") == {"dsa_steps.sql"}


def test_every_public_object_carries_its_family_prefix():
    from kvtrace.warehouse.schema.tables import TABLES

    unprefixed = []
    for obj in documented_objects():
        prefix = obj.file.split("_")[0].removesuffix(".sql") + "_"  # pool.sql, dsa_blocks.sql
        if obj.public and obj.name not in TABLES and not obj.name.startswith(prefix):
            unprefixed.append(f"{obj.file}: {obj.name}")
    assert unprefixed == []


def test_former_names_answer_as_their_objects(warehouse):
    con = connect(warehouse)
    aliased = [obj for obj in documented_objects() if obj.aliases]
    assert len(aliased) == 12
    for obj in aliased:
        arguments = ARGUMENTS.get(obj.name, "()") if obj.kind == "macro" else ""
        new = con.execute(f"DESCRIBE SELECT * FROM {obj.name}{arguments}").fetchall()
        for alias in obj.aliases:
            assert con.execute(f"DESCRIBE SELECT * FROM {alias}{arguments}").fetchall() == new

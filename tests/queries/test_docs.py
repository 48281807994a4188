"""Every public view and macro says what it answers and documents each column."""

from __future__ import annotations

from kvtrace import connect
from kvtrace.sql.catalog import documented_objects, library

# Arguments for macros whose parameters have no default.
ARGUMENTS = {"dsa_blocks": "(16)", "dsa_prefix": "(16)", "dsa_prefix_hot_blocks": "(16)",
             "run_compare": "('a', 'b')", "dsa_access": "(16)", "dsa_step_overlap": "(16)",
             "dsa_working_set": "(16, 4)", "dsa_reuse": "(16)", "dsa_hit_curve": "(16)",
             "execution_mode_compare": "('a', 'b')", "eval_diff": "('a', 'b')",
             "eval_diff_summary": "('a', 'b')", "dsa_needle_recall": "(16)",
             "dsa_needle_recall_by_layer": "(16)", "timing_fidelity": "('a', 'b')",
             "timeline_overlap": "([7], [20])",
             "timeline_copy_by_annotation": "('^layer')"}


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

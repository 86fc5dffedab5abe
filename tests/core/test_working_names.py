"""The `_lh_` convention (`core.columns.WORKING`), kept by a test. Every column the lakehouse
adds to a frame of a record's or a table's columns is named `_lh_*`, which no field may take,
so a record's `_seq`, `_ts` or `_rank` is never overwritten or dropped (a declared `_seq` was
dropped without a word before the convention). The names are literals spelled in many modules;
this test finds every underscored name the library's string literals start with and asks that
each is a working column (`_lh_*`) or listed below, with the modules that spell it and what
it names there, so a helper column called `_foo`, or a listed name spelled in another module
(`_rank` in silver), cannot come back unnoticed. A working column named without an underscore
(`rank`) would meet a record's field too; this scan does not see those."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from lakehouse.core.columns import WORKING

LIBRARY = Path(__file__).resolve().parents[2] / "lakehouse"
# A name starting with one underscore and a letter, at the start of a string literal (or of an
# f-string's first part): `_seq`, `_undecoded_{i}`, `_change_type <> 'update_preimage'`.
UNDERSCORED = re.compile(r"_[A-Za-z]\w*")

# Underscored names that are not working columns on a frame of user columns: where each is
# spelled (a module of `lakehouse/`) and why no record field can meet it there.
KNOWN: dict[str, tuple[set[str], str]] = {
    "_change_type": (
        {"core/tables.py", "gold/source.py", "offline/changes.py", "silver/refine.py"},
        "Delta's Change Data Feed (CDF_COLUMNS)",
    ),
    "_commit_version": ({"core/tables.py"}, "Delta's Change Data Feed (CDF_COLUMNS)"),
    "_commit_timestamp": ({"core/tables.py"}, "Delta's Change Data Feed (CDF_COLUMNS)"),
    "_rescued_data": ({"silver/transform.py"}, "silver's own column: no field takes it"),
    # Paths and names that are not columns.
    "_checkpoints": ({"core/tables.py"}, "a folder of the storage root"),
    "_system": (
        {"core/system.py", "core/tables.py", "quality/validate.py"},
        "a folder of the storage root",
    ),
    "_warehouse": ({"core/spark.py"}, "Spark's warehouse folder"),
    "_stackTrace": ({"bronze/retention.py"}, "an attribute of Py4J's Java exceptions"),
    "_dotted": ({"core/config.py"}, "a slot of Secret"),
    "_reference": ({"core/config.py"}, "a slot of Secret"),
    "_where": ({"core/config.py"}, "a slot of Secret"),
    # Columns of frames whose columns are fixed, not a record's: Kafka's...
    "_narrow": ({"bronze/envelope.py"}, "the envelope read, on Kafka's fixed columns"),
    "_plain": ({"bronze/envelope.py"}, "the envelope read, on Kafka's fixed columns"),
    "_envelope": ({"bronze/envelope.py"}, "the envelope read, on Kafka's fixed columns"),
    "_corrupt": ({"bronze/envelope.py"}, "the envelope read, on Kafka's fixed columns"),
    # ... the metrics table's ...
    "_rank": ({"status.py"}, "the newest batch per table, on the metrics table's columns"),
    # ... and aggregations whose other columns are rule names (lower_snake_case: never `_`).
    "_rows": ({"quality/expectations.py", "silver/batch.py"}, "beside rule names"),
    **{
        name: ({"silver/batch.py"}, "batch_stats' aggregation, beside rule names")
        for name in (
            "_written",
            "_quarantined",
            "_dropped",
            "_unknown",
            "_undecoded_",
            "_undeclared_",
            "_truncates",
            "_snapshot_reads",
        )
    },
}


def _leading_text(node: ast.AST) -> str | None:
    """The literal text a string constant, or an f-string, starts with."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value
    return None


def underscored_names(root: Path) -> dict[str, list[str]]:
    """Each underscored name but the working columns' that the string literals of the
    modules under `root` start with, and where."""
    found: dict[str, list[str]] = defaultdict(list)
    for module in sorted(root.rglob("*.py")):
        nodes = list(ast.walk(ast.parse(module.read_text())))
        parts = {id(v) for n in nodes if isinstance(n, ast.JoinedStr) for v in n.values}
        for node in nodes:
            text = _leading_text(node) if id(node) not in parts else None
            match = UNDERSCORED.match(text) if text else None
            if match and not match.group().startswith(WORKING):
                line = getattr(node, "lineno", 0)
                found[match.group()].append(f"{module.relative_to(root)}:{line}")
    return found


def test_every_underscored_name_the_library_spells_is_a_working_column_or_known() -> None:
    found = underscored_names(LIBRARY)
    unknown = {
        name: sites
        for name, sites in found.items()
        if {s.split(":")[0] for s in sites} - KNOWN.get(name, (set(), ""))[0]
    }
    assert unknown == {}, (
        f"name the lakehouse's own columns {WORKING}* (core.columns.WORKING), or list the "
        "name and module in KNOWN with why no record field can meet it there"
    )
    # No longer spelled there: drop it from KNOWN.
    assert {n: m for n, (m, _) in KNOWN.items()} == {
        n: {s.split(":")[0] for s in sites} for n, sites in found.items()
    }


def test_the_scan_finds_a_helper_column_named_outside_the_convention(tmp_path: Path) -> None:
    """The scan itself, on a module with such helpers (`_seq`, `_next_{i}`) beside a working
    column and a name that is not underscored."""
    (tmp_path / "helper.py").write_text(
        'rows.withColumn("_seq", x)\nrows.alias(f"_lh_g_{n}")\nrows.select(f"_next_{i}", "seq")\n'
    )
    assert underscored_names(tmp_path) == {"_seq": ["helper.py:1"], "_next_": ["helper.py:3"]}

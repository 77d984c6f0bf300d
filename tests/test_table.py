"""Plain-text tables: columns padded to their widest cell, no trailing spaces, an optional indent."""

from __future__ import annotations

from farm.table import format_table


def test_columns_are_padded_to_their_widest_cell_and_lines_end_without_spaces() -> None:
    table = format_table(("#", "name", "note"), [(1, "sm_90a", None), (10, "compute_120", "100%")])
    assert table.splitlines() == [
        "#   name         note",
        "--  -----------  ----",
        "1   sm_90a",
        "10  compute_120  100%",
    ]


def test_every_line_starts_with_the_indent() -> None:
    table = format_table(("a", "b"), [("x", "%s")], indent="  %")
    assert table.splitlines() == ["  %a  b", "  %-  --", "  %x  %s"]


def test_a_table_without_rows_is_its_header() -> None:
    assert format_table(("kind", "arch"), []) == "kind  arch\n----  ----"

"""The markdown table writer every table of the project goes through."""

from lengthgen.support import markdown


def test_a_table_is_its_header_a_rule_and_one_line_per_row():
    assert markdown.table(["a", "b"], [[1, "x"], [2.5, ""]]) == ["| a | b |", "|---|---|", "| 1 | x |", "| 2.5 |  |"]


def test_a_table_without_rows_keeps_its_header():
    assert markdown.table(["only"], []) == ["| only |", "|---|"]

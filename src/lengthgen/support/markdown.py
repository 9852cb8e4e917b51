"""The one writer of markdown tables: the scorecard, the sweep summary, the verdict table, the
replication report and the generated blocks of docs/ all print through it, so they agree on
the format that readers `git diff`."""

from __future__ import annotations

from collections.abc import Iterable


def table(header: Iterable, rows: Iterable[Iterable]) -> list[str]:
    """The lines of a GitHub-flavoured markdown table: the header, the rule, one line per row.
    Cells are printed with `str`, so a caller formats its numbers first."""
    header = [str(c) for c in header]
    lines = [row_line(header), "|" + "---|" * len(header)]
    lines += [row_line(row) for row in rows]
    return lines


def row_line(cells: Iterable) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"

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


def replace_block(doc: str, tag: str, results_dir: str, text: str) -> str:
    """`doc` with the text between `<!-- TAG: RESULTS_DIR -->` and `<!-- end TAG -->` replaced by
    `text` (a generated table in docs/); ValueError when it has no such block."""
    start, end = f"<!-- {tag}: {results_dir} -->\n", f"<!-- end {tag} -->"
    if start not in doc or end not in doc.split(start, 1)[1]:
        raise ValueError(f"no block '{start.strip()}' ... '{end}' to write the table into")
    head, rest = doc.split(start, 1)
    return head + start + text.rstrip("\n") + "\n" + end + rest.split(end, 1)[1]

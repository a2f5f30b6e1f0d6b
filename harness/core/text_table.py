"""The one plain-text table every command prints: columns two spaces apart, padded to their widest cell."""

from __future__ import annotations

from collections.abc import Collection, Sequence


def text_table(
    rows: Sequence[Sequence[object]],
    *,
    rule: bool = False,
    right: Collection[int] = (),
    last_unpadded: bool = False,
) -> list[str]:
    """The lines of ``rows`` (the first is the header when ``rule`` puts a dashed line under it).

    ``right``: columns aligned right (counts, sizes); ``last_unpadded``: the last column is neither
    padded nor measured (a free-text column such as a source or a note). Trailing blanks are cut.
    """
    cells = [[str(cell) for cell in row] for row in rows]
    if not cells:
        return []
    measured = len(cells[0]) - 1 if last_unpadded else len(cells[0])
    widths = [max(len(row[column]) for row in cells) for column in range(measured)]
    lines = [_line(row, widths, right, last_unpadded) for row in cells]
    if rule:
        dashes = ["-" * width for width in widths] + (["-" * len(cells[0][-1])] if last_unpadded else [])
        lines.insert(1, "  ".join(dashes))
    return lines


def _line(row: list[str], widths: list[int], right: Collection[int], last_unpadded: bool) -> str:
    padded = [
        cell.rjust(width) if column in right else cell.ljust(width)
        for column, (cell, width) in enumerate(zip(row, widths, strict=False))
    ]
    if last_unpadded:
        return "  ".join([*padded, row[-1]])
    return "  ".join(padded).rstrip()

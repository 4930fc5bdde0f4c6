"""The markdown table writer of every report table: cells formatted one way (floats to a fixed
number of decimals, a missing value as "–"), the header, the separator and the rows. Imports
neither pandas nor numpy, so the README and REPORT builders that use it stay light."""

from __future__ import annotations

import math


def fmt_cell(v, digits=4) -> str:
    """A table cell: a float with `digits` decimals, None or NaN as "–", anything else as str."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def markdown_lines(header, rows) -> list[str]:
    """A markdown table as lines: the header, the separator, then one line per row (each cell
    written as str)."""
    return ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(map(str, row)) + " |" for row in rows)]


def markdown(header, rows) -> str:
    """markdown_lines as text, ending in a newline."""
    return "\n".join(markdown_lines(header, rows)) + "\n"


def markdown_table(df, digits: int = 4) -> str:
    """A data frame as a markdown table: its columns as the header, floats with `digits` decimals
    and NaN as "–", other values as str."""
    cols = list(df.columns)
    return markdown(cols, ([fmt_cell(r[c], digits) if isinstance(r[c], float) else str(r[c]) for c in cols]
                           for _, r in df.iterrows()))

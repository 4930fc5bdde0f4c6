"""Saving figures: every output written whole (atomic), in the format its suffix names, without
timestamps or software tags, so that regenerating a figure from the same data gives the same bytes."""

from __future__ import annotations

from pathlib import Path

from ..io import atomic_path


def save_figure(fig, outputs) -> None:
    """Write fig to every path in outputs, then close it (a figure is drawn for its files only)."""
    import matplotlib.pyplot as plt

    for out in outputs:
        out = str(out)
        with atomic_path(out) as tmp:
            # matplotlib picks the format from the suffix, which the temporary name hides
            fig.savefig(tmp, format=Path(out).suffix.lstrip("."), dpi=120,
                        metadata={"CreationDate": None} if out.endswith(".pdf") else {"Software": None})
    plt.close(fig)

"""One style for every paper's figures, and saving them.

Figures are drawn at the size at which they are printed: at most ``WIDTH`` inches wide (the text
width of a page) and ``MAX_HEIGHT`` high, with no text under ``MIN_FONT`` points, legends outside
the data, and no panel with more than ``MAX_ARMS`` method lines besides its reference. Methods are
coloured by family (the recipe they use: BF16 grey, FP8 blue, INT8 green, INT8 with fallback orange,
MoR purple, GaussWS red, STE brown), arms of one family in shades, line styles and markers of its
hue. Importing this module applies the style (``STYLE``), so every figure module that saves
through ``save_figure`` draws with it; ``pyplot()`` is the one way they get matplotlib.pyplot, on the
non-interactive Agg backend.

Every output is written whole (atomic), in the format its suffix names, without timestamps or
software tags, so that regenerating a figure from the same data gives the same bytes.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

from ..io import atomic_path

WIDTH = 7.0        # inches: a printed page's text width
MAX_HEIGHT = 9.0   # inches
DPI = 150          # a 7-inch figure is 1050 pixels wide
MIN_FONT = 7.0     # points, at the printed size
MAX_ARMS = 4       # method lines per panel besides its reference (the baseline)

STYLE = {
    "font.size": 8, "axes.titlesize": 8.5, "axes.labelsize": 8, "xtick.labelsize": 7, "ytick.labelsize": 7,
    "legend.fontsize": 7, "legend.title_fontsize": 7.5, "figure.titlesize": 9, "figure.dpi": DPI,
    "savefig.dpi": DPI, "figure.constrained_layout.use": True, "axes.spines.top": False,
    "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.6,
    "lines.linewidth": 1.4, "lines.markersize": 3.5, "legend.frameon": False, "image.cmap": "viridis",
    "axes.prop_cycle": matplotlib.cycler(color=["#1f4e99", "#d9730d", "#2e8b57", "#8e44ad", "#b22222", "#6b6b6b"]),
}
matplotlib.rcParams.update(STYLE)


def pyplot():
    """matplotlib.pyplot on the Agg backend: figures are drawn for their files only, also on
    machines without a display."""
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt

# recipe -> family; a recipe not listed is its own family
FAMILY = {"bf16": "BF16", "fp8_tensorwise_current": "FP8", "fp8_delayed": "FP8", "fp8_hybrid": "FP8",
          "fp8_blockwise": "FP8", "mxfp8": "FP8", "int8_block": "INT8", "int8_rowwise": "INT8",
          "int8_fallback": "INT8 fallback", "mor": "MoR", "gaussws": "GaussWS", "ste": "STE"}
FAMILY_CMAP = {"BF16": "Greys", "FP8": "Blues", "INT8": "Greens", "INT8 fallback": "Oranges", "MoR": "Purples",
               "GaussWS": "Reds", "STE": "YlOrBr"}
SPARE_CMAPS = ("PuRd", "BuGn", "GnBu", "YlGn", "OrRd", "RdPu")  # families without an entry, in order of appearance
LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v")
REFERENCE_COLOR = "black"


def method_family(recipe: str) -> str:
    return FAMILY.get(recipe, recipe)


def arm_styles(arms: list[tuple[str, str]], reference: str | None = None) -> dict[str, dict]:
    """Plot keywords (color, linestyle, marker) of each (method, recipe) in ``arms``, one panel's lines:
    the reference black and solid; the others in their family's hue, the k-th arm of a family in the
    panel in the k-th shade, line style and marker (dark to light)."""
    styles, seen, spare = {}, {}, iter(SPARE_CMAPS)
    cmaps = dict(FAMILY_CMAP)
    families = {m: method_family(r) for m, r in arms}
    counts = {}
    for m, _ in arms:
        if m != reference:
            counts[families[m]] = counts.get(families[m], 0) + 1
    for m, _ in arms:
        if m == reference:
            styles[m] = {"color": REFERENCE_COLOR, "linestyle": "-", "marker": "o"}
            continue
        fam = families[m]
        if fam not in cmaps:
            cmaps[fam] = next(spare, "Greys")
        k = seen[fam] = seen.get(fam, -1) + 1
        n = counts[fam]
        shade = 0.95 - (0.45 * k / (n - 1) if n > 1 else 0.0)  # 0.95 (dark) to 0.5 (light) of the colormap
        styles[m] = {"color": matplotlib.colormaps[cmaps[fam]](shade), "linestyle": LINESTYLES[k % len(LINESTYLES)],
                     "marker": MARKERS[k % len(MARKERS)]}
    return styles


def balanced_chunks(items: list, size: int = MAX_ARMS) -> list[list]:
    """``items`` cut into the fewest chunks of at most ``size``, as equal in length as possible."""
    if not items:
        return []
    n = math.ceil(len(items) / size)
    base, extra = divmod(len(items), n)
    out, i = [], 0
    for k in range(n):
        step = base + (1 if k < extra else 0)
        out.append(items[i:i + step])
        i += step
    return out


def figure_size(width: float, height: float) -> tuple[float, float]:
    """(width, height) in inches, clipped to the printed page (``WIDTH`` x ``MAX_HEIGHT``)."""
    return min(width, WIDTH), min(height, MAX_HEIGHT)


def suptitle(fig, text: str, width: float | None = None) -> None:
    """The figure's title, each line wrapped to the figure's width (``width`` inches, default the
    figure's) at the title font size."""
    import textwrap

    width = width or fig.get_figwidth()
    chars = int(width * 72 / (0.55 * STYLE["figure.titlesize"]))  # an average character is ~0.55 em wide
    fig.suptitle("\n".join(textwrap.fill(line, chars) for line in text.split("\n")))


def legend_below(ax, ncol: int = 1, **kw):
    """The axes' legend under it, outside the data (the layout makes room for it)."""
    return ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=ncol, **kw)


def _tick_labels(axis, minor: bool = True) -> list:
    """The tick labels that are drawn: those of ticks inside the axis' view limits."""
    lo, hi = sorted(axis.get_view_interval())
    pad = 1e-9 * max(abs(lo), abs(hi), 1.0)
    out = []
    for locs, labels in [(axis.get_majorticklocs(), axis.get_majorticklabels())] + (
            [(axis.get_minorticklocs(), axis.get_minorticklabels())] if minor else []):
        out += [t for loc, t in zip(locs, labels) if lo - pad <= loc <= hi + pad]
    return out


def figure_problems(fig) -> list[str]:
    """What keeps a reader from reading ``fig`` at its printed size: a figure larger than the page,
    text under ``MIN_FONT``, text cut off at the figure's edge, tick labels that overlap each other,
    a legend over an axes' data. Draws the figure; empty when it is readable."""
    problems = []
    w, h = fig.get_size_inches()
    if w > WIDTH + 1e-6 or h > MAX_HEIGHT + 1e-6:
        problems.append(f"figure {w:.2f} x {h:.2f} in, larger than the page ({WIDTH} x {MAX_HEIGHT})")
    renderer = fig.canvas.get_renderer()
    fig.draw_without_rendering()
    page = fig.bbox.padded(1.0)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    legends = [lg for lg in [*fig.legends, *(ax.get_legend() for ax in axes)] if lg is not None and lg.get_visible()]
    title = getattr(fig, "_suptitle", None)  # matplotlib keeps the figure title's Text here
    texts = [*fig.texts, *([title] if title is not None else [])]
    for ax in axes:
        texts += [*ax.texts, ax.title, ax.xaxis.label, ax.yaxis.label, *_tick_labels(ax.xaxis), *_tick_labels(ax.yaxis)]
    for lg in legends:
        texts += [*lg.get_texts(), lg.get_title()]
    texts = [t for t in texts if t.get_visible() and t.get_text().strip()]
    for t in texts:
        if t.get_fontsize() < MIN_FONT - 1e-6:
            problems.append(f"text {t.get_text()!r} at {t.get_fontsize():g} pt (under {MIN_FONT:g})")
        box = t.get_window_extent(renderer)
        if box.width and not (page.contains(box.x0, box.y0) and page.contains(box.x1, box.y1)):
            problems.append(f"text {t.get_text()!r} cut off at the figure's edge")
    for ax in axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = [t for t in _tick_labels(axis, minor=False) if t.get_visible() and t.get_text().strip()]
            boxes = [t.get_window_extent(renderer) for t in labels]
            for (a, ta), (b, tb) in zip(zip(boxes, labels), list(zip(boxes, labels))[1:]):
                if a.overlaps(b):
                    problems.append(f"tick labels {ta.get_text()!r} and {tb.get_text()!r} overlap")
    data = [ax for ax in axes if ax.get_label() != "<colorbar>"]
    for lg in legends:
        box = lg.get_window_extent(renderer)
        for ax in data:
            inner = ax.get_window_extent(renderer).padded(-2.0)  # touching the frame is not covering data
            if box.overlaps(inner):
                problems.append(f"a legend ({', '.join(t.get_text() for t in lg.get_texts()[:2])}, ...) lies over "
                                f"the data of axes {ax.get_title()!r}")
    return problems


def save_figure(fig, outputs) -> None:
    """Write fig to every path in outputs, then close it (a figure is drawn for its files only)."""
    plt = pyplot()
    for out in outputs:
        out = str(out)
        with atomic_path(out) as tmp:
            # matplotlib picks the format from the suffix, which the temporary name hides
            fig.savefig(tmp, format=Path(out).suffix.lstrip("."), dpi=DPI,
                        metadata={"CreationDate": None} if out.endswith(".pdf") else {"Software": None})
    plt.close(fig)

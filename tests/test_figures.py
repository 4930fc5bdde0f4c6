"""Figures a reader can read: every committed PNG is drawn at its printed size (a page's text width
at most, the style's DPI, a bounded aspect ratio), and every kind of figure drawn from committed runs
passes ``figure_problems`` (no text under the minimum size, none cut off, no overlapping tick
labels, no legend over data); the loss-curve panels hold at most MAX_ARMS arms besides the reference."""

import struct

import matplotlib.pyplot as plt
import pytest

from conftest import REPO
from lowprec.report import figures
from lowprec.report.curves import panels

RESULTS = REPO / "results"
PNGS = sorted(RESULTS.glob("*/*/figures/*.png"))


def png_size(path):
    """(width px, height px, dots per inch) from the PNG's IHDR and pHYs chunks."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    at = data.find(b"pHYs")
    assert at > 0, f"{path}: no pHYs chunk (resolution)"
    ppm_x, _, unit = struct.unpack(">IIB", data[at + 4:at + 13])
    assert unit == 1, f"{path}: pHYs unit is not the metre"
    return width, height, ppm_x * 0.0254


def test_committed_figures_exist():
    assert len(PNGS) >= 20, PNGS


@pytest.mark.parametrize("path", PNGS, ids=[str(p.relative_to(RESULTS)) for p in PNGS])
def test_committed_png_is_drawn_at_its_printed_size(path):
    width, height, dpi = png_size(path)
    assert round(dpi) == figures.DPI, f"{path}: {dpi:.1f} dpi, the style draws at {figures.DPI}"
    w_in, h_in = width / dpi, height / dpi
    assert 4.0 <= w_in <= figures.WIDTH + 0.01, f"{path}: {w_in:.2f} in wide (page: {figures.WIDTH} in)"
    assert 2.5 <= h_in <= figures.MAX_HEIGHT + 0.01, f"{path}: {h_in:.2f} in high (page: {figures.MAX_HEIGHT} in)"
    assert 0.7 <= width / height <= 3.0, f"{path}: aspect {width / height:.2f} (w/h) outside 0.7-3.0"


def _runs(scale, paper, method=None):
    return [str(p.parent) for p in sorted((RESULTS / "runs" / scale / paper).glob("*/*/s*/provenance.json"))
            if method is None or p.parent.parent.name == method]


def _figures_of(monkeypatch, tmp_path, draw):
    """The figures ``draw`` saves (save_figure closes them; here they stay open to be inspected)."""
    drawn = []
    monkeypatch.setattr(plt, "close", lambda fig=None: drawn.append(fig))
    draw(tmp_path)
    monkeypatch.undo()
    return drawn


def _report(module, *argv):
    import importlib

    return lambda out: importlib.import_module(f"lowprec.report.{module}").main([str(a).replace("OUT", str(out)) for a in argv])


FIGURES = {
    "loss_curves_mor_tiny": _report("curves", "--runs", *_runs("tiny", "mor"), "--title", "MoR (tiny)",
                                    "--out", "OUT/a.png"),
    "loss_curves_baselines_tiny": _report("curves", "--runs", *_runs("tiny", "baselines"), "--title", "baselines",
                                          "--out", "OUT/a.png"),
    "loss_curves_int8_small": _report("curves", "--runs", *_runs("small", "int8_fallback"), "--title", "INT8",
                                      "--out", "OUT/a.png"),
    "loss_gap_matrix": _report("matrix", "--runs", *_runs("tiny", "baselines"), "--baseline", "bf16",
                               "--title", "baselines", "--out", "OUT/a.png"),
    "mor_telemetry_small": _report("mor", "telemetry", "--runs", *_runs("small", "mor"), "--heatmap-method",
                                   "mor_block", "--error-png", "OUT/e.png", "--format-png", "OUT/f.png",
                                   "--summary-csv", "OUT/s.csv"),
    "mor_telemetry_tiny": _report("mor", "telemetry", "--runs", *_runs("tiny", "mor"), "--heatmap-method",
                                  "mor_block", "--error-png", "OUT/e.png", "--format-png", "OUT/f.png",
                                  "--summary-csv", "OUT/s.csv"),
    "mor_share_tiny": _report("mor", "share", "--runs", *_runs("tiny", "mor"), "--csv", "OUT/s.csv",
                              "--png", "OUT/a.png"),
    "int8_fallback_small": _report("int8_fallback", "fallback", "--runs", *_runs("small", "int8_fallback"),
                                   "--csv", "OUT/f.csv", "--summary-csv", "OUT/s.csv", "--png", "OUT/h.png",
                                   "--sweep-png", "OUT/w.png"),
    "int8_outliers_tiny": _report("int8_fallback", "outliers",
                                  "--evals", *[f"{d}/outliers.csv" for d in _runs("tiny", "int8_fallback", "bf16")],
                                  "--ccdfs", *[f"{d}/outlier_ccdf.csv" for d in _runs("tiny", "int8_fallback", "bf16")],
                                  "--csv", "OUT/o.csv", "--md", "OUT/o.md", "--contrast-csv", "OUT/c.csv",
                                  "--png", "OUT/a.png"),
    "int8_throughput": _report("int8_fallback", "throughput", "--gemm", RESULTS / "int8_fallback" / "gemm_h200.csv",
                               "--csv", "OUT/t.csv", "--md", "OUT/t.md", "--png", "OUT/a.png"),
    "int8_finetune_tiny": _report("int8_fallback", "finetune", "--runs", *_runs("tiny", "int8_fallback_finetune"),
                                  "--csv", "OUT/t.csv", "--md", "OUT/t.md", "--png", "OUT/a.png"),
    "gaussws_exactness": _report("gaussws", "exactness", "--evals",
                                 *[f"{d}/exactness.csv" for d in _runs("tiny", "gaussws", "bf16")],
                                 "--csv", "OUT/e.csv", "--png", "OUT/a.png"),
}


@pytest.mark.parametrize("name", FIGURES)
def test_figure_is_readable_at_its_printed_size(name, monkeypatch, tmp_path):
    drawn = _figures_of(monkeypatch, tmp_path, FIGURES[name])
    assert drawn, f"{name}: no figure drawn"
    for fig in drawn:
        problems = figures.figure_problems(fig)
        plt.close(fig)
        assert not problems, f"{name}:\n  " + "\n  ".join(problems[:15])


def test_figure_problems_finds_what_a_reader_cannot_read():
    fig, ax = plt.subplots(figsize=(9, 3))
    ax.plot(range(10), label="a line")
    ax.legend(loc="center")  # over the data
    ax.set_yticks(range(10), [f"label {i}" for i in range(10)], fontsize=5)
    ax.text(9.5, 5, "cut off at the right edge of the figure", fontsize=8)
    fig.set_layout_engine("none")
    problems = "\n".join(figures.figure_problems(fig))
    plt.close(fig)
    assert "larger than the page" in problems and "at 5 pt" in problems
    assert "cut off" in problems and "lies over the data" in problems
    fig, ax = plt.subplots(figsize=(3, 1.5))
    ax.set_yticks(range(40), [f"layer {i}" for i in range(40)])
    problems = "\n".join(figures.figure_problems(fig))
    plt.close(fig)
    assert "overlap" in problems


def test_panels_hold_at_most_max_arms():
    methods = ["bf16"] + [f"mor_{i}" for i in range(9)] + ["fp8_a", "fp8_b", "int8_x"]
    recipes = {"bf16": "bf16", "fp8_a": "fp8_hybrid", "fp8_b": "fp8_delayed", "int8_x": "int8_block",
               **{f"mor_{i}": "mor" for i in range(9)}}
    spec = [{"title": "first three", "methods": ["mor_0", "mor_1", "mor_2", "absent"]}]
    got = panels(methods, recipes, "bf16", spec)
    assert [(p.title, p.reference, p.arms) for p in got] == [
        ("first three", "bf16", ["mor_0", "mor_1", "mor_2"]),
        ("MoR (1/2)", "bf16", ["mor_3", "mor_4", "mor_5"]),   # six left: two balanced parts
        ("MoR (2/2)", "bf16", ["mor_6", "mor_7", "mor_8"]),
        ("FP8, INT8", "bf16", ["fp8_a", "fp8_b", "int8_x"]),  # small families share a panel
    ]
    assert all(len(p.arms) <= figures.MAX_ARMS for p in got)


def test_arm_styles_separate_families():
    styles = figures.arm_styles([("bf16", "bf16"), ("a", "fp8_hybrid"), ("b", "fp8_delayed"), ("c", "mor")], "bf16")
    assert styles["bf16"]["color"] == figures.REFERENCE_COLOR
    blue_a, blue_b, purple = (styles[m]["color"] for m in "abc")
    assert blue_a != blue_b and styles["a"]["linestyle"] != styles["b"]["linestyle"]
    assert blue_a[2] > blue_a[0] and purple[0] > purple[1]  # Blues for FP8, Purples for MoR


def test_figure_panels_name_known_methods(tmp_path, monkeypatch):
    import shutil

    from lowprec import config

    shutil.copytree(REPO / "configs", tmp_path / "configs")
    path = tmp_path / "configs" / "experiments" / "mor.yaml"
    path.write_text(path.read_text().replace("methods: [mor_tensor, mor_block, mor_channel]",
                                             "methods: [mor_tensor, mor_blok, mor_channel]"))
    monkeypatch.setattr(config, "CONFIG_DIR", tmp_path / "configs")
    with pytest.raises(config.ConfigError, match=r"mor.yaml: figure_panels\[1\] \(MoR partitions\): unknown method 'mor_blok'"):
        config.experiment_config("mor")

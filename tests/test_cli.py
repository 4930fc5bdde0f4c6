"""`python -m lowprec`: what each subcommand lists comes from configs/ and the results folder, and the
entry points answer --help without importing torch."""

import csv
import subprocess
import sys

import pytest
import yaml

from conftest import REPO
from lowprec import cli

CONFIGS = REPO / "configs"


def _run(argv, capsys) -> list[str]:
    cli.main(argv)
    return capsys.readouterr().out.splitlines()


def _row(lines, first_cell) -> list[str]:
    """The table row whose first column is ``first_cell``, split into its columns."""
    for line in lines:
        cells = [c for c in line.strip().split("  ") if c.strip()]
        if cells and cells[0].strip() == first_cell:
            return [c.strip() for c in cells]
    raise AssertionError(f"no row {first_cell!r} in:\n" + "\n".join(lines))


def _experiments() -> dict[str, dict]:
    return {p.stem: yaml.safe_load(p.read_text()) for p in sorted((CONFIGS / "experiments").glob("*.yaml"))}


def _grid_methods(exp: dict, scale: str) -> list[str]:
    return exp.get("scales", {}).get(scale, {}).get("methods", list(exp["methods"]))


@pytest.mark.parametrize("argv", [
    ["lowprec", "--help"], ["lowprec", "claims", "--help"], ["lowprec", "methods", "--help"],
    ["lowprec", "scales", "--help"], ["lowprec.train", "--help"], ["lowprec.evaluate", "--help"],
    ["lowprec.bench.e2e_step", "--help"], ["lowprec.bench.gaussws_overhead", "--help"],
    ["lowprec.bench.profile_arm", "--help"], ["lowprec.bench.recipe_step_time", "--help"],
    ["lowprec.bench.quantize_kernel", "--help"], ["lowprec.bench.gaussws_kernel", "--help"],
    ["lowprec.bench.mor_linear", "--help"], ["lowprec.bench.int8_gemm", "--help"],
    ["lowprec.bench.block_scaled_gemm", "--help"], ["lowprec.bench.subtensor_quant", "--help"],
])
def test_help_does_not_import_torch(argv):
    code = ("import runpy, sys\n"
            f"sys.argv = {argv!r}\n"
            "try:\n"
            f"    runpy.run_module({argv[0]!r}, run_name='__main__', alter_sys=True)\n"
            "except SystemExit as e:\n"
            "    code = e.code\n"
            "print('EXIT', code, 'TORCH', 'torch' in sys.modules, file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.stderr.strip().splitlines()[-1] == "EXIT 0 TORCH False", proc.stderr[-2000:]
    assert proc.stdout.startswith("usage: python -m " + argv[0]), proc.stdout[:300]


def test_bench_modules_import_no_torch():
    """The benchmarks' shared modules (lowprec.bench.train_step, .common) load torch only when a
    function needs it, so the entry points that import them answer --help at once."""
    modules = sorted(f"lowprec.bench.{p.stem}" for p in (REPO / "lowprec" / "bench").glob("*.py"))
    assert "lowprec.bench.train_step" in modules and "lowprec.bench.e2e_step" in modules
    code = (f"import importlib, sys\nfor m in {modules!r}:\n    importlib.import_module(m)\n"
            "print('TORCH', 'torch' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0 and proc.stdout.strip() == "TORCH False", proc.stdout + proc.stderr[-2000:]


def test_papers_lists_every_experiment(capsys):
    lines = _run(["papers"], capsys)
    for paper, exp in _experiments().items():
        claims = CONFIGS / "claims" / f"{paper}.yaml"
        n_claims = len(yaml.safe_load(claims.read_text())["claims"]) if claims.is_file() else 0
        row = _row(lines, paper)
        assert row[1:5] == [exp["arxiv"], ", ".join(exp["models"]), str(len(exp["methods"])), str(n_claims)], row
        assert row[-1] == exp["title"]


def test_methods_per_paper_with_their_scales(capsys):
    lines = _run(["methods"], capsys)
    for paper, exp in _experiments().items():
        assert any(line.startswith(f"{paper}: {exp['title']} ({len(exp['methods'])} methods)") for line in lines)
        for method, m in exp["methods"].items():
            label = method + (" (baseline)" if method == exp["baseline"] else "")
            row = _row(lines[lines.index(next(x for x in lines if x.startswith(f"{paper}: "))):], label)
            scales = [sc for sc in ("smoke", "tiny", "small", "medium", "paper") if method in _grid_methods(exp, sc)]
            assert row[1] == m.get("recipe", "bf16") and row[-1] == " ".join(scales), (paper, row)


def test_methods_of_one_scale_and_their_recipes(capsys):
    exp = _experiments()["mor"]
    lines = _run(["methods", "mor", "--scale", "small", "--describe"], capsys)
    small = _grid_methods(exp, "small")
    assert lines[0] == f"mor: {exp['title']} ({len(small)} methods, at small)"
    listed = [line.split()[0] for line in lines[3:]]
    assert listed == small
    from lowprec.recipes import recipe_from_config

    row = _row(lines, "mor_block_b64")
    assert row[2] == "partition=block, block=[64, 64]"
    assert row[-1] == recipe_from_config(exp["methods"]["mor_block_b64"]).description
    assert "64x64 blocks" in row[-1]


def test_unknown_paper_is_named(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["methods", "gausws"])
    assert "unknown paper 'gausws'" in str(e.value) and "gaussws" in str(e.value)


def test_recipes_lists_built_in_and_paper_recipes(capsys):
    from lowprec.recipes import RECIPES, registry

    lines = _run(["recipes"], capsys)
    for name, recipe in RECIPES.items():
        assert _row(lines, name)[-1] == recipe.description
    users = {}
    for paper, exp in _experiments().items():
        for m in exp["methods"].values():
            users.setdefault(m.get("recipe", "bf16"), []).append(paper)
    for name in registry().methods:
        row = _row(lines, name)
        assert row[1].startswith("paper (lowprec.") and row[2] == ", ".join(dict.fromkeys(users[name]))
    assert _row(lines, "ste")[-1].startswith("e.g. ste_")  # no default format: a configured method's


def _claims_csv(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, ["paper", "claim", "statement", "source", "paper_value", "scale", "ours", "detail",
                               "verdict"])
        w.writeheader()
        w.writerows(rows)


def test_claims_show_the_committed_verdicts(tmp_path, capsys):
    registry = yaml.safe_load((CONFIGS / "claims" / "gaussws.yaml").read_text())["claims"]
    ids = [c["id"] for c in registry]
    verdicts = ["reproduced", "not exercised", "inconclusive", "not reproduced", "not run at this scale"]
    _claims_csv(tmp_path / "gaussws" / "small" / "tables" / "claims.csv",
                [{"paper": "gaussws", "claim": c, "ours": f"{i}.5 nats" if i % 2 else "", "verdict": verdicts[i % 5],
                  "scale": "small"} for i, c in enumerate(ids[:-1])])  # the last claim has no row
    lines = _run(["claims", "gaussws", "--results", str(tmp_path)], capsys)
    assert "verdict at small" in lines[1] and "verdict at tiny" not in lines[1]  # only scales with a file
    for i, claim in enumerate(registry):
        row = _row(lines, claim["id"])
        assert row[1] == claim["paper_value"] and row[2] == ", ".join(claim["meaningful_at"])
        assert row[3] == (verdicts[i % 5] if i < len(ids) - 1 else "not committed"), row

    lines = _run(["claims", "gaussws", "--scale", "small", "--results", str(tmp_path)], capsys)
    assert _row(lines, ids[1])[3] == "not exercised (1.5 nats)" and _row(lines, ids[0])[3] == "reproduced"
    lines = _run(["claims", "gaussws", "--scale", "tiny", "--results", str(tmp_path)], capsys)
    assert all(_row(lines, c)[3] == "not committed" for c in ids)


def test_claims_of_the_committed_results(capsys):
    lines = _run(["claims", "mor", "--scale", "small", "-v"], capsys)
    with (REPO / "results" / "mor" / "small" / "tables" / "claims.csv").open(newline="") as f:
        committed = list(csv.DictReader(f))
    for c in committed:
        assert f"    small: ours {c['ours'] or '–'}; {c['verdict']}" in "\n".join(lines)


def test_scales_count_grid_and_complete_runs(tmp_path, capsys):
    from lowprec import config as lpc

    for run, files, lr in (("gaussws/gpt2/bf16/s0", ("metrics.csv", "config.yaml", "provenance.json"), 1),
                           ("mor/nemotron/bf16/s1", ("metrics.csv", "config.yaml", "provenance.json"), 1),
                           ("mor/nemotron/bf16/s2", ("metrics.csv", "config.yaml", "provenance.json"), 2),  # stale
                           ("mor/nemotron/mor_block/s0", ("metrics.csv", "config.yaml"), 1)):  # unfinished
        d = tmp_path / "runs" / "small" / run
        d.mkdir(parents=True)
        paper, model, method, seed = run.split("/")
        cfg = lpc.resolve_run("small", paper, model, method, int(seed[1:]), results=str(tmp_path))
        cfg["train"]["lr"] *= lr  # another learning rate than the grid's: not a run of this grid
        for f in files:
            (d / f).write_text(yaml.safe_dump(cfg) if f == "config.yaml" else "x")
    (tmp_path / "REPORT_small.md").write_text("# report")
    lines = _run(["scales", "--results", str(tmp_path)], capsys)
    default = yaml.safe_load((CONFIGS / "config.yaml").read_text())["scale"]
    for scale in ("smoke", "tiny", "small", "medium", "paper"):
        sc = yaml.safe_load((CONFIGS / "scales" / f"{scale}.yaml").read_text())
        row = _row(lines, scale + (" (default)" if scale == default else ""))
        t = sc["train"]
        assert row[1:4] == [str(len(sc["seeds"])), f"{t['max_steps']} x {t['batch_size'] * t['seq_len']}",
                            str(sc["data"]["vocab_size"])], row
        runs = 0
        for exp in _experiments().values():
            per = exp.get("scales", {}).get(scale, {})
            seeds = len(per.get("seeds", sc["seeds"]))
            runs += len(per.get("models", exp["models"])) * len(_grid_methods(exp, scale)) * seeds
            if "finetune" in exp:
                ft, ft_per = exp["finetune"], per.get("finetune", {})
                runs += len(ft_per.get("models", ft["models"])) * len(ft_per.get("methods", ft["methods"])) * seeds
        assert row[4] == str(runs), (scale, row)
        assert row[5] == ("2" if scale == "small" else "0")
        assert row[6] == ("REPORT_small.md" if scale == "small" else "–")


def test_evaluate_help_names_every_export_format():
    from lowprec.recipes import registry

    assert set(cli.EXPORT_FORMATS) == set(registry().exports)

"""The command line: ``python -m lowprec`` lists what the suite holds (papers, recipes, methods, claims
with their committed verdicts, scales), read from ``configs/`` and the committed ``results/``.

The argument parsers of the entry points that train or evaluate (``python -m lowprec.train``,
``python -m lowprec.evaluate``) live here too, in a module that imports nothing heavy: those modules
parse their arguments with them before torch and Lightning load, so that ``--help`` and a usage
error answer at once (importing them takes seconds).
"""

from __future__ import annotations

import argparse
import csv
import functools
import sys
from pathlib import Path

from . import config as cfglib  # YAML and JSON only: cheap to import

PROG = "python -m lowprec"


# --------------------------------------------------------------------------- text tables

def format_table(headers: list[str], rows: list[list], indent: str = "") -> list[str]:
    """Rows as aligned text columns under a header line and a rule; the last column is not padded."""
    cells = [[str(c) for c in headers]] + [["–" if c is None or c == "" else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r):
        return indent + "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + ("  " if len(r) > 1 else "") + r[-1]

    return [line(cells[0]).rstrip(), indent + "  ".join("-" * w for w in widths)] + [line(r).rstrip() for r in cells[1:]]


def _print(lines: list[str]) -> None:
    sys.stdout.write("\n".join(lines) + "\n")


# --------------------------------------------------------------------------- what the configs hold

def _claims_registry(paper: str) -> list[dict]:
    path = cfglib.CONFIG_DIR / "claims" / f"{paper}.yaml"
    return cfglib.load_yaml(path).get("claims", []) if path.is_file() else []


def _select_papers(names: list[str] | None) -> list[str]:
    known = cfglib.papers()
    for name in names or []:
        if name not in known:
            raise SystemExit(f"{PROG}: error: unknown paper {name!r}; known: {', '.join(known)}")
    return names or known


def _scales_of(paper: str, method: str) -> list[str]:
    return [sc for sc in cfglib.SCALES if method in cfglib.experiment_grid(paper, sc)["methods"]]


def _method_section(method_cfg: dict) -> dict:
    """A method as its run config holds it: its ``train`` overrides go to the run's train section
    (lowprec.config.resolve_run)."""
    return {k: v for k, v in (method_cfg or {}).items() if k != "train"}


def _settings(method_cfg: dict) -> str:
    """A method's own keys as ``key=value`` (the recipe and telemetry interval aside)."""
    out = []
    for key, value in method_cfg.items():
        if key in ("recipe", "telemetry_every"):
            continue
        if isinstance(value, dict):
            out += [f"{key}.{k}={v}" for k, v in value.items()]
        else:
            out.append(f"{key}={value}")
    return ", ".join(out)


def committed_claims(results: Path, paper: str) -> dict[str, dict[str, dict]]:
    """scale -> claim id -> the row of the committed ``results/<paper>/<scale>/tables/claims.csv``."""
    out = {}
    for scale in cfglib.SCALES:
        path = results / paper / scale / "tables" / "claims.csv"
        if path.is_file():
            with path.open(newline="") as f:
                out[scale] = {row["claim"]: row for row in csv.DictReader(f)}
    return out


def complete_runs(results: Path, scale: str) -> list[Path]:
    """The run folders under ``results/runs/<scale>/`` that hold every file a finished run writes,
    less those of the grid committed under a config it no longer has (``config.committed_runs``:
    stale runs count nowhere until they train again)."""
    root = results / "runs" / scale
    done = tuple(sorted(d for d in root.glob("*/*/*/s*") if d.is_dir() and not cfglib.missing_run_files(d)))
    stale = _stale_runs(str(results), scale, done)
    return [d for d in done if d not in stale]


@functools.lru_cache(maxsize=None)
def _stale_runs(results: str, scale: str, done: tuple) -> frozenset:
    """The run folders of ``scale``'s grid that are committed but stale (``done``: the complete ones,
    part of the key so that a folder written since is looked at). Resolving the grid takes about a
    second: the README's writer asks for each claim."""
    runs, finetune = cfglib.grid_runs(cfglib.papers(), scale, results=results)
    return frozenset(Path(cfg["output_dir"]) for group in (runs, finetune)
                     for cfg, _ in cfglib.committed_runs(group)[2].values())


# --------------------------------------------------------------------------- subcommands

def cmd_papers(args) -> list[str]:
    rows = []
    for paper in _select_papers(args.papers):
        exp = cfglib.experiment_config(paper)
        rows.append([paper, exp["arxiv"], ", ".join(exp["models"]), len(exp["methods"]),
                     len(_claims_registry(paper)), exp["title"]])
    return format_table(["paper", "arXiv", "models", "methods", "claims", "title"], rows)


def cmd_recipes(args) -> list[str]:
    from .recipes import RECIPES, recipe_from_config, registry

    users = {}  # recipe -> papers whose methods use it
    first = {}  # recipe -> (name, config) of the first method that uses it
    for paper in cfglib.papers():
        for name, m in cfglib.experiment_config(paper)["methods"].items():
            m = m or {}
            recipe = m.get("recipe", "bf16")
            users.setdefault(recipe, {})[paper] = None
            first.setdefault(recipe, (name, m))
    rows = [[name, "built-in", ", ".join(users.get(name, [])), r.description] for name, r in RECIPES.items()]
    reg = registry()
    for name, method in reg.methods.items():
        try:  # a paper recipe's defaults, where it has a default for every key
            what = "defaults: " + recipe_from_config({"recipe": name}).description
        except ValueError:
            if name not in first:
                what = f"keys: {', '.join(method.keys)}"
            else:
                example, m = first[name]
                what = f"e.g. {example}: " + recipe_from_config(_method_section(m)).description
        rows.append([name, f"paper ({reg.module_of[name]})", ", ".join(users.get(name, [])), what])
    return format_table(["recipe", "kind", "used by", "what each GEMM operand sees"], rows) + [
        "", "A method (configs/experiments/<paper>.yaml) names a recipe and may override its keys and operands; "
            f"`{PROG} methods` lists them."]


def cmd_methods(args) -> list[str]:
    if args.describe:
        from .recipes import recipe_from_config
    lines = []
    for paper in _select_papers(args.papers):
        exp = cfglib.experiment_config(paper)
        grid = set(cfglib.experiment_grid(paper, args.scale)["methods"]) if args.scale else None
        rows = []
        for name, m in exp["methods"].items():
            m = m or {}
            if grid is not None and name not in grid:
                continue
            row = [name + (" (baseline)" if name == exp.get("baseline") else ""), m.get("recipe", "bf16"),
                   _settings(m), " ".join(_scales_of(paper, name))]
            if args.describe:
                row.append(recipe_from_config(_method_section(m)).description)
            rows.append(row)
        heads = ["method", "recipe", "settings", "in the grid at"] + (["what it does"] if args.describe else [])
        where = f", at {args.scale}" if args.scale else ""
        lines += [f"{paper}: {exp['title']} ({len(rows)} methods{where})", *format_table(heads, rows, "  "), ""]
    return lines[:-1]


def cmd_claims(args) -> list[str]:
    results = Path(args.results)
    lines = []
    for paper in _select_papers(args.papers):
        registry = _claims_registry(paper)
        if not registry:
            continue
        committed = committed_claims(results, paper)
        scales = [args.scale] if args.scale else list(committed)
        rows = []
        for claim in registry:
            row = [claim["id"], claim.get("paper_value", ""), ", ".join(claim.get("meaningful_at", []))]
            for sc in scales:
                got = committed.get(sc, {}).get(claim["id"])
                if not got:
                    row.append("not committed")
                else:
                    row.append(f"{got['verdict']} ({got['ours']})" if args.scale and got["ours"] else got["verdict"])
            rows.append(row)
        heads = ["claim", "paper's number", "meaningful at"] + [
            f"verdict at {sc} (ours)" if args.scale else f"verdict at {sc}" for sc in scales]
        title = cfglib.experiment_config(paper)["title"]
        lines += [f"{paper}: {title} ({len(registry)} claims)", *format_table(heads, rows, "  ")]
        if args.verbose:
            for claim in registry:
                lines += ["", f"  {claim['id']}: {claim['statement']}", f"    source: {claim.get('source', '–')}"]
                for sc in scales:
                    got = committed.get(sc, {}).get(claim["id"])
                    if got:
                        lines.append(f"    {sc}: ours {got['ours'] or '–'}; {got['verdict']}"
                                     + (f" ({got['detail']})" if got.get("detail") else ""))
        lines.append("")
    if not lines:
        return ["no claims registered (configs/claims/<paper>.yaml)"]
    return lines + [f"Verdicts from the committed results/<paper>/<scale>/tables/claims.csv under {results}; "
                    "`snakemake --config scale=<scale>` rebuilds them."]


def cmd_scales(args) -> list[str]:
    results = Path(args.results)
    default = cfglib.load_yaml(cfglib.CONFIG_DIR / "config.yaml").get("scale")
    rows = []
    for scale in cfglib.SCALES:
        sc = cfglib.scale_config(scale)
        t = sc["train"]
        grid = 0
        for paper in cfglib.papers():
            g = cfglib.experiment_grid(paper, scale)
            grid += len(g["models"]) * len(g["methods"]) * len(g["seeds"])
            ft = cfglib.finetune_grid(paper, scale)
            grid += len(ft["models"]) * len(ft["methods"]) * len(ft["seeds"]) if ft else 0
        report = Path(cfglib.report_path(str(results), scale))
        rows.append([scale + (" (default)" if scale == default else ""), len(sc["seeds"]),
                     f"{t['max_steps']} x {t['batch_size'] * t['seq_len']}", sc["data"]["vocab_size"], grid,
                     len(complete_runs(results, scale)), report.name if report.is_file() else "–",
                     " ".join(sc.get("description", "").split())])
    return format_table(["scale", "seeds", "steps x tokens", "vocab", "runs", "committed", "report", "what it is"],
                        rows) + [
        "", "steps x tokens: the scale's defaults (configs/scales/<scale>.yaml); a paper may override them per "
            "scale (configs/experiments/<paper>.yaml). runs: every paper's grid, fine-tuning included.",
        "Run a scale with `snakemake --cores all --config scale=<scale>`."]


# --------------------------------------------------------------------------- parsers

def main_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="lowprec: a reproducibility suite for low-precision LLM training papers.\n"
                    "Lists the papers, recipes, methods, claims and scales that configs/ defines.",
        epilog="Training and reports run through Snakemake: `snakemake --cores all` (see README.md).\n"
               "Other entry points: python -m lowprec.train --help, python -m lowprec.evaluate --help.")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", required=True)
    results_default = str(cfglib.REPO_ROOT / "results")

    p = sub.add_parser("papers", help="the papers (experiments) with their models, methods and claims")
    p.add_argument("papers", nargs="*", metavar="PAPER", help="paper ids (default: all)")
    p.set_defaults(func=cmd_papers)

    p = sub.add_parser("recipes", help="the recipes: what each GEMM operand of a linear layer sees")
    p.set_defaults(func=cmd_recipes)

    p = sub.add_parser("methods", help="the methods of each paper: recipe, settings, scales")
    p.add_argument("papers", nargs="*", metavar="PAPER", help="paper ids (default: all)")
    p.add_argument("--scale", choices=cfglib.SCALES, help="only the methods in this scale's grid")
    p.add_argument("--describe", action="store_true",
                   help="also build each method's recipe and say what it does (imports torch)")
    p.set_defaults(func=cmd_methods)

    p = sub.add_parser("claims", help="the claims of each paper with their committed verdicts per scale")
    p.add_argument("papers", nargs="*", metavar="PAPER", help="paper ids (default: all)")
    p.add_argument("--scale", choices=cfglib.SCALES, help="one scale, with our number beside the verdict")
    p.add_argument("-v", "--verbose", action="store_true", help="statement, source and test detail of each claim")
    p.add_argument("--results", default=results_default, help="results folder (default: %(default)s)")
    p.set_defaults(func=cmd_claims)

    p = sub.add_parser("scales", help="the scales: budget, seeds, runs in the grid and committed runs")
    p.add_argument("--results", default=results_default, help="results folder (default: %(default)s)")
    p.set_defaults(func=cmd_scales)
    return ap


def train_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m lowprec.train", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train one run from its resolved config and write its run folder.",
        epilog="""\
The config is one run's resolved YAML (what lowprec.config.resolve_run returns): the workflow writes
it to results/configs/<scale>/<paper>/<model>/<method>/s<seed>.yaml for every run that trains.

The run writes to its output_dir (results/runs/<scale>/<paper>/<model>/<method>/s<seed>/):
  metrics.csv       one row per logged step (losses, lr, tokens, tokens/s, peak memory)
  telemetry.csv.gz  numerics per layer, GEMM and operand, every method.telemetry_every steps
  config.yaml       the resolved config
  provenance.json   commit, versions, device, times, status (written last)
  checkpoints/      last.ckpt: a killed run started again with the same config resumes from it
Progress (step, train loss, tokens/s, ETA) goes to stdout at most every 10 s.

Exit status: 0 when the run completed or diverged (a non-finite loss is a result: status
'diverged'); 1 with one line 'lowprec.train: error: ...' for a mistake in the config, data or
checkpoint. Environment: LOWPREC_FAST_PATH=cuda|all|off (the GPU fast path),
LOWPREC_QUANT_KERNELS=0 and LOWPREC_MOR_KERNEL=0 (turn the Triton kernels off).""")
    ap.add_argument("--config", required=True, metavar="RUN_YAML", help="the run's resolved config (YAML)")
    return ap


def evaluate_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m lowprec.evaluate", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Validation loss of a finished run's final weights, as trained and after round-to-nearest "
                    "export of its linear-layer weights to MX formats.",
        epilog="Reads the run's config.yaml and checkpoints/last.ckpt (not committed: the run must have trained "
               "here) and its validation set; writes one CSV row per export format (model, method, seed, export, "
               "val_loss). Runs on the GPU where there is one, in fp32 either way; LOWPREC_EVAL_DEVICE=cpu|cuda "
               "chooses.")
    ap.add_argument("--run", required=True, metavar="RUN_DIR", help="a finished run folder")
    ap.add_argument("--export", nargs="+", default=["none"], metavar="FORMAT",
                    help="none (the weights as trained) or a weight export of the method modules (WEIGHT_EXPORTS): "
                         f"{', '.join(EXPORT_FORMATS)} (default: none)")
    ap.add_argument("--out", required=True, metavar="CSV", help="the CSV to write")
    return ap


# the weight exports of the method modules (lowprec.recipes.registry().exports; a test holds the two
# equal; the modules import torch)
EXPORT_FORMATS = ("mxfp8", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4", "e4m3", "e3m2", "e2m3", "e2m1")


def main(argv: list[str] | None = None) -> None:
    args = main_parser().parse_args(argv)
    try:
        _print(args.func(args))
    except cfglib.ConfigError as e:
        sys.exit(f"{PROG}: error: {e}")
    except BrokenPipeError:  # `python -m lowprec claims | head`
        sys.stderr.close()


if __name__ == "__main__":
    main()

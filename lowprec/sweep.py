"""A size sweep: which model x token budget a scale needs for the papers' phenomena to appear
(``configs/sweeps/<name>.yaml``, which says what is measured and why).

    python -m lowprec.sweep plan  configs/sweeps/medium.yaml     # runs, parameters, tokens, status
    python -m lowprec.sweep run   configs/sweeps/medium.yaml [--only PATTERN]   # train (lowprec.train)
    python -m lowprec.sweep table configs/sweeps/medium.yaml     # the table, from the run folders

Each point is a shape (layers, width, heads) given to the arms' models; the FFN keeps the ratio to
the width that the model file gives at the sweep's scale (rounded up to a multiple of 128, the MoR
and INT8 block sizes divide it). A run lasts the largest budget; the table reads each budget inside
it: the fallback ratio and the E4M3 share over the telemetry up to that step, the loss gap at the
validation of that step. The table is written whatever part of the sweep has run (a missing run
leaves its cells empty and is counted), so it grows job by job.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import math
import subprocess
import sys
from functools import reduce
from pathlib import Path

from . import config as lpc
from .io import write_json, write_yaml

FFN_MULTIPLE = 128
SWEEPS_DIR = lpc.CONFIG_DIR / "sweeps"
SWEEP_RUN = "sweep"  # the kind of a sweep's run in lowprec.packer (beside a grid's PRETRAIN and FINETUNE)


class SweepError(RuntimeError):
    """A problem with a sweep file or its runs; the message names it."""


def load_sweep(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise SweepError(f"{path}: no such sweep file")
    sweep = lpc.validate(lpc.load_yaml(path), "sweep", f"sweep file {path}")
    b = sweep["budgets"]
    if b != sorted(set(b)):
        raise SweepError(f"{path}: budgets must increase, got {b}")
    names = [p["name"] for p in sweep["points"]]
    if len(set(names)) != len(names):
        raise SweepError(f"{path}: point names repeat: {names}")
    for p in sweep["points"]:
        if p["d_model"] % p["heads"]:
            raise SweepError(f"{path}: point {p['name']}: d_model {p['d_model']} is not a multiple of heads {p['heads']}")
    return sweep


def scale_sweeps(scale: str) -> list[tuple[Path, dict]]:
    """(file, its settings as written) of each size sweep (``SWEEPS_DIR``) of ``scale``; read
    without validation, so that the report's builder can list them cheaply."""
    files = ((p, lpc.load_yaml(p)) for p in sorted(SWEEPS_DIR.glob("*.yaml")))
    return [(p, sweep) for p, sweep in files if sweep.get("scale") == scale]


def point_shape(point: dict, model: str, scale: str) -> dict:
    """The model shape of a sweep point: its layers, width and heads; the FFN at the model file's
    ratio to the width at this scale."""
    base = lpc.model_config(model, scale)
    ffn = math.ceil(base["ffn"] / base["d_model"] * point["d_model"] / FFN_MULTIPLE) * FFN_MULTIPLE
    return {"layers": point["layers"], "d_model": point["d_model"], "heads": point["heads"],
            "kv_heads": point["heads"], "ffn": ffn}


def _arm_methods(arm: dict) -> list[str]:
    return [arm["method"]] + ([arm["baseline"]] if arm.get("baseline") else [])


def sweep_runs(sweep: dict, results: str = "results") -> dict[str, dict]:
    """Run name (``<point>/<paper>/<model>/<method>/s<seed>``) -> resolved run config: the scale's
    settings, the point's shape, the largest budget's steps, a validation at every budget. The data
    is the scale's (``<results>/data/``)."""
    scale, budgets = sweep["scale"], sweep["budgets"]
    steps = {"max_steps": budgets[-1], "val_every": reduce(math.gcd, budgets)}
    runs = {}
    for point in sweep["points"]:
        for arm in sweep["arms"].values():
            shape = point_shape(point, arm["model"], scale)
            for method in _arm_methods(arm):
                for seed in sweep["seeds"]:
                    cfg = lpc.resolve_run(scale, arm["paper"], arm["model"], method, seed, results=results,
                                          overrides={"model": shape, "train": steps})
                    name = f"{point['name']}/{arm['paper']}/{arm['model']}/{method}/s{seed}"
                    cfg["output_dir"] = f"{sweep['runs']}/{name}"
                    runs[name] = cfg
    return runs


def run_parameters(cfg: dict) -> int:
    """The parameters of a resolved run config's model."""
    from .models import shape_parameter_count

    return shape_parameter_count(cfg["model"], cfg["data"]["vocab_size"])


def tokens_per_step(cfg: dict) -> int:
    """The tokens of one optimizer step of a resolved run config."""
    t = cfg["train"]
    return t["batch_size"] * t["grad_accum"] * t["seq_len"]


def plan_lines(sweep: dict, runs: dict) -> list[str]:
    first = next(iter(runs.values()))
    t, per_step = first["train"], tokens_per_step(first)
    lines = [f"{len(runs)} runs of {t['max_steps']} steps x {per_step} tokens = {t['max_steps'] * per_step / 1e6:.1f}M "
             f"tokens each; budgets {', '.join(f'{b} steps ({b * per_step / 1e6:.1f}M tokens)' for b in sweep['budgets'])}"]
    for name, cfg in runs.items():
        status, why = lpc.run_status(cfg)
        m = cfg["model"]
        lines.append(f"  {name:<55} {m['layers']:>3}x{m['d_model']:<5} ffn {m['ffn']:<5} "
                     f"{run_parameters(cfg) / 1e6:7.1f}M params  {status}{': ' + why if why else ''}")
    return lines


def config_dir(sweep_path: str | Path, results: str = "results") -> Path:
    """Where a sweep's run configs are written before training (by ``run`` and by lowprec.packer)."""
    return Path(results) / "configs" / "sweeps" / Path(sweep_path).stem


def run(runs: dict, only: list[str] | None = None, config_dir: str | Path = "results/configs/sweeps") -> list[str]:
    """Train the runs (all, or those whose names match a pattern of ``only``) that are not current,
    one after another, each from its config written under ``config_dir``; the names of those trained."""
    chosen = [n for n in runs if not only or any(fnmatch.fnmatchcase(n, p) for p in only)]
    if only and not chosen:
        raise SweepError(f"--only {only}: no run of the sweep matches; runs: {list(runs)[:6]} ...")
    trained = []
    for name in chosen:
        cfg = runs[name]
        if lpc.run_status(cfg)[0] == "current":
            continue
        path = Path(config_dir) / f"{name}.yaml"
        write_yaml(path, cfg)
        proc = subprocess.run([sys.executable, "-m", "lowprec.train", "--config", str(path)])
        if proc.returncode:
            raise SweepError(f"run {name} failed (lowprec.train exit {proc.returncode}); see its output above")
        trained.append(name)
    return trained


# --------------------------------------------------------------------------- the table

def _loaded(runs: dict, names: list[str]):
    from .report.runs import load_run

    have = [n for n in names if lpc.run_status(runs[n])[0] == "current"]
    return [load_run(runs[n]["output_dir"]) for n in have], len(names) - len(have)


def _val_at(run, step: int) -> float:
    m = run.metrics.dropna(subset=["val_loss"])
    m = m[m["step"] == step]
    return float(m["val_loss"].iloc[-1]) if len(m) else math.nan


def _fallback(tel, budget: int) -> dict:
    """(a) from the arm's fallback telemetry (``fallback_telemetry``, read once per point): the
    ratio over the budget and over each half, pooled over the seeds, and "k/n" (``a_seeds``): in
    how many of the n seeds the ratio alone is > 0 and higher in the second half (the pooled (a)
    can rest on one hot seed)."""
    tel = tel[tel["step"] <= budget]
    if tel.empty:
        return {}

    def measures(t) -> tuple:
        ratio = lambda t: t["n_fallback"].sum() / t["n_blocks"].sum() if len(t) else math.nan  # noqa: E731
        return ratio(t), ratio(t[t["step"] <= budget / 2]), ratio(t[t["step"] > budget / 2])

    rising = [r > 0 and late > early for r, early, late in (measures(t) for _, t in tel.groupby("seed"))]
    return dict(zip(("fallback_ratio", "fallback_early", "fallback_late"), measures(tel)),
                a_seeds=f"{sum(rising)}/{len(rising)}")


def _hot_steps(loaded):
    """Per seed and telemetry step, how hot the GLU down-projection's input blocks are, the
    precursor of (a): the largest block amax over the median non-zero one (under the absmax rule:
    tau x amax / threshold) of its hottest layer; the rule sends a block to 16 bits above tau (8 by
    default). None without such telemetry. Read once per point, sliced per budget (``_hot_blocks``)."""
    import pandas as pd

    from .methods.int8_fallback_rules import DEFAULTS
    from .telemetry import read_telemetry

    frames = []
    for r in loaded:
        tel = read_telemetry(r.dir)
        if tel is None or not {"amax", "fallback_threshold", "rule"} <= set(tel):
            continue
        tel = tel[(tel["gemm"] == "fprop") & (tel["operand"] == "x") & (tel["rule"] == "absmax")
                  & tel["layer"].astype(str).str.endswith("down_proj") & (tel["fallback_threshold"] > 0)]
        tau = float(r.config["method"].get("tau", DEFAULTS["tau"]))
        frames.append(tel.assign(seed=r.seed, ratio=tau * tel["amax"] / tel["fallback_threshold"]))
    if not frames:
        return None
    return pd.concat(frames).groupby(["seed", "step"])["ratio"].max().reset_index()


def _hot_blocks(per_step, budget: int) -> dict:
    """``_hot_steps`` averaged over the steps of each half of the budget."""
    if per_step is None:
        return {}
    per_step = per_step[per_step["step"] <= budget]
    half = lambda t: float(t["ratio"].mean()) if len(t) else math.nan  # noqa: E731
    return {"hot_block_early": half(per_step[per_step["step"] <= budget / 2]),
            "hot_block_late": half(per_step[per_step["step"] > budget / 2])}


def _e4m3(loaded, budget: int) -> dict:
    import pandas as pd

    from .report.mor import decisions

    frames = [d for d in (decisions(r) for r in loaded) if d is not None]
    if not frames:
        return {}
    dec = pd.concat(frames)
    dec = dec[dec["step"] <= budget]
    return {"e4m3_pct": 100 * dec["e4m3"].mean()} if len(dec) else {}


def _gap(treated, baseline, budget: int) -> dict:
    import numpy as np

    base = {r.seed: _val_at(r, budget) for r in baseline}
    diffs = [_val_at(r, budget) - base[r.seed] for r in treated if r.seed in base]
    diffs = [d for d in diffs if not math.isnan(d)]
    if not diffs:
        return {}
    b = [v for v in base.values() if not math.isnan(v)]
    return {"loss_gap": float(np.mean(diffs)), "seed_sd": float(np.std(b, ddof=1)) if len(b) > 1 else math.nan,
            "seeds": len(diffs)}


def _gpus(loaded) -> str:
    """The GPUs the point's runs trained on (their speeds are of these cards, shared by the job's runs)."""
    names = {(r.provenance.get("device") or {}).get("gpu") for rs in loaded.values() for r in rs}
    return "; ".join(sorted(n for n in names if n))


def _tokens_per_s(loaded) -> float:
    v = [r.provenance.get("mean_tokens_per_s") for r in loaded if r.provenance.get("mean_tokens_per_s")]
    return sum(v) / len(v) if v else math.nan


COLUMNS = ["point", "layers", "d_model", "budget_steps", "tokens_m", "params_m_fallback", "params_m_mor",
           "params_m_gaussws", "fallback_ratio", "fallback_early", "fallback_late", "hot_block_early",
           "hot_block_late", "e4m3_pct", "loss_gap",
           "seed_sd", "seeds", "a_fallback_rising", "a_seeds", "b_mor_bf16", "c_curves_separate", "all_three",
           "tok_s_fallback", "tok_s_mor", "tok_s_gaussws", "gpus", "runs_missing"]


def table(sweep: dict, runs: dict):
    """One row per point and budget (COLUMNS): the three measures and whether each holds:
    (a) fallback ratio > 0 and higher in the second half of the steps than in the first (pooled
    over the seeds; ``a_seeds`` counts the seeds where it holds alone; with its precursor,
    ``_hot_steps``; neither decides anything), (b) E4M3
    share < 100 %, (c) |mean per-seed loss gap| > the baseline's seed standard deviation."""
    import pandas as pd

    from .report.int8_fallback import fallback_telemetry

    arms = sweep["arms"]
    rows = []
    for point in sweep["points"]:
        names = {key: {m: [n for n in runs if n.startswith(f"{point['name']}/{arm['paper']}/{arm['model']}/{m}/")]
                       for m in _arm_methods(arm)} for key, arm in arms.items()}
        loaded, missing = {}, 0
        for key, by_method in names.items():
            for m, ns in by_method.items():
                loaded[(key, m)], k = _loaded(runs, ns)
                missing += k
        fallback_runs = loaded[("fallback", arms["fallback"]["method"])]
        fallback_tel, hot_steps = fallback_telemetry(fallback_runs), _hot_steps(fallback_runs)  # once a point
        for budget in sweep["budgets"]:
            first = runs[names["fallback"][arms["fallback"]["method"]][0]]
            row = {"point": point["name"], "layers": point["layers"], "d_model": point["d_model"],
                   "budget_steps": budget, "tokens_m": budget * tokens_per_step(first) / 1e6,
                   "runs_missing": missing}
            for key, arm in arms.items():
                row[f"params_m_{key}"] = run_parameters(runs[names[key][arm["method"]][0]]) / 1e6
                row[f"tok_s_{key}"] = _tokens_per_s(loaded[(key, arm["method"])])
            row["gpus"] = _gpus(loaded)
            row |= _fallback(fallback_tel, budget)
            row |= _hot_blocks(hot_steps, budget)
            row |= _e4m3(loaded[("mor", arms["mor"]["method"])], budget)
            g = arms["gaussws"]
            row |= _gap(loaded[("gaussws", g["method"])], loaded[("gaussws", g["baseline"])], budget)
            rows.append(row)
    df = pd.DataFrame(rows).reindex(columns=COLUMNS)
    fr, e4, gap, sd = (df[c].astype(float) for c in ("fallback_ratio", "e4m3_pct", "loss_gap", "seed_sd"))
    # a measure that is missing decides nothing: its column stays empty, not False
    df["a_fallback_rising"] = ((fr > 0) & (df["fallback_late"].astype(float) > df["fallback_early"].astype(float))
                               ).where(fr.notna() & df["fallback_late"].notna())
    df["b_mor_bf16"] = (e4 < 100).where(e4.notna())
    df["c_curves_separate"] = (gap.abs() > sd).where(gap.notna() & sd.notna())
    holds = df[["a_fallback_rising", "b_mor_bf16", "c_curves_separate"]]
    df["all_three"] = holds.eq(True).all(axis=1).where(holds.notna().all(axis=1))
    return df


def chosen(df) -> str:
    """The sweep's answer in one line: the first point and budget (smallest first) where all three
    hold, or why none is chosen yet."""
    hit = df[df["all_three"].eq(True)]
    if len(hit):
        r = hit.iloc[0]
        return f"chosen: {r['point']} at {r['budget_steps']} steps ({r['tokens_m']:.1f}M tokens): all three hold"
    if df["all_three"].isna().any():
        return "none chosen yet: some points lack runs (runs_missing) or a measure"
    return "none chosen: no point and budget of the sweep shows all three (the budget runs out first)"


def write_table(sweep: dict, sweep_path: Path, runs: dict, out: Path | None = None) -> tuple:
    from . import provenance
    from .io import atomic_path

    df = table(sweep, runs)
    out = Path(out or sweep["table"])
    with atomic_path(out) as tmp:
        df.to_csv(tmp, index=False, float_format="%.6g")
    done = {n: c for n, c in runs.items() if lpc.run_status(c)[0] == "current"}
    from .report.runs import load_run

    prov = {"sweep": str(sweep_path), "sweep_sha256": hashlib.sha256(sweep_path.read_bytes()).hexdigest(),
            "written": provenance.now(), "git_commit": provenance.git_commit(), "answer": chosen(df),
            "runs": {n: {k: load_run(c["output_dir"]).provenance.get(k)
                         for k in ("git_commit", "git_dirty", "device", "status", "wall_s", "mean_tokens_per_s")}
                     for n, c in done.items()},
            "runs_missing": sorted(set(runs) - set(done))}
    write_json(out.with_name(out.stem + ".provenance.json"), prov)
    return df, out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["plan", "run", "table"])
    ap.add_argument("sweep", help="configs/sweeps/<name>.yaml")
    ap.add_argument("--results", default="results", help="results root whose data/ holds the scale's prepared data")
    ap.add_argument("--only", nargs="*", help="run: only the runs whose names match these patterns (fnmatch)")
    ap.add_argument("--out", help="table: CSV path (default: the sweep's table)")
    args = ap.parse_args(argv)
    try:
        sweep = load_sweep(args.sweep)
        runs = sweep_runs(sweep, args.results)
        if args.command == "plan":
            print("\n".join(plan_lines(sweep, runs)))
        elif args.command == "run":
            trained = run(runs, args.only, config_dir(args.sweep, args.results))
            print(f"trained {len(trained)} run(s)")
        else:
            df, out = write_table(sweep, Path(args.sweep), runs, args.out)
            print(df.to_string(index=False))
            print(f"wrote {out}; {chosen(df)}")
    except (SweepError, lpc.ConfigError) as e:
        sys.exit(f"lowprec.sweep: error: {e}")


if __name__ == "__main__":
    main()

"""Configuration: YAML files under ``configs/``, merged per scale, validated by JSON schemas.

The flow is one-way: the workflow config (``configs/config.yaml`` + ``--config`` overrides) names a
scale and the papers; ``resolve_run`` turns (scale, paper, model, method, seed) into one run config,
the only thing ``python -m lowprec.train`` reads.  Every value a run used is in that file.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]


def env_switch(name: str, default: bool = True) -> bool:
    """A binary ``LOWPREC_*`` switch: ``name`` set to 1 (on) or 0 (off), ``default`` unset; any other
    value is an error naming the variable, so that a typo never quietly runs the other path."""
    value = os.environ.get(name)
    if value is None:
        return default
    if value not in ("0", "1"):
        raise ValueError(f"{name} must be 0 or 1, got {value!r}")
    return value == "1"


CONFIG_DIR = Path(os.environ.get("LOWPREC_CONFIGS", REPO_ROOT / "configs"))
SCALES = ("smoke", "tiny", "small", "medium", "paper")


class ConfigError(ValueError):
    """A configuration problem; the message names the file and/or key."""


def load_yaml(path: str | os.PathLike) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = _parse_yaml(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return copy.deepcopy(data)  # the caller may change it; the cached parse stays as read


@functools.lru_cache(maxsize=512)
def _parse_yaml(text: str):
    """Parsed once per distinct file content: resolving a grid reads the same scale, model and
    experiment files once per run, and the pure-Python parser dominated the workflow's start-up."""
    return yaml.safe_load(text)


def deep_merge(base: dict, override: dict) -> dict:
    """Recursive dict merge; ``override`` wins, lists are replaced, not concatenated."""
    out = copy.deepcopy(base)
    for k, v in (override or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _registry():
    """All schema files, addressable by file name so that they can ``$ref`` each other."""
    files = sorted((CONFIG_DIR / "schema").glob("*.schema.yaml"))
    # parsing the schemas dominated resolving a large grid: parse once per version of the files
    return _load_registry(tuple((str(p), p.stat().st_mtime_ns) for p in files))


@functools.lru_cache(maxsize=4)
def _load_registry(files: tuple):
    from referencing import Registry, Resource

    return Registry().with_resources([(Path(p).name, Resource.from_contents(load_yaml(p))) for p, _ in files])


def validate(cfg: dict, schema_name: str, where: str = "config") -> dict:
    """Validate against a JSON schema; the error names the offending key path."""
    import jsonschema

    registry = _registry()
    schema = registry.contents(f"{schema_name}.schema.yaml")
    validator = jsonschema.Draft202012Validator(schema, registry=registry)
    errors = sorted(validator.iter_errors(cfg), key=lambda e: list(e.absolute_path))
    if errors:
        lines = []
        for e in errors[:10]:
            key = ".".join(str(p) for p in e.absolute_path) or "<top level>"
            lines.append(f"  {key}: {e.message}")
        raise ConfigError(f"invalid {where} ({len(errors)} problem(s)):\n" + "\n".join(lines))
    return cfg


def scale_config(scale: str) -> dict:
    if scale not in SCALES:
        raise ConfigError(f"config key 'scale': unknown scale {scale!r}; choose one of {list(SCALES)}")
    return validate(load_yaml(CONFIG_DIR / "scales" / f"{scale}.yaml"), "scale", f"scale file {scale}.yaml")


def papers() -> list[str]:
    """The experiments of ``configs/experiments/`` (file stems): those that reproduce a paper (an
    arXiv id) by name, then the comparisons that reproduce none (``arxiv: n/a``, e.g. the
    cross-recipe baselines), the order of the workflow's default selection and its report."""
    stems = sorted(p.stem for p in (CONFIG_DIR / "experiments").glob("*.yaml"))
    return sorted(stems, key=lambda s: load_yaml(CONFIG_DIR / "experiments" / f"{s}.yaml").get("arxiv") == "n/a")


def experiment_config(paper: str) -> dict:
    path = CONFIG_DIR / "experiments" / f"{paper}.yaml"
    if not path.is_file():
        raise ConfigError(f"config key 'papers': unknown paper {paper!r}; known: {sorted(papers())}")
    exp = validate(load_yaml(path), "experiment", f"experiment file {path.name}")
    for i, panel in enumerate(exp.get("figure_panels", [])):
        for name in [*panel["methods"], *([panel["reference"]] if "reference" in panel else [])]:
            if name not in exp["methods"]:
                raise ConfigError(f"experiment file {path.name}: figure_panels[{i}] ({panel['title']}): unknown "
                                  f"method {name!r}; known: {list(exp['methods'])}")
    return exp


def model_config(name: str, scale: str) -> dict:
    path = CONFIG_DIR / "models" / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (CONFIG_DIR / "models").glob("*.yaml"))
        raise ConfigError(f"unknown model {name!r} (no {path}); known: {known}")
    spec = validate(load_yaml(path), "model", f"model file {path.name}")
    if scale not in spec["sizes"]:
        raise ConfigError(f"model file {path.name}: no size for scale {scale!r} under 'sizes'")
    return {"name": name, "family": spec["family"], **spec.get("common", {}), **spec["sizes"][scale]}


def workflow_config(cfg: dict) -> dict:
    """Validate the Snakemake config and attach the scale's defaults (``cfg['scale_cfg']``)."""
    cfg = dict(cfg)
    # `--config reuse_runs=true` arrives as the string 'true' (Snakemake parses only True/False)
    flags = [k for k, v in _registry().contents("workflow.schema.yaml")["properties"].items()
             if v.get("type") == "boolean"]
    for k in flags:
        if isinstance(cfg.get(k), str) and cfg[k].lower() in ("true", "false"):
            cfg[k] = cfg[k].lower() == "true"
    cfg = validate(cfg, "workflow", "workflow config (configs/config.yaml / --config)")
    out = dict(cfg)
    out["scale_cfg"] = scale_config(cfg["scale"])
    if out["papers"] == "all":
        out["papers"] = papers()
    for paper in out["papers"]:
        experiment_config(paper)
    return out


def experiment_grid(paper: str, scale: str) -> dict:
    """Models, methods and seeds that the paper's experiment runs at this scale."""
    exp = experiment_config(paper)
    sc = scale_config(scale)
    per_scale = exp.get("scales", {}).get(scale, {})
    return {
        "models": per_scale.get("models", exp["models"]),
        "methods": per_scale.get("methods", list(exp["methods"])),
        "seeds": per_scale.get("seeds", sc["seeds"]),
    }


def data_id(data_cfg: dict) -> str:
    """Directory name of a prepared dataset; changes whenever anything that shapes the tokens does:
    the data config and, for a local corpus, its files' names and contents (a bundled corpus is
    pinned by its sha256 in the config)."""
    key_cfg = dict(data_cfg)
    if isinstance(data_cfg.get("tokenizer"), str):
        # another preparation's tokenizer, under whichever results root the caller gave (relative or
        # absolute): hashed as under the default root, "results", as the committed ids were
        key_cfg["tokenizer"] = "/".join(("results", *Path(data_cfg["tokenizer"]).parts[-3:]))
    if data_cfg["source"] == "local" and data_cfg.get("path"):
        from .data import DataError, local_corpus_digest  # imports numpy: only for local corpora

        try:
            key_cfg["content_sha256"] = local_corpus_digest(data_cfg["path"])
        except DataError as e:  # its message names data.path
            raise ConfigError(str(e)) from e
    key = json.dumps(key_cfg, sort_keys=True)
    src = data_cfg["source"]
    if src == "local":
        tag = Path(str(data_cfg.get("path", ""))).stem
    elif src == "debian":
        tag = str((data_cfg.get("package") or {}).get("name", src))
    else:
        tag = str(data_cfg.get("name", src)).replace("/", "-")
    return f"{tag}-bpe{data_cfg['vocab_size']}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def resolve_run(scale: str, paper: str, model: str, method: str, seed: int,
                results: str = "results", overrides: dict | None = None) -> dict:
    """The complete config of one training run (what ``lowprec.train`` reads)."""
    sc = scale_config(scale)
    exp = experiment_config(paper)
    if method not in exp["methods"]:
        raise ConfigError(f"experiment {paper}: unknown method {method!r}; known: {list(exp['methods'])}")
    per_scale = exp.get("scales", {}).get(scale, {})
    train = deep_merge(deep_merge(sc["train"], exp.get("train", {})), per_scale.get("train", {}))
    method_cfg = copy.deepcopy(exp["methods"][method] or {})
    train = deep_merge(train, method_cfg.pop("train", {}))
    data = deep_merge(deep_merge(sc["data"], exp.get("data", {})), per_scale.get("data", {}))
    run = {
        "paper": paper,
        "scale": scale,
        "run_id": f"{model}/{method}/s{seed}",
        "seed": int(seed),
        "model": model_config(model, scale),
        "method": {"name": method, **method_cfg},
        "data": {**data, "dir": f"{results}/data/{data_id(data)}"},
        "train": train,
        "logging": deep_merge(sc.get("logging", {}), exp.get("logging", {})),
        "output_dir": f"{results}/runs/{scale}/{paper}/{model}/{method}/s{seed}",
    }
    run = deep_merge(run, overrides or {})
    run = validate(run, "run", f"run config {run['run_id']}")
    from .preflight import check_run  # method, seq_len, batch split: before any job runs

    check_run(run, f"run config {paper} {run['run_id']}: ")
    return run


def check_global_batch(batch_size: int, world_size: int, where: str = "") -> None:
    """``train.batch_size`` is the global batch (all ranks together); each rank takes an equal share."""
    if batch_size % world_size:
        raise ConfigError(f"{where}train.batch_size={batch_size} is the global batch and must be divisible "
                          f"by the number of processes, train.devices x train.num_nodes = {world_size}")


def finetune_grid(paper: str, scale: str) -> dict | None:
    """Models, methods and seeds of the paper's fine-tuning runs at this scale (None if it has none)."""
    exp = experiment_config(paper)
    ft = exp.get("finetune")
    if not ft:
        return None
    per_scale = exp.get("scales", {}).get(scale, {}).get("finetune", {})
    grid = experiment_grid(paper, scale)
    return {"from": ft["from"], "models": per_scale.get("models", ft.get("models", grid["models"])),
            "methods": per_scale.get("methods", ft["methods"]), "seeds": grid["seeds"]}


def resolve_finetune_run(scale: str, paper: str, model: str, method: str, seed: int,
                         results: str = "results", overrides: dict | None = None) -> dict:
    """The config of one fine-tuning run: ``method`` (its recipe and options as in pre-training)
    trained from the final weights of the ``finetune.from`` run of the same model and seed, on the
    scale's corpus narrowed by ``finetune.data`` (another corpus if it names another ``source``)
    and encoded with that run's tokenizer (token ids must mean what they meant in pre-training);
    ``finetune.train`` then the scale's ``finetune.train`` override the run's train settings.
    Output: ``runs/<scale>/<paper>_finetune/``."""
    exp = experiment_config(paper)
    ft = exp.get("finetune")
    if not ft:
        raise ConfigError(f"experiment {paper}: no 'finetune' section")
    for key, name in (("finetune.from", ft["from"]), ("finetune.methods", method)):
        if name not in exp["methods"]:
            raise ConfigError(f"experiment {paper}: {key}: unknown method {name!r}; known: {list(exp['methods'])}")
    source = resolve_run(scale, paper, model, ft["from"], seed, results=results, overrides=overrides)
    run = resolve_run(scale, paper, model, method, seed, results=results, overrides=overrides)
    per_scale = exp.get("scales", {}).get(scale, {}).get("finetune", {})
    train = deep_merge(deep_merge(run["train"], ft.get("train", {})), per_scale.get("train", {}))
    train["init_from"] = f"{source['output_dir']}/{FINAL_CHECKPOINT}"
    ft_data = deep_merge(ft.get("data", {}), per_scale.get("data", {}))
    corpus = scale_config(scale)["data"]
    if ft_data.get("source", corpus["source"]) != corpus["source"]:
        # another corpus: nothing of the pre-training source's settings applies to it
        corpus = {k: corpus[k] for k in ("vocab_size", "val_fraction") if k in corpus}
    data = deep_merge(corpus, ft_data)
    data["tokenizer"] = f"{source['data']['dir']}/tokenizer.json"
    run.update({
        "run_id": f"finetune/{model}/{method}/s{seed}",
        "data": {**data, "dir": f"{results}/data/{data_id(data)}"},
        "train": train,
        "output_dir": f"{results}/runs/{scale}/{run_group(paper, FINETUNE)}/{model}/{method}/s{seed}",
    })
    run = validate(run, "run", f"run config {paper} {run['run_id']}")
    from .preflight import check_run  # finetune.train may change seq_len or batch_size

    check_run(run, f"run config {paper} {run['run_id']}: ")
    return run


PRETRAIN, FINETUNE = "train", "finetune"  # the two kinds of run of a grid (grid_runs)


def run_group(paper: str, kind: str) -> str:
    """The folder under ``runs/<scale>/`` that holds a paper's runs of one kind: ``<paper>`` for
    pre-training, ``<paper>_finetune`` for fine-tuning."""
    return paper if kind == PRETRAIN else f"{paper}_{FINETUNE}"


def grid_runs(papers, scale: str, results: str = "results", overrides: dict | None = None) -> tuple[dict, dict]:
    """Every run of the papers' grids at ``scale``: (the PRETRAIN runs of each grid, the FINETUNE
    runs that start from them), each keyed (paper, model, method, seed as a string) -> resolved config."""
    runs, finetune = {}, {}
    for paper in papers:
        grid = experiment_grid(paper, scale)
        for model in grid["models"]:
            for method in grid["methods"]:
                for seed in grid["seeds"]:
                    runs[(paper, model, method, str(seed))] = resolve_run(
                        scale, paper, model, method, seed, results=results, overrides=overrides)
        ft = finetune_grid(paper, scale)
        for model in ft["models"] if ft else []:
            for method in ft["methods"]:
                for seed in ft["seeds"]:
                    finetune[(paper, model, method, str(seed))] = resolve_finetune_run(
                        scale, paper, model, method, seed, results=results, overrides=overrides)
    return runs, finetune


# What every finished run folder holds (lowprec.train writes them; tables and figures read them).
RUN_FILES = ("metrics.csv", "provenance.json", "config.yaml")
# the weights a completed run ends with (lowprec.train), which evaluations and fine-tuning read;
# not committed
FINAL_CHECKPOINT = "checkpoints/last.ckpt"


def missing_run_files(run_dir) -> list[str]:
    """The files of ``RUN_FILES`` that ``run_dir`` lacks (all of them when the folder is absent)."""
    return [f for f in RUN_FILES if not (Path(run_dir) / f).is_file()]


# What a run config may change without changing the numbers the run records: where it writes, how
# it logs, how often it saves a checkpoint, how many threads or processes share its batches
# (train.batch_size is the global batch, check_global_batch: N processes train the batches of one;
# only the order of floating-point sums differs), and whether the blocks are compiled (the same
# arithmetic, fused differently) or replayed as CUDA graphs (the same kernels). A run folder whose
# config.yaml differs from the resolved config in these keys alone is current. data.dir is compared
# by its last part, the data id, which changes with the data (data_id) but not with the results root.
RESULT_NEUTRAL_KEYS = ("output_dir", "logging", "train.threads", "train.strategy", "train.devices",
                       "train.num_nodes", "train.ckpt_every", "train.compile", "train.cudagraphs")


# Keys added after runs were committed, whose default is what those runs computed: given at their
# default they read as absent, so a committed run stays current.
DEFAULT_AS_ABSENT = {"train.compile_numerics": "eager"}


def _numeric_view(cfg: dict) -> dict:
    """``cfg`` flattened to dotted keys, without RESULT_NEUTRAL_KEYS and DEFAULT_AS_ABSENT keys at
    their default, paths under the results root by their PATH_TAILS."""
    flat = {}

    def walk(d, prefix):
        for k, v in d.items():
            key = f"{prefix}{k}"
            if key in RESULT_NEUTRAL_KEYS:
                continue
            if isinstance(v, dict) and v:
                walk(v, key + ".")
            else:
                flat[key] = v

    walk(cfg, "")
    for key, default in DEFAULT_AS_ABSENT.items():
        if flat.get(key) == default:
            del flat[key]
    for key, n in PATH_TAILS.items():
        if isinstance(flat.get(key), str):
            flat[key] = "/".join(Path(flat[key]).parts[-n:])
    return flat


# Paths under the results root, which a caller may give relative or absolute: compared by the parts
# that name what they point to (the data id; the data id and file; the scale, run and checkpoint).
PATH_TAILS = {"data.dir": 1, "data.tokenizer": 2, "train.init_from": 7}


def config_changes(old: dict, new: dict) -> list[str]:
    """``key: old -> new`` for each key whose value differs between two run configs, apart from
    RESULT_NEUTRAL_KEYS (absent keys shown as <absent>)."""
    a, b = _numeric_view(old), _numeric_view(new)
    return [f"{k}: {a.get(k, '<absent>')!r} -> {b.get(k, '<absent>')!r}"
            for k in sorted(set(a) | set(b)) if a.get(k, "<absent>") != b.get(k, "<absent>")]


def run_name(output_dir) -> str:
    """The name of the run in folder ``output_dir``: its path under ``runs/<scale>/``,
    ``<paper>/<model>/<method>/s<seed>`` (``<paper>_finetune/...`` for a fine-tuning run)."""
    return "/".join(Path(output_dir).parts[-4:])


def run_status(cfg: dict) -> tuple[str, str]:
    """What the folder of a run (resolved config ``cfg``) holds: ``("missing", why)`` while it lacks
    a file of RUN_FILES (lowprec.train writes provenance.json last, when training ends),
    ``("stale", changes)`` when its config.yaml differs from ``cfg`` in a key that changes the
    numbers (config_changes), else ``("current", "")``."""
    out = Path(cfg["output_dir"])
    missing = missing_run_files(out)
    if missing:
        return "missing", "no run folder" if len(missing) == len(RUN_FILES) else f"no {', '.join(missing)}"
    try:
        old = yaml.load((out / "config.yaml").read_text(), Loader=_YAML_LOADER)
    except (OSError, yaml.YAMLError) as e:
        return "stale", f"config.yaml unreadable ({e})"
    if not isinstance(old, dict):
        return "stale", "config.yaml is not a mapping"
    changes = config_changes(old, cfg)
    return ("stale", "; ".join(changes)) if changes else ("current", "")


# run folders are read at every workflow start: the C loader where PyYAML has it
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def retrain_patterns(value, run_names, what: str = "config key 'retrain'") -> list[str]:
    """The workflow's ``retrain`` (one pattern or a list; fnmatch on run_name, e.g.
    ``gaussws/gpt2/*/s0``) as a list; a pattern that names no run of ``run_names`` is an error,
    whose message names the option as ``what``."""
    import fnmatch

    patterns = [] if value is None else [value] if isinstance(value, str) else list(value)
    names = list(run_names)
    unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(n, p) for n in names)]
    if unmatched:
        raise ConfigError(f"{what}: {unmatched} match(es) no run of this grid; runs are named "
                          f"<paper>/<model>/<method>/s<seed>, e.g. {names[0] if names else 'gaussws/gpt2/bf16/s0'}")
    return patterns


def training_plan(runs: dict, retrain=(), training=()) -> dict:
    """The runs of ``runs`` (any key -> resolved config) that train, each with why: its folder is
    missing or incomplete, its config changed (the keys), a ``retrain`` pattern names it, or it
    starts from the final weights (``train.init_from``) of a run whose folder is in ``training``
    (the output_dir of runs that train). A run that is complete and current is absent: whatever
    the file times, it never trains."""
    import fnmatch

    training = {str(d) for d in training}
    plan = {}
    for key, cfg in runs.items():
        status, why = run_status(cfg)
        asked = [p for p in retrain if fnmatch.fnmatchcase(run_name(cfg["output_dir"]), p)]
        source = cfg["train"].get("init_from")
        source = str(Path(source).parents[1]) if source else None
        if status != "current":
            plan[key] = f"{status}: {why}"
        elif asked:
            plan[key] = f"retrain={asked[0]}"
        elif source in training:
            plan[key] = f"starts from {source}, which trains"
    return plan


def committed_runs(runs: dict) -> tuple[dict, dict, dict]:
    """Regenerating from committed runs (``reuse_runs``): split ``runs`` (any key -> run config)
    into (the runs whose folder holds every file of ``RUN_FILES`` under the config they resolve to
    now, those that do not, the committed runs whose config.yaml differs from it in a key that
    changes the numbers: key -> (config, the changes)). A partial grid (GPU time ran out, a folder
    without its provenance.json because the run never finished) is regenerated from the runs it
    has; the caller reports the rest (``uncommitted_message``). A stale run is left out too: its
    numbers answer another experiment than the one the tables name."""
    present, missing, stale = {}, {}, {}
    for key, cfg in runs.items():
        status, why = run_status(cfg)
        if status == "current":
            present[key] = cfg
        elif status == "missing":
            missing[key] = cfg
        else:
            stale[key] = (cfg, why)
    return present, missing, stale


def stale_message(stale: list, context: str = "reuse_runs", limit: int = 20) -> str:
    """One warning naming the committed runs that ``committed_runs`` found stale (their (config,
    changes) pairs) and what changed."""
    lines = [f"{run_name(cfg['output_dir'])}: {why}" for cfg, why in stale[:limit]]
    more = f"\n  ... and {len(stale) - limit} more" if len(stale) > limit else ""
    return (f"{context}: {len(stale)} committed run folder(s) hold another config than the grid's "
            "(configs/ changed since they trained); left out of the tables, figures and verdicts until "
            "they train again (--config retrain=<run>):\n  " + "\n  ".join(lines) + more)


def per_run_files(run_dirs, names, training=(), evaluate: bool = True) -> tuple[list[str], list[str], list[str]]:
    """Per-run files that one rule computes from a run's final checkpoint (an evaluation, ``names``:
    the files it writes into the run folder), committed beside the run since checkpoints are not.
    Splits the run folders ``run_dirs`` into (the folders to read them from, the folders in which
    the rule makes them, the folders left out). The rule makes them for a run that trains
    (``training``) and, when ``evaluate``, for a run holding none of them but its final checkpoint;
    committed files are read as they are and never computed again; a run with neither the files
    nor its checkpoint (or with only some of the files) is left out, and the caller names it
    (uncommitted_message)."""
    names = (names,) if isinstance(names, str) else tuple(names)
    training = {str(d) for d in training}
    read, made, absent = [], [], []
    for d in map(str, run_dirs):
        have = [(Path(d) / n).is_file() for n in names]
        if d in training or (evaluate and not any(have) and (Path(d) / FINAL_CHECKPOINT).is_file()):
            made.append(d)
        elif not all(have):
            absent.append(d)
            continue
        read.append(d)
    return read, made, absent


def uncommitted_message(run_dirs, what: str, consequence: str, limit: int = 20, context: str = "reuse_runs") -> str:
    """One warning naming the run folders (or files) that the workflow leaves out (``context``:
    regeneration, or a rule that needs a checkpoint that is not here), and what it does without
    them; the first ``limit`` are listed."""
    run_dirs = [str(d) for d in run_dirs]
    lines = [f"{d} (no {', '.join(m)})" if (m := missing_run_files(d)) and m != list(RUN_FILES) else d
             for d in run_dirs[:limit]]
    more = f"\n  ... and {len(run_dirs) - limit} more" if len(run_dirs) > limit else ""
    return f"{context}: {len(run_dirs)} {what}; {consequence}:\n  " + "\n  ".join(lines) + more


def report_path(results: str, scale: str) -> str:
    """Where the workflow writes the report of ``scale``: ``<results>/REPORT.md`` for the default
    scale (``scale`` in configs/config.yaml, the one the README's results are), and
    ``<results>/REPORT_<scale>.md`` for any other, so that reports of different scales sit side by
    side like their tables (``<results>/<paper>/<scale>/``) and building one never overwrites another."""
    default = load_yaml(CONFIG_DIR / "config.yaml")["scale"]
    return f"{results}/REPORT.md" if scale == default else f"{results}/REPORT_{scale}.md"


def config_hash(cfg: dict) -> str:
    return hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()[:16]

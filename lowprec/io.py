"""Small file helpers: every output is written whole or not at all (Snakemake treats an existing
output file as finished, so a crash must never leave a half-written one behind).

    python -m lowprec.io yaml OUT JSON      # write the JSON object as YAML to OUT (the workflow's
                                            # config rules: a process that imports no torch)
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import yaml


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it into place only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_yaml(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, yaml.safe_dump(obj, sort_keys=False))


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m lowprec.io", description="write a JSON object as a YAML file")
    ap.add_argument("format", choices=["yaml"])
    ap.add_argument("out")
    ap.add_argument("json", help="the object, as JSON text")
    args = ap.parse_args(argv)
    try:
        obj = json.loads(args.json)
    except json.JSONDecodeError as e:
        ap.error(f"JSON argument: {e}")
    write_yaml(args.out, obj)


if __name__ == "__main__":
    main()

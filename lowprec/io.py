"""Small file helpers: every output is written whole or not at all (Snakemake treats an existing
output file as finished, so a crash must never leave a half-written one behind): the new content
goes to a temporary file in the same folder, which then replaces the old one (``os.replace``)."""

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


def write_gzip_text(path: str | os.PathLike, text: str) -> None:
    """``text`` gzip-compressed, with no time in the header: the same text gives the same bytes (a
    rerun does not show as a change in git)."""
    import gzip

    with atomic_path(path) as tmp:
        tmp.write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))


def write_text_if_changed(path: str | os.PathLike, text: str) -> bool:
    """Write ``text`` unless the file holds exactly that already, whose time then stays as it is (a
    rule that reads the file does not run again for an unchanged one); True if it wrote."""
    try:
        if Path(path).read_text() == text:
            return False
    except (OSError, UnicodeDecodeError):
        pass
    write_text(path, text)
    return True


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_yaml(path: str | os.PathLike, obj: Any, if_changed: bool = False) -> bool:
    """Write ``obj`` as YAML (with ``if_changed``, only when the file differs: write_text_if_changed);
    True if it wrote."""
    text = yaml.safe_dump(obj, sort_keys=False)
    if if_changed:
        return write_text_if_changed(path, text)
    write_text(path, text)
    return True


def provenance_path(measurement: str | os.PathLike) -> Path:
    """The provenance of a committed measurement ``<name>.csv``: ``<name>.provenance.json`` beside
    it, where the benchmarks write it and the reports read it."""
    measurement = Path(measurement)
    return measurement.with_name(measurement.stem + ".provenance.json")


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def pinned_local_copy(archive, cached: Path, sha256: str, error: type, what: str) -> Path | None:
    """A pinned download's file without downloading it: ``archive`` (``data.archive``) when given,
    which must exist and match ``sha256``; else ``cached`` if it matches (a corrupt cache entry is
    removed: it would fail forever); else None, and the caller downloads into ``cached``. ``error``
    is raised with a message naming the file; ``what`` says what a mismatch may mean."""
    if archive is not None:
        path = Path(archive)
        if not path.is_file():
            raise error(f"data.archive: file not found: {path}")
        got = sha256_file(path)
        if got != sha256:
            raise error(f"checksum mismatch for {path}: expected sha256 {sha256}, got {got} ({what})")
        return path
    if cached.is_file():
        if sha256_file(cached) == sha256:
            return cached
        cached.unlink()
    return None

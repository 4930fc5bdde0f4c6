"""Prepared datasets carried as one .tar.xz (lowprec.databundle)."""

import io
import json
import shutil
import tarfile

import pytest

from lowprec.data import TokenData
from lowprec.databundle import BundleError, main, pack, scale_data_dirs, unpack


@pytest.fixture()
def dataset(prepared_data, tmp_path):
    d = tmp_path / "src" / prepared_data.name
    shutil.copytree(prepared_data, d)
    return d


def test_pack_unpack_round_trip_is_byte_identical(dataset, tmp_path):
    bundle = tmp_path / "data.tar.xz"
    summary = pack([dataset], bundle)
    assert summary[dataset.name]["tokens"] == json.loads((dataset / "manifest.json").read_text())["tokens"]
    with tarfile.open(bundle) as tar:
        assert tar.getnames() == [f"{dataset.name}/{f}" for f in ("train.bin", "val.bin", "tokenizer.json", "manifest.json")]
    placed = unpack(bundle, tmp_path / "results")
    assert placed == [tmp_path / "results/data" / dataset.name]
    for f in dataset.iterdir():
        assert (placed[0] / f.name).read_bytes() == f.read_bytes()
    TokenData(placed[0])  # verifies the token files against the manifest
    assert unpack(bundle, tmp_path / "results") == placed  # the same dataset again: kept
    assert [p.name for p in (tmp_path / "results/data").iterdir()] == [dataset.name]  # no temporary left


def test_pack_refuses_an_incomplete_or_changed_dataset(dataset, tmp_path):
    (dataset / "val.bin").write_bytes((dataset / "val.bin").read_bytes()[:-2])
    with pytest.raises(BundleError, match=r"val\.bin: sha256 differs from manifest\.json"):
        pack([dataset], tmp_path / "b.tar.xz")
    (dataset / "manifest.json").unlink()
    with pytest.raises(BundleError, match="no manifest.json; prepare it first"):
        pack([dataset], tmp_path / "b.tar.xz")
    assert not (tmp_path / "b.tar.xz").exists()


def _bundle(path, members: dict):
    with tarfile.open(path, "w:xz") as tar:
        for name, raw in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))


def test_unpack_checks_every_dataset_before_placing_any(dataset, tmp_path):
    files = {f"{dataset.name}/{f.name}": f.read_bytes() for f in dataset.iterdir()}
    broken = {k.replace(dataset.name, "zz-broken"): v for k, v in files.items()}
    broken["zz-broken/train.bin"] = b"\0\0" + broken["zz-broken/train.bin"][2:]
    _bundle(tmp_path / "b.tar.xz", files | broken)
    with pytest.raises(BundleError, match=r"dataset zz-broken is incomplete or corrupt: .*train\.bin: sha256 differs"):
        unpack(tmp_path / "b.tar.xz", tmp_path / "results")
    assert list((tmp_path / "results/data").iterdir()) == []


def test_unpack_refuses_foreign_members_and_another_preparation(dataset, tmp_path):
    _bundle(tmp_path / "evil.tar.xz", {"../outside.bin": b"x"})
    with pytest.raises(BundleError, match=r"not a dataset bundle \(unexpected member\(s\) \['\.\./outside\.bin'\]\)"):
        unpack(tmp_path / "evil.tar.xz", tmp_path / "results")
    (tmp_path / "junk.tar.xz").write_bytes(b"not xz")
    with pytest.raises(BundleError, match="not a readable .tar.xz"):
        unpack(tmp_path / "junk.tar.xz", tmp_path / "results")
    pack([dataset], tmp_path / "b.tar.xz")
    other = tmp_path / "results/data" / dataset.name
    other.mkdir(parents=True)
    (other / "manifest.json").write_text('{"tokens": {}}')
    with pytest.raises(BundleError, match="holds another preparation of .*move it away"):
        unpack(tmp_path / "b.tar.xz", tmp_path / "results")


def test_scale_data_dirs_of_the_medium_grid():
    dirs = scale_data_dirs("medium")
    # pre-training corpus and the held-out fine-tuning corpus encoded with its tokenizer
    assert len(dirs) == 2 and all(d.name.startswith("linux-source-6.1-bpe32768-") for d in dirs)


def test_cli_needs_one_selection(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["pack", "--out", str(tmp_path / "x.tar.xz")])
    assert "give --scale or dataset folders" in capsys.readouterr().err

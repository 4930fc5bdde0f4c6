"""Fine-tuning as a general feature: a corpus narrowed to chosen documents and encoded with an
earlier preparation's tokenizer, a run that starts from another run's weights (train.init_from),
the fine-tuning run configs of an experiment, and resume semantics."""

import json

import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import Callback

from lowprec import config as cfglib
from lowprec import train
from lowprec.data import DataError, Document, TokenData, prepare, select_documents
from conftest import smoke_run_config
from test_train import Crash, CrashAt, _losses


# --------------------------------------------------------------------------- data

def test_select_documents_include_exclude_and_typos():
    docs = [Document(n, "text") for n in ("hamlet", "tempest", "winters_tale", "lear")]
    names = lambda ds: [d.name for d in ds]  # noqa: E731
    assert names(select_documents(docs, ["tempest", "w*"])) == ["tempest", "winters_tale"]
    assert names(select_documents(docs, None, ["tempest", "w*"])) == ["hamlet", "lear"]
    assert names(select_documents(docs)) == names(docs)
    with pytest.raises(DataError, match=r"data.documents.*'tempset'"):
        select_documents(docs, ["tempest", "tempset"])
    with pytest.raises(DataError, match="data.exclude_documents: must be a list"):
        select_documents(docs, None, "tempest")


def test_held_out_corpus_with_the_pretraining_tokenizer(corpus_dir, tmp_path):
    base = {"source": "local", "path": str(corpus_dir), "vocab_size": 300, "val_fraction": 0.2}
    pre = prepare({**base, "exclude_documents": ["play_4.txt", "play_5.txt"]}, tmp_path / "pre")
    assert not set(pre["documents"]["train"] + pre["documents"]["val"]) & {"play_4.txt", "play_5.txt"}
    tok_path = tmp_path / "pre" / "tokenizer.json"
    ft = prepare({**base, "documents": ["play_4.txt", "play_5.txt"], "tokenizer": str(tok_path)}, tmp_path / "ft")
    assert sorted(ft["documents"]["train"] + ft["documents"]["val"]) == ["play_4.txt", "play_5.txt"]
    assert ft["tokenizer"]["from"] == str(tok_path) and len(ft["tokenizer"]["sha256"]) == 64
    assert (tmp_path / "ft" / "tokenizer.json").read_bytes() == tok_path.read_bytes()
    # the token ids are the pre-training tokenizer's encoding of the held-out text
    data = TokenData(tmp_path / "ft")
    tok = TokenData(tmp_path / "pre").tokenizer()
    first = ft["documents"]["train"][0]
    expected = tok.encode((corpus_dir / first).read_text()).ids
    assert np.array_equal(np.asarray(data.splits["train"][:len(expected)], dtype=np.int64), expected)
    with pytest.raises(DataError, match="data.tokenizer: file not found"):
        prepare({**base, "tokenizer": str(tmp_path / "nope.json")}, tmp_path / "bad")


# --------------------------------------------------------------------------- run configs

def test_finetune_run_config_points_at_the_pretraining_run():
    grid = cfglib.finetune_grid("int8_fallback", "smoke")
    assert grid["from"] == "bf16" and grid["models"] == ["llama2"]
    assert set(grid["methods"]) == {"bf16", "int8_block", "int8_rowwise", "int8_fallback"}
    src = cfglib.resolve_run("smoke", "int8_fallback", "llama2", "bf16", 0, results="R")
    ft = cfglib.resolve_finetune_run("smoke", "int8_fallback", "llama2", "int8_fallback", 0, results="R")
    assert ft["train"]["init_from"] == f"{src['output_dir']}/checkpoints/last.ckpt"
    assert ft["data"]["tokenizer"] == f"{src['data']['dir']}/tokenizer.json"
    assert ft["method"] == cfglib.resolve_run("smoke", "int8_fallback", "llama2", "int8_fallback", 0)["method"]
    assert ft["output_dir"] == "R/runs/smoke/int8_fallback_finetune/llama2/int8_fallback/s0"
    # pre-training never saw the fine-tuning documents
    held = set(ft["data"]["documents"])
    assert held and held <= set(src["data"]["exclude_documents"])
    assert ft["data"]["dir"] != src["data"]["dir"] and "exclude_documents" not in ft["data"]
    assert ft["train"]["max_steps"] == 6  # the scale's finetune.train override
    assert cfglib.finetune_grid("gaussws", "smoke") is None
    with pytest.raises(cfglib.ConfigError, match="no 'finetune' section"):
        cfglib.resolve_finetune_run("smoke", "gaussws", "llama2", "bf16", 0)
    with pytest.raises(cfglib.ConfigError, match="unknown method 'nope'"):
        cfglib.resolve_finetune_run("smoke", "int8_fallback", "llama2", "nope", 0)


def test_finetune_on_another_corpus_drops_the_pretraining_source_settings():
    ft = cfglib.resolve_finetune_run("paper", "int8_fallback", "llama2", "bf16", 0)
    assert ft["data"]["source"] == "shakespeare" and "name" not in ft["data"]
    assert ft["data"]["vocab_size"] == cfglib.scale_config("paper")["data"]["vocab_size"]


# --------------------------------------------------------------------------- init_from

class FirstWeights(Callback):
    """The model's parameters as training starts."""

    def on_train_start(self, trainer, pl_module):
        self.params = {n: p.detach().clone() for n, p in pl_module.model.named_parameters()}


def _source(prepared_data, tmp_path):
    cfg = smoke_run_config("int8_fallback", "llama2", "bf16", prepared_data, tmp_path / "src", max_steps=4)
    train.run(cfg)
    return tmp_path / "src/runs/smoke/int8_fallback/llama2/bf16/s0"


def test_init_from_starts_from_the_source_weights(prepared_data, tmp_path):
    src = _source(prepared_data, tmp_path)
    ckpt = src / "checkpoints" / "last.ckpt"
    final = {k[len("model."):]: v for k, v in torch.load(ckpt, weights_only=True)["state_dict"].items()
             if k.startswith("model.")}
    # another recipe than the source's: only the parameters travel
    cfg = smoke_run_config("int8_fallback", "llama2", "int8_fallback_dynamic", prepared_data, tmp_path / "ft", max_steps=2)
    first = FirstWeights()
    for init in (str(ckpt), str(src)):  # the checkpoint file, or the run folder
        cfg["train"]["init_from"] = init
        rec = train.run(cfg, callbacks=[first])
        assert first.params.keys() <= final.keys()
        for n, p in first.params.items():
            assert torch.equal(p, final[n]), n
        assert rec["init_from"]["path"] == str(ckpt) and len(rec["init_from"]["sha256"]) == 64
    # without init_from the same config starts from the random init
    del cfg["train"]["init_from"]
    train.run(cfg, callbacks=[first])
    assert not torch.equal(first.params["model.embed_tokens.weight"], final["model.embed_tokens.weight"])


def test_init_from_errors_name_the_key_and_the_problem(prepared_data, tmp_path):
    cfg = smoke_run_config("int8_fallback", "llama2", "bf16", prepared_data, tmp_path, max_steps=2)
    cfg["train"]["init_from"] = str(tmp_path / "missing.ckpt")
    with pytest.raises(cfglib.ConfigError, match=r"train.init_from: checkpoint file not found: .*missing.ckpt"):
        train.run(cfg)
    src = _source(prepared_data, tmp_path)
    gpt = smoke_run_config("int8_fallback", "gpt2", "bf16", prepared_data, tmp_path / "g", max_steps=2)
    gpt["train"]["init_from"] = str(src)
    with pytest.raises(cfglib.ConfigError, match="train.init_from: .* lacks parameter"):
        train.run(gpt)
    (src / "checkpoints" / "COMPLETE").unlink()
    cfg["train"]["init_from"] = str(src)
    with pytest.raises(cfglib.ConfigError, match="has not completed"):
        train.run(cfg)


def test_killed_finetune_resumes_from_its_own_checkpoint(prepared_data, tmp_path):
    src = _source(prepared_data, tmp_path)
    kw = dict(max_steps=8, ckpt_every=4, log_every=1, val_every=4, init_from=str(src))
    ref = smoke_run_config("int8_fallback", "llama2", "int8_block", prepared_data, tmp_path / "ref", **kw)
    train.run(ref)
    killed = smoke_run_config("int8_fallback", "llama2", "int8_block", prepared_data, tmp_path / "k", **kw)
    with pytest.raises(Crash):
        train.run(killed, callbacks=[CrashAt(6)])
    rec = train.run(killed)
    assert rec["resumed_from"].endswith("last.ckpt") and rec["init_from"]["restored_by_resume"]
    sub = "runs/smoke/int8_fallback/llama2/int8_block/s0"
    pd_ref, pd_k = _losses(tmp_path / "ref" / sub), _losses(tmp_path / "k" / sub)
    assert list(pd_k.index) == list(range(1, 9))
    np.testing.assert_allclose(pd_k.to_numpy(), pd_ref.to_numpy(), rtol=1e-6, atol=0)
    prov = json.loads((tmp_path / "ref" / sub / "provenance.json").read_text())
    assert prov["init_from"]["path"].endswith("last.ckpt")

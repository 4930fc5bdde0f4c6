import pytest

from lowprec import config as lpc


def test_workflow_config_resolves_every_paper_and_scale():
    for scale in lpc.SCALES:
        wf = lpc.workflow_config({"scale": scale, "papers": ["gaussws", "int8_fallback", "mor"], "results": "r"})
        assert wf["scale_cfg"]["train"]["max_steps"] >= 1
        for paper in wf["papers"]:
            grid = lpc.experiment_grid(paper, scale)
            for model in grid["models"]:
                for method in grid["methods"]:
                    cfg = lpc.resolve_run(scale, paper, model, method, grid["seeds"][0], results="r")
                    assert cfg["output_dir"] == f"r/runs/{scale}/{paper}/{model}/{method}/s{grid['seeds'][0]}"


def test_unknown_workflow_key_is_named():
    with pytest.raises(lpc.ConfigError, match="stepz"):
        lpc.workflow_config({"scale": "tiny", "papers": ["mor"], "results": "r", "stepz": 3})


def test_wrong_type_names_the_key_path():
    cfg = lpc.resolve_run("smoke", "mor", "nemotron", "bf16", 0)
    cfg["train"]["lr"] = "fast"
    with pytest.raises(lpc.ConfigError, match=r"train\.lr"):
        lpc.validate(cfg, "run")
    cfg = lpc.resolve_run("smoke", "mor", "nemotron", "bf16", 0)
    cfg["model"]["layerz"] = 2
    with pytest.raises(lpc.ConfigError, match="layerz"):
        lpc.validate(cfg, "run")


def test_unknown_scale_paper_method_model():
    with pytest.raises(lpc.ConfigError, match="scale"):
        lpc.workflow_config({"scale": "huge", "papers": ["mor"], "results": "r"})
    with pytest.raises(lpc.ConfigError, match="papers"):
        lpc.workflow_config({"scale": "tiny", "papers": ["nope"], "results": "r"})
    with pytest.raises(lpc.ConfigError, match="claims_statistic"):
        lpc.workflow_config({"scale": "tiny", "papers": ["mor"], "results": "r", "claims_statistic": "ttest"})
    with pytest.raises(lpc.ConfigError, match="unknown method 'nope'"):
        lpc.resolve_run("tiny", "mor", "nemotron", "nope", 0)
    with pytest.raises(lpc.ConfigError, match="unknown model 'gpt5'"):
        lpc.model_config("gpt5", "tiny")


def test_data_id_changes_with_anything_that_shapes_tokens():
    a = {"source": "shakespeare", "vocab_size": 2048, "val_fraction": 0.1}
    assert lpc.data_id(a) == lpc.data_id(dict(a))
    assert lpc.data_id(a) != lpc.data_id({**a, "vocab_size": 4096})
    assert lpc.data_id(a) != lpc.data_id({**a, "val_fraction": 0.2})

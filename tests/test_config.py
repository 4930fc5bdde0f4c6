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


# --------------------------------------------------------------------------- start-up checks of a run

@pytest.mark.parametrize("paper, model, method, bad, match", [
    # an unknown recipe, whichever paper names it
    ("mor", "nemotron", "mor_block", {"recipe": "mr"}, r"methods\.mor_block: method\.recipe: unknown recipe 'mr'"),
    ("baselines", "gpt2", "bf16", {"recipe": "fp9"}, r"methods\.bf16: method\.recipe: unknown recipe 'fp9'"),
    # an unknown key: the one check of every method's keys (lowprec.recipes.Method)
    ("mor", "nemotron", "mor_block", {"partiton": "block"}, r"method \(mor\): unknown key\(s\) \['partiton'\]"),
    ("gaussws", "gpt2", "gaussws_b6", {"sigma": 1}, r"method \(gaussws\): unknown key\(s\) \['sigma'\]"),
    ("gaussws", "gpt2", "ste_mxfp6_e3m2", {"bits": 6}, r"method \(ste\): unknown key\(s\) \['bits'\]"),
    ("int8_fallback", "llama2", "int8_fallback", {"taus": 8},
     r"method \(int8_fallback\): unknown key\(s\) \['taus'\]"),
    ("baselines", "gpt2", "int8_block", {"block": [16, 16]}, r"method \(int8_block\): unknown key\(s\) \['block'\]"),
    # a key of the wrong type, a paper's own or a key every method has
    ("mor", "nemotron", "mor_block", {"threshold": "low"}, r"methods\.mor_block: threshold: must be a finite number >= 0, got 'low'"),
    ("int8_fallback", "llama2", "int8_fallback", {"tau": "eight"}, r"tau: must be a finite number > 0, got 'eight'"),
    ("gaussws", "gpt2", "gaussws_b6", {"b": "six"}, r"b must be a number"),
    ("mor", "nemotron", "bf16", {"telemetry_every": "often"}, r"method\.telemetry_every: must be an integer >= 0"),
    ("baselines", "gpt2", "bf16", {"include": "transformer.h.*"}, r"method\.include: must be a list"),
    ("baselines", "gpt2", "fp8_hybrid", {"fprop": {"a": {"fmt": "e9m9"}}}, r"method\.fprop: fmt: unknown format"),
])
def test_bad_method_is_refused_when_the_run_is_resolved(paper, model, method, bad, match):
    with pytest.raises(lpc.ConfigError, match=match) as e:
        lpc.resolve_run("smoke", paper, model, method, 0, overrides={"method": bad})
    assert str(e.value).startswith(f"run config {paper} {model}/{method}/s0: experiment {paper}, methods.{method}: ")
    assert "\n" not in str(e.value)


def test_bad_method_in_an_experiment_file_stops_the_workflow_config(tmp_path, monkeypatch):
    import shutil

    shutil.copytree(lpc.CONFIG_DIR, tmp_path / "configs")
    exp = tmp_path / "configs" / "experiments" / "mor.yaml"
    exp.write_text(exp.read_text().replace("mor_block: {recipe: mor, partition: block,",
                                           "mor_block: {recipe: mor, partition: block, thresold: 0.05,"))
    monkeypatch.setattr(lpc, "CONFIG_DIR", tmp_path / "configs")
    with pytest.raises(lpc.ConfigError, match=r"methods\.mor_block: method \(mor\): unknown key\(s\) \['thresold'\]"):
        lpc.resolve_run("smoke", "mor", "nemotron", "mor_block", 0)
    lpc.resolve_run("smoke", "mor", "nemotron", "bf16", 0)  # the other methods are fine


def test_seq_len_longer_than_the_model_is_refused():
    assert lpc.resolve_run("smoke", "baselines", "gpt2", "bf16", 0, overrides={"train": {"seq_len": 64}})
    for model in ("gpt2", "llama2", "nemotron"):
        with pytest.raises(lpc.ConfigError, match=rf"run config baselines {model}/bf16/s0: train\.seq_len=65 is longer "
                                                  rf"than model\.max_seq_len=64 of model {model} "
                                                  rf"\(configs/models/{model}\.yaml at scale smoke\)"):
            lpc.resolve_run("smoke", "baselines", model, "bf16", 0, overrides={"train": {"seq_len": 65}})


def test_seq_len_limit_of_a_checkpoint_model_is_its_own(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama", "max_position_embeddings": 48}')
    over = {"model": {"checkpoint": str(tmp_path)}, "train": {"seq_len": 50}}
    with pytest.raises(lpc.ConfigError, match=rf"max_seq_len=48 of model llama2 \(its checkpoint {tmp_path}\)"):
        lpc.resolve_run("smoke", "mor", "llama2", "bf16", 0, overrides=over)


def test_global_batch_must_divide_over_devices_and_nodes():
    with pytest.raises(lpc.ConfigError, match=r"run config mor nemotron/bf16/s0: train\.batch_size=4 is the global "
                                              r"batch .* train\.devices x train\.num_nodes = 6"):
        lpc.resolve_run("smoke", "mor", "nemotron", "bf16", 0, overrides={"train": {"devices": 3, "num_nodes": 2}})
    # grad_accum multiplies the tokens of a step and divides nothing
    lpc.resolve_run("smoke", "mor", "nemotron", "bf16", 0, overrides={"train": {"devices": 2, "grad_accum": 3}})


def test_finetune_train_settings_are_checked_too(tmp_path, monkeypatch):
    import shutil

    shutil.copytree(lpc.CONFIG_DIR, tmp_path / "configs")
    exp = tmp_path / "configs" / "experiments" / "int8_fallback.yaml"
    exp.write_text(exp.read_text().replace("finetune: {train: {max_steps: 6,", "finetune: {train: {seq_len: 100, max_steps: 6,"))
    monkeypatch.setattr(lpc, "CONFIG_DIR", tmp_path / "configs")
    lpc.resolve_run("smoke", "int8_fallback", "llama2", "bf16", 0)
    with pytest.raises(lpc.ConfigError, match=r"finetune/llama2/bf16/s0: train\.seq_len=100 is longer"):
        lpc.resolve_finetune_run("smoke", "int8_fallback", "llama2", "bf16", 0)


def test_data_id_of_a_local_corpus_follows_its_files(tmp_path, monkeypatch):
    import os

    import lowprec.data as lpd
    from lowprec.io import sha256_file

    monkeypatch.setenv("LOWPREC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(lpd, "_FILE_SHA256", {})
    hashed = []
    monkeypatch.setattr(lpd, "sha256_file", lambda p: hashed.append(p.name) or sha256_file(p))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("first play\n")
    (corpus / "b.txt").write_text("second play\n")
    cfg = {"source": "local", "path": str(corpus), "vocab_size": 300, "val_fraction": 0.2}
    first = lpc.data_id(cfg)
    assert first.startswith("corpus-bpe300-") and lpc.data_id(dict(cfg)) == first
    assert sorted(hashed) == ["a.txt", "b.txt"]  # once per file, not once per run of the grid

    (corpus / "c.txt").write_text("third play\n")
    added = lpc.data_id(cfg)
    (corpus / "c.txt").unlink()
    assert added != first and lpc.data_id(cfg) == first  # the files decide, not the history
    (corpus / "a.txt").write_text("first play, revised\n")
    os.utime(corpus / "a.txt", ns=(1, 1))
    assert lpc.data_id(cfg) not in (first, added)
    (corpus / "a.txt").write_text("first play\n")
    (corpus / "a.txt").rename(corpus / "z.txt")
    assert lpc.data_id(cfg) not in (first, added)  # a document's name is part of the split
    (corpus / "z.txt").rename(corpus / "a.txt")
    assert lpc.data_id(cfg) == first

    # a later process reads the sha256 of unchanged files from the cache instead of the files
    monkeypatch.setattr(lpd, "_FILE_SHA256", {})
    hashed.clear()
    assert lpc.data_id(cfg) == first and hashed == []
    assert lpc.data_id({**cfg, "path": str(corpus / "b.txt")}) != first

    with pytest.raises(lpc.ConfigError, match=r"data\.path: no such file or folder: .*nowhere"):
        lpc.data_id({**cfg, "path": str(tmp_path / "nowhere")})


def _finished_run(cfg, config=None):
    """A run folder as lowprec.train leaves it, its config.yaml from ``config`` (default: cfg)."""
    from pathlib import Path

    from lowprec.io import write_yaml

    out = Path(cfg["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.csv").write_text("step,val_loss\n10,3.2\n")
    write_yaml(out / "config.yaml", config or cfg)
    (out / "provenance.json").write_text("{}\n")
    return out


def test_run_status_compares_only_what_changes_the_numbers(tmp_path):
    import copy

    cfg = lpc.resolve_run("tiny", "gaussws", "gpt2", "bf16", 0, results=str(tmp_path / "results"))
    assert lpc.run_status(cfg) == ("missing", "no run folder")
    out = _finished_run(cfg)
    (out / "provenance.json").unlink()  # training did not end
    assert lpc.run_status(cfg) == ("missing", "no provenance.json")
    _finished_run(cfg)
    assert lpc.run_status(cfg) == ("current", "")

    neutral = copy.deepcopy(cfg)
    neutral["train"].update(threads=8, devices=4, num_nodes=2, strategy="ddp", ckpt_every=7)
    neutral["logging"]["wandb"] = True
    neutral["output_dir"] = "elsewhere/runs/tiny/gaussws/gpt2/bf16/s0"
    neutral["data"]["dir"] = "elsewhere/data/" + cfg["data"]["dir"].rsplit("/", 1)[1]  # same data id
    _finished_run(cfg, neutral)
    assert lpc.run_status(cfg) == ("current", "")
    # a key added since, given at its default: what the committed run computed
    explicit = copy.deepcopy(cfg)
    explicit["train"]["compile_numerics"] = "eager"
    assert lpc.run_status(explicit) == ("current", "")
    explicit["train"]["compile_numerics"] = "fast"
    assert lpc.run_status(explicit) == ("stale", "train.compile_numerics: '<absent>' -> 'fast'")

    changed = copy.deepcopy(cfg)
    changed["train"]["lr"] = 0.002
    changed["data"]["dir"] = cfg["data"]["dir"] + "x"
    del changed["method"]["recipe"]
    _finished_run(cfg, changed)
    status, why = lpc.run_status(cfg)
    assert status == "stale"
    assert why.split("; ") == [f"data.dir: {changed['data']['dir'].rsplit('/', 1)[1]!r} -> "
                               f"{cfg['data']['dir'].rsplit('/', 1)[1]!r}",
                               "method.recipe: '<absent>' -> 'bf16'", "train.lr: 0.002 -> 0.003"]
    (out / "config.yaml").write_text("train: [unclosed\n")
    assert lpc.run_status(cfg)[0] == "stale"


def test_committed_runs_are_current_under_a_relative_or_absolute_results_root():
    """A fine-tuning run's config names paths under the results root (its source checkpoint, the
    tokenizer its data id hashes): the committed runs are as current from the absolute root (the
    README's writer) as from the relative one the workflow passes."""
    root = lpc.REPO_ROOT / "results"
    for results in ("results", str(root)):
        runs, finetune = lpc.grid_runs(lpc.papers(), "tiny", results=results)
        assert finetune, "tiny has fine-tuning runs"
        status = {lpc.run_name(c["output_dir"]): lpc.run_status(c) for c in [*runs.values(), *finetune.values()]}
        assert all(s == ("current", "") for s in status.values()), {k: v for k, v in status.items() if v[0] != "current"}


def test_training_plan_trains_missing_stale_asked_and_their_fine_tunes(tmp_path):
    import copy

    res = str(tmp_path / "results")
    runs = {m: lpc.resolve_run("tiny", "int8_fallback", "llama2", m, 0, results=res)
            for m in ("bf16", "int8_block", "int8_rowwise")}
    for m in ("bf16", "int8_block"):
        _finished_run(runs[m])
    ft = {m: lpc.resolve_finetune_run("tiny", "int8_fallback", "llama2", m, 0, results=res)
          for m in ("bf16", "int8_block")}
    for c in ft.values():
        _finished_run(c)
    assert lpc.training_plan(runs) == {"int8_rowwise": "missing: no run folder"}
    assert lpc.training_plan(ft, training=[]) == {}

    asked = lpc.retrain_patterns("int8_fallback/llama2/bf16/*", [lpc.run_name(c["output_dir"]) for c in runs.values()])
    plan = lpc.training_plan(runs, asked)
    assert plan == {"bf16": "retrain=int8_fallback/llama2/bf16/*", "int8_rowwise": "missing: no run folder"}
    # the fine-tunes start from the bf16 run's final weights: they train after it
    assert lpc.training_plan(ft, asked, training=[runs[k]["output_dir"] for k in plan]) == {
        m: f"starts from {runs['bf16']['output_dir']}, which trains" for m in ft}

    stale = copy.deepcopy(runs["int8_block"])
    stale["train"]["max_steps"] += 1
    _finished_run(runs["int8_block"], stale)
    assert lpc.training_plan(runs)["int8_block"].startswith("stale: train.max_steps: ")

    with pytest.raises(lpc.ConfigError, match=r"config key 'retrain': \['mor/\*'\] match\(es\) no run"):
        lpc.retrain_patterns(["int8_fallback/*", "mor/*"], [lpc.run_name(c["output_dir"]) for c in runs.values()])
    assert lpc.retrain_patterns(None, []) == []


def test_per_run_files_never_recomputes_a_committed_evaluation(tmp_path):
    names = ("outliers.csv", "outlier_ccdf.csv")
    dirs = {k: tmp_path / k for k in ("committed", "training", "checkpoint", "neither", "partial")}
    for d in dirs.values():
        (d / "checkpoints").mkdir(parents=True)
    for n in names:
        (dirs["committed"] / n).write_text("x\n")
    (dirs["committed"] / lpc.FINAL_CHECKPOINT).write_text("weights")
    (dirs["training"] / names[0]).write_text("old\n")
    (dirs["checkpoint"] / lpc.FINAL_CHECKPOINT).write_text("weights")
    (dirs["partial"] / names[0]).write_text("x\n")
    (dirs["partial"] / lpc.FINAL_CHECKPOINT).write_text("weights")
    d = {k: str(v) for k, v in dirs.items()}
    read, made, absent = lpc.per_run_files(d.values(), names, training=[d["training"]])
    assert read == [d["committed"], d["training"], d["checkpoint"]]
    assert made == [d["training"], d["checkpoint"]]
    assert absent == [d["neither"], d["partial"]]
    # regenerating from committed runs: no rule reads a checkpoint
    assert lpc.per_run_files(d.values(), names, evaluate=False) == (
        [d["committed"]], [], [d["training"], d["checkpoint"], d["neither"], d["partial"]])


def test_a_binary_switch_takes_0_or_1_and_names_itself_otherwise(monkeypatch):
    """``LOWPREC_*`` on/off switches (the fast path's kernels, the compiled loss, ...) read through
    one reader: unset gives the default, 0 and 1 say off and on, anything else is an error naming
    the variable rather than a quiet choice of either path."""
    from lowprec.config import env_switch
    monkeypatch.delenv("LOWPREC_TEST_SWITCH", raising=False)
    assert env_switch("LOWPREC_TEST_SWITCH") is True and env_switch("LOWPREC_TEST_SWITCH", default=False) is False
    for value, on in (("0", False), ("1", True)):
        monkeypatch.setenv("LOWPREC_TEST_SWITCH", value)
        assert env_switch("LOWPREC_TEST_SWITCH", default=not on) is on
    for bad in ("yes", "true", "", " 1"):
        monkeypatch.setenv("LOWPREC_TEST_SWITCH", bad)
        with pytest.raises(ValueError, match="LOWPREC_TEST_SWITCH must be 0 or 1"):
            env_switch("LOWPREC_TEST_SWITCH")

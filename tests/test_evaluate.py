"""Where a finished run is evaluated (lowprec.evaluate.evaluation_device); the GPU side is in
test_gpu.py (test_evaluations_on_the_gpu_equal_the_cpu_ones)."""
import pytest
import torch

from lowprec import evaluate


def test_the_cpu_evaluates_where_no_gpu_is(monkeypatch):
    monkeypatch.delenv(evaluate.EVAL_DEVICE_ENV, raising=False)
    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert evaluate.evaluation_device().type == want
    monkeypatch.setenv(evaluate.EVAL_DEVICE_ENV, "cpu")
    assert evaluate.evaluation_device().type == "cpu"
    assert evaluate.evaluation_device("cpu").type == "cpu"


@pytest.mark.parametrize("value, message", [("gpu", "choose cpu or cuda"), ("cuda:0", "choose cpu or cuda")])
def test_a_bad_evaluation_device_is_named(monkeypatch, value, message):
    monkeypatch.setenv(evaluate.EVAL_DEVICE_ENV, value)
    with pytest.raises(ValueError, match=f"LOWPREC_EVAL_DEVICE={value!r}.*{message}"):
        evaluate.evaluation_device()


@pytest.mark.skipif(torch.cuda.is_available(), reason="asks for CUDA where there is none")
def test_cuda_asked_for_without_a_gpu_is_an_error(monkeypatch):
    monkeypatch.setenv(evaluate.EVAL_DEVICE_ENV, "cuda")
    with pytest.raises(ValueError, match="sees no CUDA device"):
        evaluate.evaluation_device()


def test_the_evaluation_batches_are_the_runs_validation_windows_on_the_models_device(prepared_data, tmp_path):
    """The outlier pass and the export evaluation read the windows the run validated on during
    training: the loss of the final weights over them is the run's last logged validation loss."""
    import json
    from pathlib import Path

    from conftest import smoke_run_config
    from lowprec import train

    cfg = smoke_run_config("baselines", "gpt2", "bf16", prepared_data, tmp_path, max_steps=4, val_every=4)
    rec = train.run(cfg)
    run = Path(cfg["output_dir"])
    module, cfg2, data = evaluate.load_trained(run, device="cpu")
    batches = evaluate.evaluation_batches(module, cfg2, data)
    assert len(batches) == cfg["train"]["val_batches"]
    assert all(x.device.type == "cpu" and x.shape == (cfg["train"]["batch_size"], cfg["train"]["seq_len"])
               for x, _ in batches)
    final = json.loads((run / "provenance.json").read_text())["final_val_loss"]
    assert rec["status"] == "completed"
    assert evaluate.validation_loss(module, cfg2, data) == pytest.approx(final, abs=1e-5)

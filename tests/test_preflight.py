"""The memory check of the workflow's start-up (lowprec.preflight.check_memory)."""

import pytest
import torch

from lowprec import config as lpc
from lowprec import preflight
from lowprec.models import build_model

PAPERS = ("gaussws", "int8_fallback", "mor", "baselines")


def _grid(scale):
    runs = []
    for paper in PAPERS:
        grid = lpc.experiment_grid(paper, scale)
        runs += [lpc.resolve_run(scale, paper, model, method, seed)
                 for model in grid["models"] for method in grid["methods"] for seed in grid["seeds"]]
        ft = lpc.finetune_grid(paper, scale)
        if ft:
            runs += [lpc.resolve_finetune_run(scale, paper, model, method, seed)
                     for model in ft["models"] for method in ft["methods"] for seed in ft["seeds"]]
    return runs


@pytest.fixture
def laptop(monkeypatch):
    """A machine with 8 GiB of RAM and no GPU."""
    monkeypatch.setattr(preflight, "host_memory_bytes", lambda: 8 * preflight.GIB)
    monkeypatch.setattr(preflight, "_cuda_here", lambda: False)


@pytest.mark.parametrize("scale", ["smoke", "tiny", "small"])
def test_committed_grids_fit_an_h100_and_a_laptop(scale, laptop):
    runs = _grid(scale)
    preflight.check_memory(runs, gpu_memory_gib=80)
    preflight.check_memory(runs)  # on the laptop's CPU


def test_paper_scale_gpus_of_unknown_memory_are_not_checked(laptop):
    preflight.check_memory(_grid("paper"))  # accelerator gpu: the slurm profile names no GPU


def test_oversized_batch_is_refused_on_a_gpu():
    run = lpc.resolve_run("small", "mor", "nemotron", "bf16", 0,
                          overrides={"train": {"batch_size": 4096, "accelerator": "gpu"}})
    with pytest.raises(lpc.ConfigError, match=r"run config mor nemotron/bf16/s0: train\.batch_size=4096 x "
                                              r"train\.seq_len=512 needs at least [0-9.]+ GiB .* for 4096 sequences "
                                              r"a rank\), more than the 80 GiB of a GPU \(gpu_memory_gib\); lower "
                                              r"train\.batch_size and raise train\.grad_accum"):
        preflight.check_memory([run], gpu_memory_gib=80)
    preflight.check_memory([run], gpu_memory_gib=None)  # a GPU of unknown memory: not checked
    # the same global batch over 64 GPUs: 64 sequences a rank fit
    preflight.check_memory([lpc.resolve_run("small", "mor", "nemotron", "bf16", 0,
                                            overrides={"train": {"batch_size": 4096, "devices": 64}})], 80)


def test_oversized_batch_is_refused_on_this_machines_cpu(laptop):
    run = lpc.resolve_run("tiny", "baselines", "gpt2", "bf16", 0, overrides={"train": {"batch_size": 8192}})
    with pytest.raises(lpc.ConfigError, match=r"train\.batch_size=8192 x train\.seq_len=128 needs at least [0-9.]+ "
                                              r"GiB .*, more than this machine's 8\.0 GiB of RAM \(no GPU here and no gpu_memory_gib given\)"):
        preflight.check_memory([run])
    # CPU processes on one machine share its RAM: 2 processes of 512 rows fit 8 GiB, 8 do not
    cpu = {"accelerator": "cpu", "strategy": "ddp"}
    preflight.check_memory([lpc.resolve_run("tiny", "baselines", "gpt2", "bf16", 0,
                                            overrides={"train": {**cpu, "batch_size": 1024, "devices": 2}})])
    with pytest.raises(lpc.ConfigError, match=r"batch_size=4096 .* \(8 processes x \(.* for 512 sequences a rank\)\), "
                                              r"more than this machine's 8\.0 GiB of RAM \(accelerator: cpu\)"):
        preflight.check_memory([lpc.resolve_run("tiny", "baselines", "gpt2", "bf16", 0,
                                                overrides={"train": {**cpu, "batch_size": 4096, "devices": 8}})])


def test_sharding_is_suggested_when_the_weights_dominate():
    # Nemotron-3 8B shapes: fp32 weights, gradients and AdamW moments alone exceed one GPU under DDP
    run = lpc.resolve_run("paper", "mor", "nemotron", "bf16", 0)
    with pytest.raises(lpc.ConfigError, match=r"\(train\.strategy: fsdp\)"):
        preflight.check_memory([run], gpu_memory_gib=141)
    sharded = lpc.resolve_run("paper", "mor", "nemotron", "bf16", 0, overrides={"train": {"strategy": "fsdp"}})
    preflight.check_memory([sharded], gpu_memory_gib=141)


@pytest.mark.parametrize("model", ["gpt2", "llama2", "nemotron"])
def test_estimate_is_a_lower_bound_of_what_training_keeps(model):
    """Independent reference: the bytes autograd saves for the backward pass (parameters left
    out), plus the logits alive beside them at the loss, on a real forward pass."""
    run = lpc.resolve_run("tiny", "baselines", model, "bf16", 0, overrides={"train": {"batch_size": 2}})
    vocab, t = run["data"]["vocab_size"], run["train"]
    torch.manual_seed(0)
    net = build_model(run["model"], vocab)
    params = {p.untyped_storage().data_ptr() for p in net.parameters()}
    saved = {}

    def pack(x):
        if x.untyped_storage().data_ptr() not in params:
            saved[x.untyped_storage().data_ptr()] = x.untyped_storage().nbytes()
        return x

    x = torch.randint(0, vocab, (t["batch_size"], t["seq_len"]))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        logits = net(input_ids=x).logits
        torch.nn.functional.cross_entropy(logits.float().reshape(-1, vocab), x.reshape(-1))
    kept = sum(saved.values()) + logits.nbytes
    est = preflight.memory_estimate(run, on_gpu=False)
    assert 0.5 * kept < est["activations"] <= kept, (est["activations"], kept)
    n = sum(p.numel() for p in net.parameters())
    assert est["state"] == 16 * n  # fp32 weights, gradients and two AdamW moments

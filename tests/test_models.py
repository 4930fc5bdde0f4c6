import pytest
import torch

from lowprec.config import model_config
from lowprec.models import build_model, causal_lm_loss, count_parameters, max_seq_len, shape_parameter_count

FAMILY_MODELS = [("gpt2", "GPT2LMHeadModel"), ("llama2", "LlamaForCausalLM"), ("nemotron", "NemotronForCausalLM")]


@pytest.mark.parametrize("name, cls", FAMILY_MODELS)
def test_family_builds_with_expected_blocks_and_learns(name, cls):
    torch.manual_seed(0)
    model = build_model(model_config(name, "smoke"), vocab_size=64)
    assert type(model).__name__ == cls
    if name == "llama2":
        assert model.config.hidden_act == "silu" and hasattr(model.model.layers[0].mlp, "gate_proj")  # SwiGLU
    if name == "nemotron":
        rope = getattr(model.config, "rope_parameters", None) or {}  # transformers >= 5 keeps it there
        assert model.config.hidden_act == "relu2"
        assert rope.get("partial_rotary_factor", getattr(model.config, "partial_rotary_factor", None)) == 0.5
    # a fixed batch is learnable: loss falls over a few AdamW steps
    x = torch.randint(0, 64, (4, 16))
    y = torch.roll(x, -1, dims=1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        loss = causal_lm_loss(model, x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.5


def test_tiny_is_about_a_million_parameters():
    for name in ("gpt2", "llama2", "nemotron"):
        n = count_parameters(build_model(model_config(name, "tiny"), vocab_size=2048))
        assert 0.5e6 < n < 1.5e6, (name, n)


def test_llama2_134m_paper_shape():
    cfg = model_config("llama2", "paper")
    n = count_parameters(build_model(cfg, vocab_size=32000))
    assert abs(n - 134.1e6) < 0.5e6


def test_local_checkpoint_instead_of_random_init(tmp_path):
    torch.manual_seed(0)
    cfg = model_config("llama2", "smoke")
    a = build_model(cfg, vocab_size=64)
    a.save_pretrained(tmp_path / "ckpt")
    b = build_model({**cfg, "checkpoint": str(tmp_path / "ckpt")}, vocab_size=64)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)
    with pytest.raises(ValueError, match="vocab_size"):
        build_model({**cfg, "checkpoint": str(tmp_path / "ckpt")}, vocab_size=65)
    with pytest.raises(FileNotFoundError, match="no config.json"):
        build_model({**cfg, "checkpoint": str(tmp_path)}, vocab_size=64)


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="not divisible by heads"):
        build_model({**model_config("gpt2", "smoke"), "d_model": 33}, vocab_size=64)


@pytest.mark.parametrize("name", ["gpt2", "llama2", "nemotron"])
def test_model_refuses_a_sequence_longer_than_its_maximum(name, tmp_path):
    # GPT2 failed with an IndexError inside its position embedding; Llama-style models trained on
    cfg = model_config(name, "smoke")
    model = build_model(cfg, vocab_size=64)
    x = torch.randint(0, 64, (2, cfg["max_seq_len"]))
    causal_lm_loss(model, x, x)  # the maximum itself is fine
    x = torch.randint(0, 64, (2, cfg["max_seq_len"] + 1))
    with pytest.raises(ValueError, match=rf"model {name}: a sequence of 65 tokens is longer than its max_seq_len=64"):
        causal_lm_loss(model, x, x)
    with pytest.raises(ValueError, match="max_seq_len=64"):
        model(x)  # positional input_ids too
    # a model loaded from a checkpoint keeps the checkpoint's limit
    model.save_pretrained(tmp_path / "ckpt")
    loaded = build_model({**cfg, "checkpoint": str(tmp_path / "ckpt"), "max_seq_len": 1024}, vocab_size=64)
    assert max_seq_len({**cfg, "checkpoint": str(tmp_path / "ckpt"), "max_seq_len": 1024}) == 64
    with pytest.raises(ValueError, match="max_seq_len=64"):
        causal_lm_loss(loaded, x, x)


@pytest.mark.parametrize("name", ["gpt2", "llama2", "llama2_1b", "nemotron"])
@pytest.mark.parametrize("tie", [None, True, False])
def test_parameter_count_from_the_shape_equals_the_built_model(name, tie):
    cfg = model_config(name, "tiny")
    if tie is not None:
        cfg["tie_embeddings"] = tie
    assert shape_parameter_count(cfg, 300) == count_parameters(build_model(cfg, vocab_size=300))


@pytest.mark.parametrize("family", ["gpt2", "llama", "nemotron"])
def test_training_forward_reads_nothing_on_the_host_and_equals_sdpa(family, monkeypatch):
    """The models attend with transformers' SDPA under a name that has no mask function, so
    transformers builds no mask and skips its packed-sequence check (a host read of a device tensor
    at every forward, a sync per step on the GPU); the loss and every gradient are sdpa's, bit for bit."""
    import copy

    from lowprec.models import CAUSAL_SDPA

    cfg = {"name": "m", "family": family, "layers": 2, "d_model": 64, "heads": 4,
           "kv_heads": 4 if family == "gpt2" else 2, "ffn": 128, "max_seq_len": 64}
    torch.manual_seed(0)
    ours = build_model(cfg, 256)
    assert ours.config._attn_implementation == CAUSAL_SDPA
    theirs = copy.deepcopy(ours)
    theirs.set_attn_implementation("sdpa")
    x, y = torch.randint(0, 256, (2, 32)), torch.randint(0, 256, (2, 32))
    reads = []

    def count_host_reads(*names):
        for name in names:
            real = getattr(torch.Tensor, name)
            monkeypatch.setattr(torch.Tensor, name,
                                lambda t, *a, _real=real, _name=name, **k: reads.append(_name) or _real(t, *a, **k))

    count_host_reads("__bool__", "item", "tolist")
    loss = causal_lm_loss(ours, x, y)
    assert reads == []
    monkeypatch.undo()
    loss.backward()
    want = causal_lm_loss(theirs, x, y)
    want.backward()
    assert torch.equal(loss, want)
    for p, q in zip(ours.parameters(), theirs.parameters()):
        assert torch.equal(p.grad, q.grad)
    count_host_reads("__bool__")  # the default would have read one: the check works
    causal_lm_loss(theirs, x, y)
    monkeypatch.undo()
    assert reads


def test_the_kernels_folder_leaves_the_top_level_name_to_its_distribution(tmp_path):
    """From a checkout's root (`python -m ...`, the workflow's jobs) the folder kernels/ is found
    before site-packages; transformers imports the `kernels` distribution's names, so the folder must
    not answer for it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    dist = tmp_path / "site" / "kernels"
    dist.mkdir(parents=True)
    (dist / "__init__.py").write_text("WHO = 'the distribution'\n")
    env = dict(os.environ, PYTHONPATH=str(dist.parent))
    probe = "import kernels, lowprec.kernels as ours; print(kernels.WHO); print(ours.runs_on.__name__)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=root, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["the", "distribution", "runs_on"]


def test_the_compiled_loss_equals_the_eager_one_with_its_gradient():
    """compiled_cross_entropy (compiled training's loss) computes token_cross_entropy's fp32 loss of
    bf16 logits and its gradient, summed in another order: equal to the eager form within fp32
    rounding (here bit for bit on the CPU), the gradient in the logits' dtype; compiled once."""
    from lowprec.models import compiled_cross_entropy, token_cross_entropy

    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(4, 64, 512, generator=g) * 3).to(torch.bfloat16).requires_grad_()
    y = torch.randint(0, 512, (4, 64), generator=g)
    want = token_cross_entropy(logits, y)
    (dwant,) = torch.autograd.grad(want, logits)
    got = compiled_cross_entropy()(logits, y)
    (dgot,) = torch.autograd.grad(got, logits)
    assert compiled_cross_entropy() is compiled_cross_entropy()
    assert got.dtype == torch.float32 and got.item() == pytest.approx(want.item(), rel=1e-6)
    assert dgot.dtype == torch.bfloat16 and torch.allclose(dgot.float(), dwant.float(), rtol=1e-2, atol=1e-6)
    assert dwant.abs().max() > 0

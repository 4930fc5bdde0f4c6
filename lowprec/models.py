"""The three model families, built from our shape keys with transformers' own classes.

Shape keys (configs/models/*.yaml): layers, d_model, heads, kv_heads, ffn, max_seq_len,
tie_embeddings, partial_rotary, dropout, checkpoint.  Random init unless ``checkpoint`` names a local
Hugging Face model directory (no hub access at run time).
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch
from torch import nn

FAMILIES = ("gpt2", "llama", "nemotron")
DEFAULT_MAX_SEQ_LEN = 1024  # a model config without max_seq_len


def hf_config(model_cfg: dict, vocab_size: int):
    """transformers config object for one of our model configs."""
    fam = model_cfg["family"]
    d, layers, heads = model_cfg["d_model"], model_cfg["layers"], model_cfg["heads"]
    if d % heads:
        raise ValueError(f"model {model_cfg.get('name')}: d_model={d} is not divisible by heads={heads}")
    ffn = model_cfg.get("ffn")
    seq = model_cfg.get("max_seq_len", DEFAULT_MAX_SEQ_LEN)
    tie = model_cfg.get("tie_embeddings", fam == "gpt2")
    if fam == "gpt2":
        from transformers import GPT2Config
        drop = model_cfg.get("dropout", 0.0)
        return GPT2Config(vocab_size=vocab_size, n_positions=seq, n_embd=d, n_layer=layers, n_head=heads,
                          n_inner=ffn, resid_pdrop=drop, embd_pdrop=drop, attn_pdrop=drop,
                          tie_word_embeddings=tie, bos_token_id=0, eos_token_id=0)
    kv = model_cfg.get("kv_heads", heads)
    if heads % kv:
        raise ValueError(f"model {model_cfg.get('name')}: heads={heads} is not divisible by kv_heads={kv}")
    common = dict(vocab_size=vocab_size, hidden_size=d, intermediate_size=ffn or 4 * d,
                  num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                  max_position_embeddings=seq, tie_word_embeddings=tie, bos_token_id=0, eos_token_id=0)
    if fam == "llama":
        from transformers import LlamaConfig
        return LlamaConfig(hidden_act="silu", attention_bias=False, mlp_bias=False, **common)
    if fam == "nemotron":
        from transformers import NemotronConfig
        return NemotronConfig(hidden_act="relu2", partial_rotary_factor=model_cfg.get("partial_rotary", 0.5),
                              attention_bias=False, mlp_bias=False, **common)
    raise ValueError(f"model.family: unknown family {fam!r}; choose one of {FAMILIES}")


def max_seq_len(model_cfg: dict) -> int:
    """The longest sequence the model takes: its checkpoint's (``config.json``) when it is loaded
    from one, else ``max_seq_len``. Read without building the model."""
    import json

    ckpt = model_cfg.get("checkpoint")
    if ckpt and (Path(ckpt) / "config.json").is_file():
        hf = json.loads((Path(ckpt) / "config.json").read_text())
        limit = hf.get("n_positions") or hf.get("max_position_embeddings")
        if limit:
            return int(limit)
    return int(model_cfg.get("max_seq_len", DEFAULT_MAX_SEQ_LEN))


# transformers' own SDPA attention under a name of our own. Our models are never given a mask
# (training and evaluation read whole windows: no padding, no packed sequences), and transformers
# (4.53 on) builds no mask for an attention that has no mask function; above all it then skips its
# packed-sequence check, which reads a device tensor on the host at every forward: one host sync
# per training step on the GPU. Under "sdpa" the mask built for our inputs is None too, so the
# attention call, and every number, is the same.
CAUSAL_SDPA = "lowprec_causal_sdpa"


def _use_causal_sdpa(model: nn.Module) -> None:
    try:
        from transformers import AttentionInterface, masking_utils
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
    except ImportError:  # a transformers before 4.53 makes its masks in the model: keep its sdpa
        return
    if (model.config._attn_implementation != "sdpa" or not hasattr(model, "set_attn_implementation")
            or not hasattr(masking_utils, "ALL_MASK_ATTENTION_FUNCTIONS")):
        return  # another attention (a checkpoint's own choice), or no way to switch it
    AttentionInterface.register(CAUSAL_SDPA, sdpa_attention_forward)
    model.set_attn_implementation(CAUSAL_SDPA)


def _model_class(fam: str):
    import transformers
    return {"gpt2": transformers.GPT2LMHeadModel, "llama": transformers.LlamaForCausalLM,
            "nemotron": transformers.NemotronForCausalLM}[fam]


def build_model(model_cfg: dict, vocab_size: int) -> nn.Module:
    """A causal LM of the configured family: random init, or loaded from ``checkpoint``. It refuses
    a sequence longer than its maximum (``max_seq_len``, or the checkpoint's own)."""
    fam = model_cfg["family"]
    if fam not in FAMILIES:
        raise ValueError(f"model.family: unknown family {fam!r}; choose one of {FAMILIES}")
    ckpt = model_cfg.get("checkpoint")
    if ckpt:
        path = Path(ckpt)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"model.checkpoint: {path} is not a Hugging Face model folder "
                                    "(no config.json)")
        model = _model_class(fam).from_pretrained(path, local_files_only=True)
        if model.config.vocab_size != vocab_size:
            raise ValueError(f"model.checkpoint: {path} has vocab_size {model.config.vocab_size}, "
                             f"the dataset has {vocab_size}")
    else:
        model = _model_class(fam)(hf_config(model_cfg, vocab_size))
    _use_causal_sdpa(model)
    limit = getattr(model.config, "n_positions", None) or model.config.max_position_embeddings
    model.register_forward_pre_hook(functools.partial(_check_sequence_length, model_cfg.get("name", fam), limit),
                                    with_kwargs=True)
    return model


def _check_sequence_length(name: str, limit: int, module, args, kwargs):
    """GPT2 would fail deep inside its position embedding (an IndexError) and Llama-style models
    would run past the length their rotary embedding was set up for without a word."""
    ids = kwargs.get("input_ids", args[0] if args else None)
    if ids is not None and ids.shape[-1] > limit:
        raise ValueError(f"model {name}: a sequence of {ids.shape[-1]} tokens is longer than its "
                         f"max_seq_len={limit}; lower train.seq_len or raise max_seq_len")


def shape_parameter_count(model_cfg: dict, vocab_size: int) -> int:
    """The parameters ``build_model`` gives a random-init model of this shape, counted from the
    shape keys without building it (a paper-scale model is too large to build for a check)."""
    fam, d, layers = model_cfg["family"], model_cfg["d_model"], model_cfg["layers"]
    ffn = model_cfg.get("ffn") or 4 * d
    tie = model_cfg.get("tie_embeddings", fam == "gpt2")
    head = 0 if tie else vocab_size * d
    if fam == "gpt2":  # Conv1D layers with biases, LayerNorm weight and bias, learned positions
        block = (d * 3 * d + 3 * d) + (d * d + d) + (d * ffn + ffn) + (ffn * d + d) + 2 * 2 * d
        return vocab_size * d + max_seq_len(model_cfg) * d + layers * block + 2 * d + head
    kv = model_cfg.get("kv_heads", model_cfg["heads"]) * (d // model_cfg["heads"])
    attention = 2 * d * d + 2 * d * kv  # q, o; k, v (grouped-query): no biases
    if fam == "llama":  # SwiGLU (gate, up, down), RMSNorm weights
        block, norm = attention + 3 * d * ffn + 2 * d, d
    else:  # nemotron: squared-ReLU MLP (up, down), LayerNorm1P weight and bias
        block, norm = attention + 2 * d * ffn + 2 * 2 * d, 2 * d
    return vocab_size * d + layers * block + norm + head


def count_parameters(model: nn.Module) -> int:
    # tied embeddings share one tensor: count each storage once
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel()
    return total


def causal_lm_loss(model, x: torch.Tensor, y: torch.Tensor, loss=None) -> torch.Tensor:
    """Mean next-token cross entropy of ``model`` (a causal LM, or a callable such as a compiled one);
    ``loss``: the function of (logits, targets) that computes it (``token_cross_entropy`` unless given,
    e.g. ``compiled_cross_entropy()``)."""
    logits = model(input_ids=x, use_cache=False).logits  # training builds no KV cache
    return (loss or token_cross_entropy)(logits, y)


def token_cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross entropy of next-token logits (any float dtype) against targets, in fp32."""
    return nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))


@functools.lru_cache(maxsize=None)
def compiled_cross_entropy():
    """``token_cross_entropy`` under ``torch.compile``, for compiled training (``train.compile``): the
    same fp32 arithmetic, summed in another order, without its eager form's fp32 copy of the logits,
    their log-softmax kept for the backward and the fp32 gradient (about 14 GiB at 32 x 1024 tokens of a
    32768-word vocabulary, where runs sharing a GPU ran out of memory, and as many passes over them).
    One function for every run of a process: it compiles once per shape (training, evaluation)."""
    return torch.compile(token_cross_entropy, dynamic=False)

"""The three model families, built from our shape keys with transformers' own classes.

Shape keys (configs/models/*.yaml): layers, d_model, heads, kv_heads, ffn, max_seq_len,
tie_embeddings, partial_rotary, dropout, checkpoint.  Random init unless ``checkpoint`` names a local
Hugging Face model directory (no hub access at run time).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

FAMILIES = ("gpt2", "llama", "nemotron")


def hf_config(model_cfg: dict, vocab_size: int):
    """transformers config object for one of our model configs."""
    fam = model_cfg["family"]
    d, layers, heads = model_cfg["d_model"], model_cfg["layers"], model_cfg["heads"]
    if d % heads:
        raise ValueError(f"model {model_cfg.get('name')}: d_model={d} is not divisible by heads={heads}")
    ffn = model_cfg.get("ffn")
    seq = model_cfg.get("max_seq_len", 1024)
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


def _model_class(fam: str):
    import transformers
    return {"gpt2": transformers.GPT2LMHeadModel, "llama": transformers.LlamaForCausalLM,
            "nemotron": transformers.NemotronForCausalLM}[fam]


def build_model(model_cfg: dict, vocab_size: int) -> nn.Module:
    """A causal LM of the configured family: random init, or loaded from ``checkpoint``."""
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
        return model
    return _model_class(fam)(hf_config(model_cfg, vocab_size))


def count_parameters(model: nn.Module) -> int:
    # tied embeddings share one tensor: count each storage once
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel()
    return total


def causal_lm_loss(model, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy of ``model`` (a causal LM, or a callable such as a compiled one)."""
    logits = model(input_ids=x, use_cache=False).logits  # training builds no KV cache
    return nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))

"""Knowing when an optimizer step happened, for GaussWS's per-step cache of W_c."""

from __future__ import annotations

# A weight's _version counter moves with every in-place update made through torch's dispatcher
# (foreach/for-loop optimizers, load_state_dict, copy_), but NOT with fused optimizers
# (torch.optim.AdamW(fused=True) leaves it unchanged). So the cache key also holds a global count of
# optimizer steps, advanced by a step post-hook on every torch.optim.Optimizer (installed once, when
# the first GaussWS transform is built).
_STEP_EPOCH = 0
_HOOK_HANDLE = None


def _on_optimizer_step(optimizer, args, kwargs) -> None:
    global _STEP_EPOCH
    _STEP_EPOCH += 1


def epoch() -> int:
    """Optimizer steps taken so far (every torch.optim.Optimizer, once ``install`` ran), plus
    ``mark_step`` calls."""
    return _STEP_EPOCH


def install() -> None:
    """The step post-hook on every torch.optim.Optimizer, once per process."""
    global _HOOK_HANDLE
    if _HOOK_HANDLE is None:
        from torch.optim.optimizer import register_optimizer_step_post_hook
        _HOOK_HANDLE = register_optimizer_step_post_hook(_on_optimizer_step)


def mark_step() -> None:
    """Tell every GaussWS transform that the weights changed (for updates outside torch.optim
    optimizers and outside the dispatcher, e.g. through ``.data``): the next training forward of each
    layer draws a new W_c."""
    _on_optimizer_step(None, (), {})


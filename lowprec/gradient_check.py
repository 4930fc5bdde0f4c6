"""The first backward of a run must reach every weight matrix.

A method's backward that leaves a weight without a gradient, or with an exactly zero one, trains a
model whose layers never move while its loss still falls a little through the others: a run that
looks fine and is wrong. This happened: torch 2.11 compiled the INT8 fast path's layers without a
bias into a backward of exact zeros (the README's known fault). No method of the suite zeroes a
weight's whole gradient on purpose (a quantizer scales a gradient by its amax, or for delayed
scaling by a recent step's, so its largest codes are not zero), so the training process checks the
first backward of each model it calls (the compiled one and, on telemetry steps, the eager one) and
stops with the names.
"""

from __future__ import annotations

from typing import Iterable

import torch


class GradientsNotReached(RuntimeError):
    """A training step's backward left weight matrices without a gradient (names in the message)."""


def unreached_weights(named_parameters: Iterable[tuple[str, torch.nn.Parameter]], names: set[str]) -> list[str]:
    """The parameters named in `names` that require a gradient and hold none, or one of zeros only.
    A NaN counts as reached (the loss check owns non-finite values). One device sync in all."""
    params = [(n, p) for n, p in named_parameters if n in names and p.requires_grad]
    missing = [n for n, p in params if p.grad is None]
    present = [(n, p) for n, p in params if p.grad is not None]
    if not present:
        return missing
    reached = torch.stack([p.grad.ne(0).any() for _, p in present]).tolist()
    return missing + [n for (n, _), ok in zip(present, reached) if not ok]


def require_weight_gradients(named_parameters, names: set[str], *, step: int, model: str) -> None:
    """Raise GradientsNotReached naming the weight matrices `unreached_weights` finds."""
    dead = unreached_weights(named_parameters, names)
    if not dead:
        return
    shown = ", ".join(dead[:4]) + (f" and {len(dead) - 4} more" if len(dead) > 4 else "")
    raise GradientsNotReached(
        f"the backward of step {step} ({model} model) gave {len(dead)} of {len(names)} weight matrices "
        f"no gradient or an exactly zero one ({shown}): training would leave them as they are. "
        "To tell whether compilation or the fast path causes it, train the run again with "
        "train.compile: false, or with LOWPREC_FAST_PATH=off (the emulation)")

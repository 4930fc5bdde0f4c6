"""Checkpoints: loading that cannot run code, saving that keeps the one before, and the choice of
what a killed run resumes from.

A checkpoint is a pickle, and unpickling runs whatever the pickle names; ``torch.load`` with
``weights_only=False`` would execute the payload of a checkpoint taken from elsewhere. Every
checkpoint lowprec reads (resume, ``train.init_from``, ``lowprec.evaluate``) goes through ``load``:
``weights_only=True``, which admits tensors, numbers, strings, containers and the types in
``SAFE_GLOBALS``, the one allow-list.

Saving (``save``, which Lightning's checkpoint plugin in ``lowprec.train`` calls) writes to a
temporary file, syncs it and renames it into place, so a killed save never leaves a partial
``last.ckpt``; the checkpoint it replaces is kept as ``last.previous.ckpt``. A ``last.ckpt`` that cannot be read anyway (a disk
that filled up, a copy cut short) is moved aside as ``last.ckpt.corrupt-<n>`` and the run resumes
from the previous checkpoint, or starts again from step 0 with a warning when there is none
(``resume_candidate``).
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import torch

from .errors import error_text

LAST = "last.ckpt"
PREVIOUS = "last.previous.ckpt"
SET_ASIDE = ".corrupt-"  # last.ckpt.corrupt-1, ...: kept for inspection, never read again

# Types beyond those torch.load(weights_only=True) admits by itself (tensors, dtypes, sizes,
# OrderedDict, builtin scalars and containers) that checkpoints of lowprec.train hold. None today:
# the model, recipe extra state (delayed-scaling histories, fallback levels, sample counters), the
# optimizer, the LR scheduler, the logged rows and Lightning's loop state are all tensors and
# plain containers, which tests/test_resume.py checks for every stateful recipe family. A state
# that grows a new type adds it here, and only here.
SAFE_GLOBALS: tuple = ()
torch.serialization.add_safe_globals(list(SAFE_GLOBALS))


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message names the file and why."""


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint whose pickle names a type outside the allow-list: loading it could run code."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint file that is not a readable torch checkpoint (truncated, empty, not a zip)."""


def load(path: str | os.PathLike, map_location: Any = "cpu") -> Any:
    """``torch.load(path, weights_only=True)`` with errors that name the file and say what is
    wrong: ``UnsafeCheckpointError`` for a foreign pickled object (nothing of it runs),
    ``CorruptCheckpointError`` for an unreadable file, ``CheckpointError`` if it is missing."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint file not found")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        unsafe = _foreign_globals(path)
        if unsafe:
            raise UnsafeCheckpointError(
                f"{path}: refusing to load: the checkpoint holds pickled object(s) of type "
                f"{', '.join(unsafe)}, which are not tensors, numbers or containers, and unpickling them "
                "could run code (loaded with torch.load(weights_only=True)). Use checkpoints written by "
                "lowprec.train; a type that lowprec's own state needs goes into "
                "lowprec.checkpoint.SAFE_GLOBALS") from None
        raise _corrupt(path, e) from e
    except (RuntimeError, EOFError, OSError, ValueError) as e:
        raise _corrupt(path, e) from e


def _corrupt(path: Path, e: BaseException) -> CorruptCheckpointError:
    return CorruptCheckpointError(f"{path}: not a readable checkpoint, truncated or corrupt ({error_text(e, 160)})")


def _foreign_globals(path: Path) -> list[str]:
    """The globals the pickle names that the weights-only unpickler will not build (those of
    ``SAFE_GLOBALS`` it builds)."""
    lister = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)  # torch >= 2.5
    try:
        return lister(path) if lister else ["(a type outside the allow-list)"]
    except Exception:  # an unreadable archive: corrupt, not foreign
        return []


# --------------------------------------------------------------------------- saving

def save(checkpoint: dict, path: str | os.PathLike) -> None:
    """``torch.save`` to a temporary file beside ``path``, synced and renamed into place; a
    ``last.ckpt`` it replaces is kept as ``last.previous.ckpt``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name == LAST and path.is_file():
        os.replace(path, path.with_name(PREVIOUS))
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


# --------------------------------------------------------------------------- resuming

def set_aside(path: Path) -> Path:
    """Rename ``path`` to ``<name>.corrupt-<n>`` (the first free n) beside it."""
    n = 1
    while (target := path.with_name(f"{path.name}{SET_ASIDE}{n}")).exists():
        n += 1
    os.replace(path, target)
    return target


def resume_candidate(ckpt_dir: Path, may_move: bool) -> tuple[Path | None, dict | None, list[str]]:
    """The newest readable checkpoint of ``ckpt_dir`` (``last.ckpt``, else ``last.previous.ckpt``)
    loaded, or ``(None, None, ...)`` if there is none; and one warning per checkpoint that could
    not be read, which is moved aside when ``may_move`` (rank zero: the others only skip it). A
    checkpoint with a foreign pickled object is not a damaged file but a refused one: it raises."""
    warnings = []
    for name in (LAST, PREVIOUS):
        path = ckpt_dir / name
        if not path.is_file():
            continue
        try:
            return path, load(path), warnings
        except CorruptCheckpointError as e:
            moved = set_aside(path) if may_move else None
            warnings.append(f"{e}; " + (f"moved to {moved.name}" if moved else "skipped"))
        except UnsafeCheckpointError as e:
            raise UnsafeCheckpointError(f"{e}. The run cannot resume from it: remove it to train "
                                        "from the previous checkpoint or from step 0") from None
    return None, None, warnings

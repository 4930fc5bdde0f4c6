"""Train one run: ``python -m lowprec.train --config run.yaml``.

Writes into the run's ``output_dir`` (rank zero only, under DDP/FSDP):
  metrics.csv       one row per logged step (train_loss, val_loss, lr, tokens, tokens_per_s, ...);
                    while the run trains, one line per logged row, appended and synced as it is logged
  telemetry.csv.gz  per layer/GEMM/operand numerics every ``method.telemetry_every`` steps (if on)
  config.yaml       the resolved config
  provenance.json   code and library versions, device, times, tokens seen, status (written last)
  checkpoints/      last.ckpt, from which a killed run resumes (see ``lowprec.checkpoint``)
A non-finite loss stops the run with status ``diverged``; that is a result, not an error.
Progress goes to stdout (step, train loss, tokens/s, ETA) at most every ``PROGRESS_EVERY_S`` seconds
(``lowprec.steplog``, which writes metrics.csv and the telemetry as the run trains).

Resuming: the rows logged up to a checkpoint travel inside it. A resumed run rewrites metrics.csv
from the checkpoint's rows, dropping the rows the killed process logged after its last checkpoint,
and appends from there, so the finished file equals an uninterrupted run's. (The workflow may have
removed metrics.csv, a job output, before the rerun; the checkpoint does not depend on it.)

Multi-process training (``train.strategy: ddp | fsdp``, ``train.devices``, ``train.num_nodes``):
``train.batch_size`` is the global batch, all ranks together. Each of the N ranks takes its own
``batch_size / N`` rows of every global batch, so N ranks train on exactly the batches of the
1-process run; the logged train and validation losses are reduced over ranks. Telemetry is rank
zero's: the statistics of the operands rank zero quantizes (its shard of each batch; weights are
the same on every rank). Summaries such as SQNR in dB do not combine exactly across ranks, so none
are averaged. Throughput and peak memory are measured on rank zero.
``train.init_from`` starts from another run's final weights (fine-tuning); see ``init_weights_from``.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

from .cli import train_parser

if __name__ == "__main__":  # --help and usage errors answer before torch and Lightning load (seconds)
    train_parser().parse_args()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import lightning as L  # noqa: E402
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO  # noqa: E402
from lightning.pytorch.callbacks import Callback  # noqa: E402
from lightning.pytorch.trainer.states import TrainerFn  # noqa: E402
from lightning.pytorch.utilities import rank_zero_only  # noqa: E402
from lightning.pytorch.utilities.exceptions import SIGTERMException  # noqa: E402

from . import checkpoint as ckptlib  # noqa: E402
from . import config as cfglib  # noqa: E402
from . import provenance  # noqa: E402
from .data import DataError, TokenData  # noqa: E402
from .gradient_check import GradientsNotReached, require_weight_gradients  # noqa: E402
from .io import write_json, write_text, write_yaml  # noqa: E402
from .methods import apply_method, resolve_precision  # noqa: E402
from .models import build_model, causal_lm_loss, compiled_cross_entropy, count_parameters  # noqa: E402
from .steplog import (MetricsFile, StepLogger, TelemetryWriter, merge_telemetry, metrics_frame,  # noqa: E402
                      peak_memory_mb)
from .telemetry import LEGACY_TELEMETRY_FILE, TELEMETRY_FILE, write_telemetry  # noqa: E402

STATUS_COMPLETED, STATUS_DIVERGED = "completed", "diverged"
# Mistakes in what the user gave (config, data, checkpoints): one line on stderr, no traceback
USER_ERRORS = (cfglib.ConfigError, DataError, ckptlib.CheckpointError)


# --------------------------------------------------------------------------- data

class TrainBatches(torch.utils.data.IterableDataset):
    """Endless random windows; global batch ``i`` depends only on (seed, i), so a resumed run can start
    at any batch and see exactly what an uninterrupted run would have seen. Rank ``rank`` of
    ``world_size`` gets its contiguous share of the global batch's rows."""

    def __init__(self, tokens: np.ndarray, batch_size: int, seq_len: int, seed: int, start: int = 0,
                 rank: int = 0, world_size: int = 1):
        if len(tokens) <= seq_len + 1:
            raise DataError(f"train split has {len(tokens)} tokens, fewer than seq_len+1={seq_len + 1}")
        cfglib.check_global_batch(batch_size, world_size)
        self.tokens, self.batch_size, self.seq_len, self.seed, self.start = tokens, batch_size, seq_len, seed, start
        per_rank = batch_size // world_size
        self.rows = slice(rank * per_rank, (rank + 1) * per_rank)

    def batch(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng([self.seed, i])
        # draw the whole global batch, keep this rank's rows: the same windows for any world size
        offsets = rng.integers(0, len(self.tokens) - self.seq_len - 1, size=self.batch_size)[self.rows]
        rows = np.stack([self.tokens[o:o + self.seq_len + 1] for o in offsets]).astype(np.int64)
        t = torch.from_numpy(rows)
        return t[:, :-1], t[:, 1:]

    def __iter__(self):
        i = self.start
        while True:
            yield self.batch(i)
            i += 1


def val_batches(tokens: np.ndarray, batch_size: int, seq_len: int, n_batches: int) -> list:
    """A fixed validation set: non-overlapping windows spread evenly over the validation split, in
    batches of equal size (so the mean of batch means is the token mean)."""
    n_windows = (len(tokens) - 1) // seq_len
    if n_windows < 1:
        raise DataError(f"validation split has {len(tokens)} tokens, fewer than seq_len+1={seq_len + 1}")
    want = min(n_windows, n_batches * batch_size)
    if want > batch_size:
        want -= want % batch_size
    starts = np.linspace(0, n_windows - 1, want).astype(np.int64) * seq_len
    rows = torch.from_numpy(np.stack([tokens[s:s + seq_len + 1] for s in starts]).astype(np.int64))
    return [(rows[i:i + batch_size, :-1], rows[i:i + batch_size, 1:]) for i in range(0, want, batch_size)]


class LMData(L.LightningDataModule):
    """Shards batches over ranks itself (the Trainer runs with ``use_distributed_sampler=False``)."""

    def __init__(self, data: TokenData, train_cfg: dict, seed: int):
        super().__init__()
        self.data, self.cfg, self.seed = data, train_cfg, seed

    def _rank_world(self) -> tuple[int, int]:
        return (self.trainer.global_rank, self.trainer.world_size) if self.trainer else (0, 1)

    def train_dataloader(self):
        # Loops are restored before dataloaders are requested, so global_step is the resumed step.
        start = self.trainer.global_step * self.cfg.get("grad_accum", 1) if self.trainer else 0
        rank, world = self._rank_world()
        ds = TrainBatches(self.data.splits["train"], self.cfg["batch_size"], self.cfg["seq_len"], self.seed, start,
                          rank=rank, world_size=world)
        return torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)

    def val_dataloader(self):
        """Every validation batch split row-wise over the ranks, each piece with its weight (1, or 0
        for a stand-in row where a batch has fewer rows than ranks: every rank must run the same
        number of forward passes, since DDP synchronizes buffers in each)."""
        rank, world = self._rank_world()
        pieces = []
        for x, y in val_batches(self.data.splits["val"], self.cfg["batch_size"], self.cfg["seq_len"],
                                self.cfg.get("val_batches", 8)):
            xs, ys = torch.tensor_split(x, world)[rank], torch.tensor_split(y, world)[rank]
            pieces.append((xs, ys, 1.0) if len(xs) else (x[:1], y[:1], 0.0))
        return torch.utils.data.DataLoader(pieces, batch_size=None, num_workers=0)


# --------------------------------------------------------------------------- model

def lr_lambda(warmup: int, max_steps: int, min_ratio: float):
    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, max_steps - warmup))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    return f


class LitLM(L.LightningModule):
    def __init__(self, cfg: dict, vocab_size: int, precision: str):
        super().__init__()
        self.cfg, self.train_cfg = cfg, cfg["train"]
        self.model = build_model(cfg["model"], vocab_size)
        self.method_info = apply_method(self.model, cfg["method"], precision, seed=cfg["seed"])
        self.telemetry = self.method_info.pop("telemetry")
        self.extra_loss = self.method_info.pop("extra_loss")  # the recipe's own term of the loss, if any
        self.tokens_per_batch = self.train_cfg["batch_size"] * self.train_cfg["seq_len"]
        self.diverged_at: int | None = None
        self.step_losses: list[torch.Tensor] = []
        self.matrix_names = {n for n, p in self.model.named_parameters() if p.dim() >= 2}  # weight decay
        self.compiled = None  # lowprec.linear.compiled(self.model) when train.compile is on
        self.loss = None      # the loss of (logits, targets): models.compiled_cross_entropy() when compiled
        self.fused_optimizer = False  # AdamW's fused kernel (configure_optimizers: on the GPU)
        self.stepped_model = "eager"   # the model the last training step called
        self.gradients_checked: set[str] = set()  # the models whose first backward was checked

    def net(self):
        """The model this step calls: the compiled one, except on telemetry steps, which need the
        emulation's values (QLinear takes the fast path only where nothing is recorded)."""
        if self.compiled is None:
            return self.model
        if self.telemetry is not None and self.telemetry.recording():
            return self.compiled.eager
        return self.compiled

    def training_step(self, batch, batch_idx):
        x, y = batch
        net = self.net()
        self.stepped_model = "eager" if net is self.model else "compiled"
        loss = causal_lm_loss(net, x, y, self.loss)
        finite = bool(torch.isfinite(loss))
        if self.trainer.world_size > 1:  # all ranks skip backward together, or DDP would hang
            finite = self.trainer.strategy.reduce_boolean_decision(finite, all=True)
        if not finite:
            # Skipping backward keeps the weights of the last finite step; the run ends here.
            self.diverged_at = self.global_step
            self.trainer.should_stop = True
            return None
        self.step_losses.append(loss.detach())
        if self.extra_loss is not None:
            loss = loss + self.extra_loss(self.model)
        return loss

    def on_after_backward(self):
        # FSDP is left out: a rank holds shards of the matrices, and a shard's gradient may be absent
        if self.stepped_model in self.gradients_checked or "fsdp" in type(self.trainer.strategy).__name__.lower():
            return
        self.gradients_checked.add(self.stepped_model)
        require_weight_gradients(self.model.named_parameters(), self.matrix_names, step=self.global_step,
                                 model=self.stepped_model)

    def on_validation_epoch_start(self):
        self.val_sums = torch.zeros(2, dtype=torch.float64, device=self.device)  # loss x tokens, tokens

    def validation_step(self, batch, batch_idx):
        x, y, weight = batch
        n = weight * y.numel()
        self.val_sums += torch.stack([causal_lm_loss(self.net(), x, y, self.loss).detach().double() * n,
                                      torch.tensor(n, dtype=torch.float64, device=self.device)])

    def on_validation_epoch_end(self):
        # the token mean over the whole validation set, whichever rank evaluated which rows
        sums = self.trainer.strategy.reduce(self.val_sums, reduce_op="sum")
        self.log("val_loss", (sums[0] / sums[1]).float(), prog_bar=True, logger=False)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        if self.fused_optimizer and gradient_clip_val:
            # Lightning's mixed-precision plugin refuses to clip for any optimizer whose step could
            # unscale (the fused AdamW), scaler or not; without a scaler (fused_adamw_applies) the
            # gradients are the true ones, clipped by their global norm as Lightning's own clip does
            if gradient_clip_algorithm not in (None, "norm"):
                raise ValueError(f"train.grad_clip: the fused AdamW clips by norm, not {gradient_clip_algorithm!r}")
            torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]],
                                           gradient_clip_val)
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def configure_optimizers(self):
        t = self.train_cfg
        # FSDP flattens parameters into 1-D shards before this hook runs: decide by the names of
        # the matrices recorded at build time, not by the shapes seen here
        params = [(_clean_name(n), p) for n, p in self.model.named_parameters()]
        decay = [p for n, p in params if n in self.matrix_names]
        no_decay = [p for n, p in params if n not in self.matrix_names]
        self.fused_optimizer = fused_adamw_applies([p for _, p in params], self.trainer.strategy,
                                                   self.trainer.precision)
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": t.get("weight_decay", 0.0)},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=t["lr"], betas=tuple(t.get("betas", (0.9, 0.95))), eps=t.get("eps", 1e-8),
                                fused=self.fused_optimizer or None)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lr_lambda(t.get("warmup_steps", 0), t["max_steps"], t.get("min_lr_ratio", 0.1)))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def fused_adamw_applies(params, strategy, precision: str) -> bool:
    """Whether training steps AdamW's fused kernel: on the GPU (the benchmarks' AdamW: one launch per
    group instead of several per tensor list, the same arithmetic), not under FSDP, whose shards it
    was never run with, not with fp16's gradient scaler (the fused step unscales by itself, after
    the point where the gradients are clipped), and not on the CPU, where the committed runs'
    curves come from the foreach form."""
    return (all(p.is_cuda for p in params) and "fsdp" not in type(strategy).__name__.lower()
            and not str(precision).startswith("16"))


def _clean_name(name: str) -> str:
    """A parameter name as the unwrapped model spells it (FSDP inserts a wrapper level)."""
    return name.replace("_fsdp_wrapped_module.", "")


class SafeCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint plugin on ``lowprec.checkpoint``: its safe ``load`` for reading, its
    atomic ``save`` that keeps the replaced checkpoint. ``preloaded`` hands Lightning a checkpoint
    that ``resume_candidate`` has already read, so that resuming reads it once."""

    def __init__(self, preloaded: tuple[Path, dict] | None = None):
        super().__init__()
        self.preloaded = preloaded

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        ckptlib.save(checkpoint, path)

    def load_checkpoint(self, path, map_location=None, weights_only=None) -> dict:
        if self.preloaded is not None and Path(path) == self.preloaded[0]:
            ckpt, self.preloaded = self.preloaded[1], None
            return ckpt
        return ckptlib.load(path, map_location=map_location or "cpu")


class PeriodicCheckpoint(Callback):
    """Saves ``path`` every ``every`` optimizer steps. At a step that also validates, the save
    waits for the validation, so that the checkpoint holds that step's validation row: Lightning
    does not repeat, on resume, a validation that was due after a checkpoint taken at the end of
    the training batch. A run stopped by SIGTERM (a job's time limit) saves the step it ended:
    Lightning ends that step, its validation included, and raises, and the next start resumes there
    rather than at the last periodic save."""

    def __init__(self, path: Path, every: int, val_every: int):
        self.path, self.every, self.val_every, self.saved_step = path, every, val_every, None

    def _save(self, trainer, any_step: bool = False) -> None:
        step = trainer.global_step
        if step > 0 and (any_step or step % self.every == 0) and step != self.saved_step:
            trainer.save_checkpoint(str(self.path), weights_only=False)
            self.saved_step = step

    def on_exception(self, trainer, pl_module, exception):
        if isinstance(exception, SIGTERMException) and trainer.state.fn == TrainerFn.FITTING:
            self._save(trainer, any_step=True)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step % self.val_every != 0:
            self._save(trainer)

    def on_validation_end(self, trainer, pl_module):
        if trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking:
            self._save(trainer)


# --------------------------------------------------------------------------- run

def _may_resume(ckpt_dir: Path, cfg_hash: str) -> bool:
    """Whether ``ckpt_dir`` holds checkpoints of an unfinished run of this very config."""
    stamp = ckpt_dir / "config.sha"
    if (ckpt_dir / "COMPLETE").exists():
        return False  # a finished run asked to run again means: train again
    return stamp.is_file() and stamp.read_text().strip() == cfg_hash  # else another config: start fresh


def _resume_checkpoint(ckpt_dir: Path, cfg_hash: str) -> tuple[Path | None, dict | None, list[str]]:
    """(the checkpoint to resume from, its contents, one message per unreadable checkpoint moved
    aside). An unreadable ``last.ckpt`` is a warning, not an error: the run resumes from the
    previous checkpoint, or trains from step 0 when there is none."""
    if not _may_resume(ckpt_dir, cfg_hash):
        return None, None, []
    # only rank zero renames files (rank from the launcher's environment; no process group yet)
    path, ckpt, problems = ckptlib.resume_candidate(ckpt_dir, may_move=rank_zero_only.rank == 0)
    for p in problems:
        _warn(p)
    if problems:
        _warn(f"resuming from {path} (step {ckpt['global_step']})" if path else
              f"no earlier checkpoint in {ckpt_dir}: training restarts from step 0")
    return path, ckpt, problems


def _warn(message: str) -> None:
    print(f"lowprec.train: warning: {message}", file=sys.stderr, flush=True)


def init_weights_from(model: torch.nn.Module, source: str) -> dict:
    """Copy every parameter of ``model`` from ``source``: a Lightning checkpoint of ``LitLM``, a
    plain state dict, or a run folder (its ``checkpoints/last.ckpt``). Only parameters travel:
    buffers and extra state (call counters, scaling histories, fallback levels) belong to the
    recipe of the run being started, which may differ from the source's. Returns provenance."""
    from .io import sha256_file

    path = Path(source)
    if path.is_dir():
        done = path / "checkpoints" / "COMPLETE"
        if not done.is_file() or done.read_text().strip() != STATUS_COMPLETED:
            raise cfglib.ConfigError(f"train.init_from: run folder {path} has not completed "
                                     f"(no 'completed' in {done})")
        path = path / "checkpoints" / "last.ckpt"
    if not path.is_file():
        raise cfglib.ConfigError(f"train.init_from: checkpoint file not found: {path}")
    try:
        ckpt = ckptlib.load(path)
    except ckptlib.CheckpointError as e:
        raise type(e)(f"train.init_from: {e}") from None
    state = ckpt.get("state_dict", ckpt) if isinstance(ckpt, dict) else None
    if not isinstance(state, dict):
        raise cfglib.ConfigError(f"train.init_from: {path} holds no state dict")
    # LitLM keeps the network as self.model: its keys carry a "model." prefix
    if any(k.startswith("model.") for k in state):
        state = {k[len("model."):]: v for k, v in state.items() if k.startswith("model.")}
    params = dict(model.named_parameters())
    missing = [n for n in params if n not in state]
    if missing:
        raise cfglib.ConfigError(f"train.init_from: {path} lacks parameter(s) {missing[:8]} "
                                 f"({len(missing)} of {len(params)}): a different model?")
    wrong = [f"{n}: {tuple(state[n].shape)} vs {tuple(p.shape)}" for n, p in params.items()
             if tuple(state[n].shape) != tuple(p.shape)]
    if wrong:
        raise cfglib.ConfigError(f"train.init_from: {path}: shape mismatch (checkpoint vs model) "
                                 f"for {wrong[:4]} (another model size or vocabulary?)")
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(state[n].to(p.dtype))
    return {"path": str(path), "sha256": sha256_file(path)}


class PrepareRunFolder(Callback):
    """Rank zero clears the outputs and checkpoints a previous attempt left and stamps the checkpoint
    folder with the config hash. This runs in ``setup``, between Lightning's pre- and post-setup
    barriers: every rank has read the checkpoint folder (to decide whether to resume) before
    anything in it changes, and none trains before the change is done."""

    def __init__(self, out: Path, cfg_hash: str, fresh: bool):
        self.out, self.cfg_hash, self.fresh, self.done = out, cfg_hash, fresh, False

    def setup(self, trainer, pl_module, stage):
        if self.done or not trainer.is_global_zero:
            return
        import shutil

        # stale results must not outlive a rerun
        for f in ("metrics.csv", "provenance.json", TELEMETRY_FILE, LEGACY_TELEMETRY_FILE):
            (self.out / f).unlink(missing_ok=True)
        ckpt_dir = self.out / "checkpoints"
        if self.fresh and ckpt_dir.is_dir():
            for p in ckpt_dir.iterdir():  # checkpoints moved aside as unreadable stay for inspection
                if ckptlib.SET_ASIDE not in p.name:
                    shutil.rmtree(p) if p.is_dir() else p.unlink()
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        write_text(self.out / "checkpoints" / "config.sha", self.cfg_hash + "\n")
        self.done = True


def placement(t: dict, cuda: bool) -> dict:
    """Lightning's accelerator, devices, num_nodes and strategy for a run's ``train`` settings. A run
    configured for GPUs on a machine without one trains as a single CPU process (slowly, but with
    the same global batch); ``accelerator: cpu`` keeps the configured devices (gloo processes)."""
    accelerator = t.get("accelerator", "auto")
    if cuda and accelerator in ("auto", "gpu", "cuda"):
        accelerator = "gpu"
    elif accelerator != "cpu":
        return {"accelerator": "cpu", "devices": 1, "num_nodes": 1, "strategy": "auto"}
    elif t.get("strategy") == "fsdp":
        raise cfglib.ConfigError("train.strategy: fsdp needs GPUs (Lightning's FSDP runs on CUDA only), "
                                 "but train.accelerator is cpu; use ddp on CPU")
    return {"accelerator": accelerator, "devices": t.get("devices", 1), "num_nodes": t.get("num_nodes", 1),
            "strategy": t.get("strategy", "auto")}


def lightning_strategy(name: str, model: torch.nn.Module):
    """``fsdp`` shards per transformer block (the classes transformers lists as ``_no_split_modules``),
    so that only one block's full weights are gathered at a time; other names go to Lightning."""
    if name != "fsdp":
        return name
    from lightning.pytorch.strategies import FSDPStrategy

    blocks = {type(m) for m in model.modules() if type(m).__name__ in (getattr(model, "_no_split_modules", None) or ())}
    return FSDPStrategy(auto_wrap_policy=blocks or None)


# a compiled run's loss compiled too (models.compiled_cross_entropy); LOWPREC_COMPILED_LOSS=0 keeps it
# eager, the form the runs committed before it trained with
COMPILED_LOSS = cfglib.env_switch("LOWPREC_COMPILED_LOSS")


def use_compile(t: dict, place: dict) -> bool:
    """train.compile resolved: auto compiles on the GPU (but not FSDP's per-block wrapping)."""
    want = t.get("compile", "auto")
    if want == "auto":
        return place["accelerator"] == "gpu" and place["strategy"] != "fsdp"
    if want and place["strategy"] == "fsdp":
        raise cfglib.ConfigError("train.compile: true is not supported with train.strategy fsdp; use ddp or compile: false")
    return bool(want)


def _processes(place: dict) -> int:
    devices = place["devices"]
    per_node = torch.cuda.device_count() if devices == "auto" else int(devices)
    return per_node * int(place["num_nodes"])


def use_cudagraphs(t: dict, place: dict, compiled_on: bool, unstable: list) -> bool:
    """train.cudagraphs resolved: CUDA graphs need blocks compiled on one GPU and weights at fixed
    addresses (``unstable``: layers whose weight transform makes a new tensor at every call,
    ``lowprec.linear.unstable_weight_layers``; GaussWS's keeps one); auto takes them where they can
    be, true refuses a run where they cannot."""
    want = t.get("cudagraphs", False)
    if not want:
        return False
    why = None
    if not compiled_on or place["accelerator"] != "gpu":
        why = "the blocks are not compiled on a GPU here (train.compile, train.accelerator)"
    elif unstable:
        from .linear import unstable_why
        why = f"CUDA graphs cannot take the method's transformed weights ({unstable_why(unstable[0])})"
    elif _processes(place) > 1:
        why = "it is not validated with more than one process (train.devices, train.num_nodes)"
    if why is None:
        return True
    if want == "auto":
        return False
    raise cfglib.ConfigError(f"train.cudagraphs: true, but {why}; use auto (graphs where they can run) or false")


def run(cfg: dict, callbacks: list | None = None) -> dict:
    """Train one run from its resolved config; returns its provenance record (empty on ranks other
    than zero, which write nothing)."""
    cfg = cfglib.validate(cfg, "run", f"run config {cfg.get('run_id', '?')}")
    t = cfg["train"]
    out = Path(cfg["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    if t.get("threads"):
        torch.set_num_threads(int(t["threads"]))
    started, t_start = provenance.now(), time.time()

    data = TokenData(cfg["data"]["dir"])
    place = placement(t, torch.cuda.is_available())
    precision = resolve_precision(t.get("precision", "auto"), place["accelerator"] == "gpu")
    L.seed_everything(cfg["seed"], workers=True, verbose=False)
    module = LitLM(cfg, data.vocab_size, precision)
    compile_numerics = t.get("compile_numerics", "eager")
    from .linear import compile_numerics_options, compiled, unstable_weight_layers
    compile_on = use_compile(t, place)
    cudagraphs = use_cudagraphs(t, place, compile_on, unstable_weight_layers(module.model))
    if compile_on:
        module.compiled = compiled(module.model, cudagraphs=cudagraphs,
                                   options=compile_numerics_options(compile_numerics))
        if COMPILED_LOSS:
            module.loss = compiled_cross_entropy()
    n_parameters = count_parameters(module.model)  # before FSDP shards them

    # Read-only here (every rank decides the same); PrepareRunFolder changes the folder later.
    cfg_hash = cfglib.config_hash(cfg)
    ckpt_dir, log_dir = out / "checkpoints", out / "logs"
    resume, resume_ckpt, unreadable = _resume_checkpoint(ckpt_dir, cfg_hash)
    resume_step = resume_ckpt["global_step"] if resume else 0
    # FSDP reads a full checkpoint itself (after the check above): hand the loaded one only to the others
    ckpt_io = SafeCheckpointIO(preloaded=(resume, resume_ckpt) if resume and place["strategy"] != "fsdp"
                               else None)
    del resume_ckpt
    if resume is None and rank_zero_only.rank == 0:
        # Old log segments go now, before a writer opens its folder. Only rank zero reads or
        # writes logs/ (rank from RANK / LOCAL_RANK / SLURM_PROCID; no process group exists yet).
        import shutil
        shutil.rmtree(log_dir, ignore_errors=True)
    init_from = None
    if t.get("init_from"):
        # a resumed run restores its own checkpoint; only a fresh start takes the source's weights
        init_from = ({"path": t["init_from"], "restored_by_resume": True} if resume
                     else init_weights_from(module.model, t["init_from"]))
    segment = 0 if resume is None else 1 + max((int(p.name.split("-")[1]) for p in log_dir.glob("segment-*")),
                                                default=-1)

    loggers = []  # metrics.csv is StepLogger's; other loggers receive the same rows
    extra_callbacks = []
    if module.telemetry is not None:
        extra_callbacks.append(TelemetryWriter(module.telemetry, log_dir / f"segment-{segment}" / "telemetry.csv"))
    if cfg.get("logging", {}).get("wandb"):
        try:
            from lightning.pytorch.loggers import WandbLogger
            import wandb  # noqa: F401
        except ImportError as e:
            raise cfglib.ConfigError("logging.wandb is true but wandb is not installed (pip install wandb)") from e
        lg = cfg["logging"]
        loggers.append(WandbLogger(project=lg.get("wandb_project", "lowprec"), save_dir=str(out),
                                   name=f"{cfg['paper']}/{cfg['run_id']}", offline=lg.get("wandb_mode", "offline") == "offline",
                                   config=cfg))
    steplog = StepLogger(module.tokens_per_batch * t.get("grad_accum", 1), t.get("log_every", 10),
                         MetricsFile(out / "metrics.csv"))
    checkpoint = PeriodicCheckpoint(ckpt_dir / ckptlib.LAST, t.get("ckpt_every", 100), t["val_every"])
    trainer = L.Trainer(
        max_steps=t["max_steps"], accelerator=place["accelerator"], devices=place["devices"],
        num_nodes=place["num_nodes"], strategy=lightning_strategy(place["strategy"], module.model),
        precision=precision, use_distributed_sampler=False,  # LMData shards over ranks itself
        gradient_clip_val=t.get("grad_clip"), accumulate_grad_batches=t.get("grad_accum", 1),
        val_check_interval=t["val_every"] * t.get("grad_accum", 1), check_val_every_n_epoch=None,
        limit_val_batches=t.get("val_batches", 8), num_sanity_val_steps=0,
        log_every_n_steps=t.get("log_every", 10), logger=loggers or False,  # rows come from StepLogger
        plugins=[ckpt_io], enable_checkpointing=False,  # PeriodicCheckpoint saves, through ckpt_io
        # hooks run in this order: a step's rows are logged before its checkpoint is taken
        callbacks=[PrepareRunFolder(out, cfg_hash, fresh=resume is None), steplog, checkpoint,
                   *extra_callbacks, *(callbacks or [])],
        enable_progress_bar=cfg.get("logging", {}).get("progress_bar", False), enable_model_summary=False,
        deterministic=t.get("deterministic", False), default_root_dir=str(out),
    )
    world_size = trainer.num_devices * trainer.num_nodes
    cfglib.check_global_batch(t["batch_size"], world_size)  # before any process is launched
    if rank_zero_only.rank == 0:
        print(f"{cfg['run_id']}: " + (f"resuming from {resume} at step {resume_step}" if resume else "training")
              + f" to step {t['max_steps']}, {world_size} process(es), precision {precision}", flush=True)
    # ckpt_io reads the checkpoint (weights only); under FSDP Lightning reads it again, after the check
    trainer.fit(module, datamodule=LMData(data, t, cfg["seed"]), ckpt_path=str(resume) if resume else None)
    # the device trained on: when fit ends, Lightning's teardown has moved the module to the CPU
    record_int8_tuning(trainer.strategy.root_device)

    # final validation at the last step, unless the interval already landed there
    status = STATUS_DIVERGED if module.diverged_at is not None else STATUS_COMPLETED
    if status == STATUS_COMPLETED:  # the final weights, for evaluation and export after training
        trainer.save_checkpoint(str(ckpt_dir / ckptlib.LAST), weights_only=False)
    if status == STATUS_COMPLETED and trainer.global_step % t["val_every"] != 0:
        trainer.validate(module, datamodule=LMData(data, t, cfg["seed"]), verbose=False)
    if trainer.global_rank != 0:
        return {}
    for lg in loggers:
        lg.finalize("success")
    metrics = metrics_frame(steplog.rows)
    steps = module.diverged_at if status == STATUS_DIVERGED else trainer.global_step  # finite steps taken
    write_text(out / "metrics.csv", metrics.to_csv(index=False))
    telemetry = merge_telemetry(log_dir)
    if telemetry is not None:
        write_telemetry(out, telemetry)
    write_yaml(out / "config.yaml", cfg)
    val = metrics["val_loss"].dropna() if "val_loss" in metrics else []
    record = {
        **provenance.collect(),
        "paper": cfg["paper"], "run_id": cfg["run_id"], "status": status,
        "diverged_at_step": module.diverged_at,
        "resumed_from": str(resume) if resume else None,
        "unreadable_checkpoints": unreadable,
        "init_from": init_from,
        "steps": steps,
        "tokens_seen": steps * steplog.tokens_per_step,
        "world_size": world_size, "strategy": place["strategy"],
        "parameters": n_parameters,
        "precision": precision, "compiled": module.compiled is not None, "compiled_loss": module.loss is not None,
        "fused_optimizer": module.fused_optimizer,
        "compile_numerics": compile_numerics if module.compiled is not None else None,
        "cudagraphs": module.compiled is not None and module.compiled.cudagraphs,
        "method": module.method_info,
        "final_val_loss": float(val.iloc[-1]) if len(val) else None,
        "mean_tokens_per_s": steplog.mean_tokens_per_s(),
        "peak_mem_mb": peak_memory_mb(),
        "data_manifest": {k: data.manifest[k] for k in ("input", "tokens", "vocab_size")},
        "started": started, "finished": provenance.now(), "wall_s": round(time.time() - t_start, 2),
    }
    write_json(out / "provenance.json", record)
    write_text(ckpt_dir / "COMPLETE", status + "\n")  # last.ckpt stays for downstream use (fine-tuning)
    (ckpt_dir / ckptlib.PREVIOUS).unlink(missing_ok=True)  # only a run in progress needs a fallback
    return record


def record_int8_tuning(device) -> None:
    """The INT8 GEMM shape classes this run tuned, added to the file ``LOWPREC_INT8_TUNED`` names
    (``lowprec.kernels.int8_fallback_tuning``): a GPU job's runs record them, so that later jobs on
    that GPU model take them without tuning (about 100 s a process at the medium sweep's first point)."""
    if device.type != "cuda":
        return
    from .kernels import record_int8_tuning as record
    n, path = record(device)
    if n:
        print(f"recorded {n} tuned INT8 GEMM configuration(s) in {path}", flush=True)


def main(argv: list[str] | None = None) -> None:
    args = train_parser().parse_args(argv)
    try:
        cfg = cfglib.load_yaml(args.config)
        record = run(cfg)
    except USER_ERRORS as e:
        one_line = " ".join(line.strip() for line in str(e).splitlines() if line.strip())  # e.g. YAML's
        sys.exit(f"lowprec.train: error: {one_line}")
    except GradientsNotReached as e:  # a fault of the method or the toolchain: one line, as above
        sys.exit(f"lowprec.train: error: {e}")
    except SIGTERMException:  # a SystemExit of status 0: a stopped run must not read as finished
        sys.exit("lowprec.train: stopped (SIGTERM) at the end of a step, which its checkpoint holds; "
                 "the next start of this config resumes there")
    if record:
        print(f"{record['run_id']}: {record['status']} after {record['steps']} steps, "
              f"val_loss={record['final_val_loss']}, {record['wall_s']} s")


if __name__ == "__main__":
    main()

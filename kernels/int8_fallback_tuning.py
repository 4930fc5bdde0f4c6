"""Launch configurations of the INT8 fallback GEMM (``lowprec.kernels.int8_fallback_gemm``) and
their tuning: ``GemmConfig`` (main kernel) and ``ResidualConfig`` (second-part pass), the defaults
(small tiles under the interpreter), the candidates tried on Hopper-class GPUs, and the tuner's
records: one configuration per shape class (M, N, K rounded up to powers of two, the group, the
scale blocks), chosen by median time the first time the class is seen, and every configuration
timed (``tuned_configs``, ``tuning_log``). A configuration changes the speed, never the result.

Recorded choices (``records_file``: ``LOWPREC_INT8_TUNED=FILE``, else the checkout's committed
``results/bench/int8_gemm_tuned.json`` where it exists; ``none`` reads none): a shape class that a
record of the same GPU model, Triton version and GEMM code (``record_match``) names takes the
recorded configuration without tuning (tuning every class of a 1 B training step costs about 90 s
of a GPU job: compiling and timing some 50 candidates per class). The end-to-end benchmark and
training (at the end of a run) add the classes they tuned to the file that ``LOWPREC_INT8_TUNED``
names (``record_named``; never to the committed file unless named; the runs of a job add theirs
under a lock, and tune each class once between them: ``tuned_config``), so a committed file makes
later jobs start at once and run the configurations it records. A record of another GPU, Triton or
GEMM code is ignored. A recorded configuration is checked the first time a process takes it, as
tuning checks each candidate (its product on a stand-in of unit scales against the integer one): one
whose product is wrong is logged, and the class is tuned again instead (and recorded anew where a
file is named).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from lowprec.config import env_switch
from lowprec.errors import error_text

from . import INT8_COMMITTED_RECORDS, INT8_TUNED_ENV
from . import int8_fallback_kernels as _kk
from ._common import _next_pow2, code_digest

# GEMMs below this many multiply-adds take the default configuration: tuning would cost more than it saves
TUNE_MIN_MACS = 1 << 33
# shared memory a configuration may plan for its pipeline (bytes; the H100/H200 limit is 227 KB)
SMEM_BUDGET = 200 * 1024
# what names a shape class: the columns of the tuning log before the configuration's
TUNE_KEY_FIELDS = ("kernel", "M_class", "N_class", "K_class", "group", "block_rows_a", "block_rows_b", "even_k",
                   "tma_usable", "async_usable")
TUNE_LOG_FIELDS = (*TUNE_KEY_FIELDS, "config", "ms", "regs", "spills", "shared", "error")

_TUNED: dict = {}      # shape class -> (GemmConfig, ms, whether it came from the records)
_TUNE_LOG: list = []   # every configuration timed: dicts for tuning_log()
_RECORDED: dict = {}   # (file, its time and size, the match) -> {shape class: (GemmConfig, ms)}
TUNED_ENV, COMMITTED_RECORDS = INT8_TUNED_ENV, INT8_COMMITTED_RECORDS


@dataclass(frozen=True)
class GemmConfig:
    """A launch configuration of the GEMM kernel (its results do not depend on it)."""

    block_m: int = 128
    block_n: int = 128
    k_groups: int = 1        # K-groups per loop iteration (each its own dot and rescale)
    num_warps: int = 8
    num_stages: int = 3
    group_m: int = 8         # tile rows whose programs run together (L2 reuse of B)
    magic: bool = True       # int32 -> fp32 by the add trick where exact (group <= 259), else by conversion
    tma: bool = False        # tensor-descriptor (TMA) loads where the operands allow them
    warp_specialize: bool = False
    fp_fusion: bool = True   # False: no FMA contraction, so CUDA equals the torch reference bit for bit
    pipelined: bool = False  # the next K-group's dot issued before the last one's rescale (one group a step)
    async_mma: bool = False  # the Gluon kernel (lowprec.kernels.int8_gemm_async): asynchronous warpgroup
    #                          MMAs, one K-group's product in flight while the last is rescaled (TMA, KG 1)

    def label(self) -> str:
        return (f"{self.block_m}x{self.block_n}_kg{self.k_groups}_w{self.num_warps}_s{self.num_stages}"
                f"_gm{self.group_m}{'' if self.magic else '_cvt'}{'_tma' if self.tma else ''}"
                f"{'_ws' if self.warp_specialize else ''}{'' if self.fp_fusion else '_nofma'}"
                f"{'_pipe' if self.pipelined else ''}{'_async' if self.async_mma else ''}")


@dataclass(frozen=True)
class ResidualConfig:
    """Launch configuration of the second-part pass (``fallback="sparse"``)."""

    block_r: int = 32        # rows of the operand with the second part per program (>= 16)
    block_y: int = 128       # rows of the other operand per tile
    num_warps: int = 4
    num_stages: int = 2
    programs: int = 4096     # about this many programs: each takes every n-th tile of the other operand
    k_chunk: int = 1024      # K-groups whose flags a program holds in registers at once
    fp_fusion: bool = True

    def label(self) -> str:
        return (f"r{self.block_r}x{self.block_y}_w{self.num_warps}_s{self.num_stages}_p{self.programs}"
                f"_kc{self.k_chunk}{'' if self.fp_fusion else '_nofma'}")


def bucket(n: int) -> int:
    """A dimension's shape class: the next power of two, at least 16."""
    return _next_pow2(max(n, 16))


def whole_k_groups(want: int, n_kb: int) -> int:
    """The largest power of two <= want that divides n_kb (the loop takes whole iterations)."""
    kg = max(1, _next_pow2(want + 1) // 2)
    while kg > 1 and n_kb % kg:
        kg //= 2
    return kg


def _default_k_groups(gk: int) -> int:
    # about 128 bytes of K per iteration: 16-byte vector loads, few loop iterations
    return max(1, 128 // _next_pow2(gk))


def smem_bytes(cfg: GemmConfig, gk: int) -> int:
    return cfg.num_stages * (cfg.block_m + cfg.block_n) * _next_pow2(gk) * (1 if cfg.pipelined else cfg.k_groups)


def default_config(gk: int, M: int = 1 << 12, N: int = 1 << 12) -> GemmConfig:
    """The configuration used without tuning: small tiles one program at a time under the
    interpreter; on CUDA 128 x 128 tiles of 8 warps, about 128 bytes of K per iteration."""
    if _kk.interpreter_active():
        return GemmConfig(block_m=max(16, min(64, _next_pow2(M))), block_n=max(16, min(64, _next_pow2(N))),
                          k_groups=1, num_warps=4, num_stages=1)
    kg = _default_k_groups(gk)
    return GemmConfig(k_groups=kg, num_stages=3 if _next_pow2(gk) * kg <= 128 else 2)


# tiles of the asynchronous kernel (block_m, block_n, num_warps, stages): each thread holds two int32
# accumulators of 64 registers and the fp32 one (250-255 registers a thread on sm_90; the 3-stage
# 128x128 tile spills 2 at group 128: results/bench/int8_gemm_sass_sm90.csv); the 4-warp tiles leave
# room for two programs an SM
ASYNC_TILES = ((128, 128, 8, 4), (128, 128, 8, 3), (128, 64, 4, 4), (64, 128, 4, 4))


def candidate_configs(gk: int, tma: bool = True, async_mma: bool = False, tail: bool = False) -> list:
    """The configurations tuning tries for K-group gk on Hopper-class GPUs (H100/H200): 128-256
    tiles with 8 warps and 64-128 tiles with 4 (in 3 stages too: three programs an SM), 3-4
    stages, about 128 bytes of K per iteration (twice that for the 4-warp tile; half that too for
    small groups), each with pointer loads and, where the operands allow, tensor-descriptor (TMA)
    loads. Which wins depends on the shape (measured on the H200:
    results/bench/int8_gemm_h200_tune.csv; the 3-stage tiles won the 1 B step's forward shapes,
    results/bench/int8_gemm_h200_3stage/). The software-pipelined loop (``pipelined``: one K-group
    a step, its dot in flight while the previous product is rescaled) for the 128x128 and the
    4-warp tiles. The warp-specialized loop (``warp_specialize``) for the 8-warp tiles and the
    64x128 4-warp tile on descriptor loads: Triton (3.6, the H200's, and 3.9) compiles it
    for sm_90 there, fused second parts or not (``tests/test_kernels_int8_fallback.py`` compiles
    one of each kind for the target without a GPU), but not for the 4-warp tiles on pointer loads
    (NVGPUWarpSpecialization: "operation destroyed but still has uses"; the H200 run at bfc9b5d
    tried only such a tile) nor for every group on the 128x64 one, which are left out. A candidate
    that fails to build on a GPU is ruled out by the tuner with its error (``tuning_log``). The 128x128
    tile and the 4-warp tiles also convert the int32 product with the conversion instruction instead
    of the add trick (``magic=False``). With ``async_mma`` (the operands fit the Gluon kernel on a
    Hopper GPU, ``lowprec.kernels.int8_gemm_async.supports``), its tiles ``ASYNC_TILES`` too. With
    ``tail`` (a second part added after the main loop) without the 4-warp warp-specialized tiles:
    Triton (3.6 and 3.9) fails to compile them for sm_90 with a tail of either operand (an MLIR
    assertion, "IRMapping ... expected 'from' to be contained within the map"), which cost a 1 B
    INT8 fallback step 36 failed compilations of its warm-up on an H100 at afb7ce6."""
    kg = _default_k_groups(gk)
    tiles = ((128, 128, 8, 3), (128, 128, 8, 4), (128, 256, 8, 3), (256, 128, 8, 3), (128, 64, 4, 4), (64, 128, 4, 4))
    out = [GemmConfig(bm, bn, kg, w, st) for bm, bn, w, st in tiles]
    # the 4-warp tiles in 3 stages (72 KB at 128 bytes of K): three programs share an SM where
    # registers allow, so that one's rescale overlaps the others' MMAs (two fit in 4 stages)
    out += [GemmConfig(bm, bn, kg, 4, 3) for bm, bn in ((128, 64), (64, 128))]
    out.append(GemmConfig(128, 64, kg * 2, 4, 3))
    if gk <= 64:
        out += [GemmConfig(128, 128, kg // 2, 8, 4), GemmConfig(128, 128, kg * 2, 8, 3)]
    out += [replace(c, warp_specialize=True) for c in out if c.num_warps == 8]
    # the product's int32 -> fp32 by the conversion instruction, where the add trick costs two: on
    # sm_90 ptxas emits one (I2FP.F32.S32) per element and K-group, 2.7 instructions against 3.7 in
    # the group-32 loop (lowprec.bench.kernel_sass); on the H200 its pipe kept pace (group 32, 8192^3,
    # 128x128 tile: 3.74 ms against 4.62 with the add trick; int8_gemm_h200_block_scales/), so every
    # group tries it
    out += [replace(c, magic=False) for c in out[:1] + out[4:6]]
    out += [GemmConfig(bm, bn, 1, w, st, pipelined=True) for bm, bn, w, st in tiles[:2] + tiles[4:]]
    if tma:
        out += [replace(c, tma=True) for c in out]
        # the 4-warp tile that the 1 B step's shapes chose (on descriptor loads) compiles warp-
        # specialized on descriptor loads; its 128x64 twin does not for every group
        out += [replace(c, warp_specialize=True) for c in out
                if c.tma and not c.pipelined and (c.block_m, c.block_n, c.num_warps) == (64, 128, 4)]
    if tail:
        out = [c for c in out if not (c.warp_specialize and c.num_warps == 4)]
    if async_mma:
        out += [GemmConfig(bm, bn, 1, w, st, tma=True, async_mma=True) for bm, bn, w, st in ASYNC_TILES]
    fitted = []
    for cfg in out:
        while smem_bytes(cfg, gk) > SMEM_BUDGET and cfg.num_stages > 2:
            cfg = replace(cfg, num_stages=cfg.num_stages - 1)
        if cfg.k_groups >= 1 and smem_bytes(cfg, gk) <= SMEM_BUDGET and cfg not in fitted:
            fitted.append(cfg)
    return fitted


def autotune_enabled() -> bool:
    return env_switch("LOWPREC_INT8_GEMM_AUTOTUNE")


def tuned_configs() -> list:
    """One dict per shape class tuned in this process: the class, the chosen configuration and
    its median time (``recorded``: taken from the recorded choices, its time theirs)."""
    return [{**dict(zip(TUNE_KEY_FIELDS, key)), "config": cfg.label(), "ms": ms, "recorded": recorded, **asdict(cfg)}
            for key, (cfg, ms, recorded) in _TUNED.items()]


@functools.lru_cache(maxsize=1)
def _kernel_sources() -> str:
    """A digest of the GEMM kernels' code (``_common.code_digest`` of the Triton GEMM, its second
    parts' kernel and the Gluon kernel, with every jit function they call): a record made with
    other code no longer says what is fastest. Read once a process (every shape class asks)."""
    from . import int8_gemm_async as _ka
    return code_digest(*(getattr(m, n, None) for m, n in ((_kk, "_gemm_kernel"), (_kk, "_residual_kernel"),
                                                          (_ka, "_gemm_kernel"))))


def named_records_file():
    """The file ``LOWPREC_INT8_TUNED`` names (the one a benchmark adds its tuning to); None where it
    names none (unset, or ``none``)."""
    named = os.environ.get(TUNED_ENV, "")
    return Path(named) if named and named.lower() != "none" else None


def records_file():
    """The file of recorded choices to read: the one ``LOWPREC_INT8_TUNED`` names (``none``: no
    file), else the committed one where the checkout has it; None for none."""
    if os.environ.get(TUNED_ENV):
        return named_records_file()
    return COMMITTED_RECORDS if COMMITTED_RECORDS.is_file() else None


def record_match(gpu: str) -> dict:
    """What a record must share with this process to be used: the GPU model, Triton's version and
    the GEMM's code (``_kernel_sources``)."""
    import triton
    return {"gpu": gpu, "triton": triton.__version__, "kernels": _kernel_sources()}


def gpu_name(device):
    """The CUDA device's model name (records are per model), None for any other device."""
    import torch
    device = torch.device(device) if device is not None else None
    return torch.cuda.get_device_name(device) if device is not None and device.type == "cuda" else None


def _read_records(path: Path) -> list:
    if not path.is_file():
        return []
    try:
        records = json.loads(path.read_text()).get("records", [])
    except (ValueError, AttributeError) as exc:
        raise ValueError(f"{TUNED_ENV}={path}: not a file of recorded INT8 GEMM configurations ({exc})") from None
    if not isinstance(records, list):
        raise ValueError(f"{TUNED_ENV}={path}: 'records' must be a list")
    return records


def _config(record: dict):
    """The record's GemmConfig, or None for one this version cannot build (a field it lacks)."""
    names = {f.name for f in fields(GemmConfig)}
    cfg = record.get("config_fields")
    if not isinstance(cfg, dict) or not set(cfg) <= names:
        return None
    return GemmConfig(**cfg)


def recorded_configs(path, gpu: str) -> dict:
    """{shape class: (GemmConfig, ms)} of the records in ``path`` that match this process on ``gpu``
    (``record_match``); read again only when the file changes."""
    match = record_match(gpu)
    stat = Path(path).stat() if Path(path).is_file() else None
    cache_key = (str(path), stat and (stat.st_mtime_ns, stat.st_size), tuple(sorted(match.items())))
    if cache_key not in _RECORDED:
        found = {}
        for r in _read_records(Path(path)):
            cfg = _config(r)
            if cfg is not None and all(r.get(k) == v for k, v in match.items()):
                found[tuple(r["key"])] = (cfg, float(r["ms"]))
        _RECORDED[cache_key] = found
    return _RECORDED[cache_key]


def record_tuning(path, gpu: str) -> int:
    """Add the classes tuned in this process on ``gpu`` to the records in ``path`` (a record of the
    same match and class is replaced; the others are kept); returns how many it wrote. A class
    taken from the records is not written again."""
    import fcntl

    match = record_match(gpu)
    new = {key: (cfg, ms) for key, (cfg, ms, recorded) in _TUNED.items() if not recorded}
    if not new:
        return 0
    path = Path(path)
    from ..io import write_json
    path.parent.mkdir(parents=True, exist_ok=True)
    # the runs of one GPU job add theirs to one file: each reads and rewrites it under a lock
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept = [r for r in _read_records(path)
                if not (all(r.get(k) == v for k, v in match.items()) and tuple(r.get("key", ())) in new)]
        records = kept + [{**match, "key": list(key), "config": cfg.label(), "config_fields": asdict(cfg),
                           "ms": round(ms, 4)} for key, (cfg, ms) in new.items()]
        records.sort(key=lambda r: (r["gpu"], r["triton"], r["kernels"], [str(k) for k in r["key"]]))
        write_json(path, {"what": "INT8 GEMM configurations chosen by tuning (lowprec.kernels.int8_fallback_tuning), "
                                  f"one per GPU, Triton, GEMM code and shape class; key fields: "
                                  f"{list(TUNE_KEY_FIELDS)}", "records": records})
    return len(new)


def record_named(device) -> tuple[int, Path | None]:
    """With ``LOWPREC_INT8_TUNED`` naming a file, add the classes this process tuned on ``device``
    to it (``record_tuning``): (how many, the file), (0, None) where it names none."""
    path = named_records_file()
    return (record_tuning(path, gpu_name(device)), path) if path else (0, None)


def tuning_log() -> list:
    """Every configuration timed by the tuner in this process (shape class, configuration, median
    ms or the error that ruled it out, registers and spills per thread, shared memory)."""
    return list(_TUNE_LOG)


def _resources(kernel) -> dict:
    """Registers and spills per thread and shared memory of a compiled kernel (for the tuning log;
    empty where this Triton does not say)."""
    out = {}
    for key, get in (("regs", lambda k: k.n_regs), ("spills", lambda k: k.n_spills),
                     ("shared", lambda k: k.metadata.shared)):
        try:
            out[key] = int(get(kernel))
        except Exception:  # noqa: BLE001 - an attribute this Triton version lacks
            out[key] = ""
    return out


def precompile(warm, cands) -> None:
    """Compile warm(c) for each candidate c (a launch with warmup=True) in parallel threads where
    this Triton can (its compile futures), else not at all; failures are left for the launches,
    which report them."""
    try:
        from concurrent.futures import ThreadPoolExecutor

        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:
        return
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        with AsyncCompileMode(pool, ignore_errors=True):
            for cfg in cands:
                try:
                    warm(cfg)
                except Exception:  # noqa: BLE001 - recorded when the loop launches it
                    pass


def default_residual_config(block_rows: int) -> ResidualConfig:
    if _kk.interpreter_active():
        return ResidualConfig(block_r=16, block_y=32, num_stages=1, programs=4)
    return ResidualConfig()


def forget_tuning() -> None:
    """Drop every shape class's tuned configuration and the tuning log (the next call of each class
    tunes it again, or takes its recorded choice): for a benchmark whose arms must each tune, and
    say, what they ran."""
    _TUNED.clear()
    _TUNE_LOG.clear()


def tuned_config(key: tuple, tune, device=None, check=None) -> GemmConfig:
    """The configuration of shape class `key`: the first time, the recorded choice where
    ``records_file`` has one for this GPU (``device``), else tune() -> (GemmConfig, ms). ``check``:
    check(cfg) -> how a recorded configuration's product is wrong, or None where it is right; a
    wrong one is logged (``tuning_log``) and the class tuned instead.

    Where ``LOWPREC_INT8_TUNED`` names a file, the processes that share it (the runs of one GPU job)
    tune a class once: each holds the class's lock (``_class_lock``) while it looks for a record and
    tunes, and writes what it tuned before letting go, so that the next one reads it. Without the
    lock, two runs of one model tuned the same classes at once, each timing its candidates beside the
    other's (a medium job: 139 s before each run's tenth step)."""
    if key not in _TUNED:
        gpu = gpu_name(device)
        shared = named_records_file() if gpu else None
        with _class_lock(shared, key):
            path = records_file()
            found = recorded_configs(path, gpu).get(key) if path and gpu else None
            why = check(found[0]) if found and check is not None else None
            if why:
                _TUNE_LOG.append({**dict(zip(TUNE_KEY_FIELDS, key)), "config": found[0].label(), "ms": "",
                                  "error": f"recorded in {path}, wrong output: {why}"})
                found = None
            _TUNED[key] = (*found, True) if found else (*tune(), False)
            if shared is not None and not found:
                record_tuning(shared, gpu)
    return _TUNED[key][0]


@contextlib.contextmanager
def _class_lock(shared, key: tuple):
    """Hold shape class ``key``'s lock among the processes that share the records file ``shared``
    (None: no lock). One lock file per records file, in the temporary folder (the records' folder is
    what a GPU job sends back), a byte of it per class: a POSIX record lock, which a process loses
    when it closes any descriptor of that file, so the file is never the one ``record_tuning``
    locks."""
    if shared is None:
        yield
        return
    import fcntl
    import hashlib
    import tempfile

    name = hashlib.sha256(str(Path(shared).resolve()).encode()).hexdigest()[:16]
    byte = int(hashlib.sha256(repr(key).encode()).hexdigest()[:8], 16) % (1 << 20)
    with open(Path(tempfile.gettempdir()) / f"lowprec-int8-tuning-{name}.lock", "a") as lock:
        fcntl.lockf(lock, fcntl.LOCK_EX, 1, byte)
        try:
            yield
        finally:
            fcntl.lockf(lock, fcntl.LOCK_UN, 1, byte)


def time_candidates(key: tuple, cands: list, launch, device, wrong=None) -> tuple:
    """(fastest configuration, its median ms) of cands for shape class `key`: launch(cfg) runs the
    kernel, launch(cfg, warmup=True) compiles it and returns the compiled kernel. All are compiled
    first (in parallel where Triton can), then each is timed with do_bench; a configuration the
    device or compiler refuses is logged with its error and ruled out. ``wrong``: called after a
    configuration's first run, a description of how its output differs from the product it should
    be, or None where it is right; a wrong configuration is logged and ruled out however fast
    (tuning times speed alone, and a kernel that skips work is fast)."""
    import torch
    import triton.testing

    precompile(lambda cfg: launch(cfg, warmup=True), cands)
    best = None
    for cfg in cands:
        row = {**dict(zip(TUNE_KEY_FIELDS, key)), "config": cfg.label()}
        try:
            launch(cfg)
            torch.cuda.synchronize(device)
            why = wrong() if wrong is not None else None
            if why:
                _TUNE_LOG.append({**row, "ms": "", "error": f"wrong output: {why}"})
                continue
            ms = float(triton.testing.do_bench(lambda: launch(cfg), warmup=5, rep=30, return_mode="median"))
        except Exception as exc:  # a configuration the device or compiler refuses: tried, ruled out
            _TUNE_LOG.append({**row, "ms": "", "error": error_text(exc)})
            continue
        _TUNE_LOG.append({**row, "ms": ms, "error": "", **_resources(launch(cfg, warmup=True))})
        if best is None or ms < best[1]:
            best = (cfg, ms)
    if best is None:
        raise RuntimeError(f"int8_fallback_gemm: no configuration of {cands[0].label()} and "
                           f"{len(cands) - 1} others ran for shape class {key}; see tuning_log()")
    return best

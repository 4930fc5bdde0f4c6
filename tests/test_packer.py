"""The GPU job packer (lowprec.packer) on CPU: which runs it selects and in what order, its estimates
from committed runs (checked against numbers worked out in the comments), and a job with stand-in
processes (concurrency, the budget, stopping and cleanup), then one job that trains real tiny runs."""

import copy
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from lowprec import config as lpc
from lowprec import packer as pk
from lowprec import sweep as sweeps
from lowprec.io import write_yaml
from lowprec.report.claims import load_claims
from lowprec.run_estimates import SHARING_KEY, Estimator


def _commit(cfg, wall=10.0, start=0.0, steps=None, files=(), commit="c2", gpu_mib=None):
    """A complete run folder for ``cfg``, as lowprec.train leaves it, that ran from ``start`` for
    ``wall`` seconds (epoch times); with ``gpu_mib``, on a GPU with that peak."""
    out = Path(cfg["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    write_yaml(out / "config.yaml", cfg)
    (out / "metrics.csv").write_text("step,val_loss\n1,5.0\n")
    stamp = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(t))  # noqa: E731
    (out / "provenance.json").write_text(json.dumps({
        "status": "completed", "wall_s": wall, "steps": steps or cfg["train"]["max_steps"],
        "started": stamp(1_700_000_000 + start), "finished": stamp(1_700_000_000 + start + wall), "git_commit": commit,
        **({"device": {"gpu": "NVIDIA H100 80GB HBM3"}, "peak_mem_mb": gpu_mib} if gpu_mib else {})}))
    for f in files:
        (out / f).write_text("x\n")


def _grid(scale, papers, root):
    runs, ft = lpc.grid_runs(papers, scale, results=str(root))
    return runs, ft


# --------------------------------------------------------------------------- selection

def test_selects_the_runs_that_are_not_committed(tmp_path):
    runs, ft = _grid("tiny", ["int8_fallback"], tmp_path)
    for key, cfg in runs.items():
        if key[2] != "int8_fallback":                    # every run but the fallback arm's is committed
            _commit(cfg)
    stale = runs[("int8_fallback", "gpt2", "int8_block", "0")]
    write_yaml(Path(stale["output_dir"]) / "config.yaml", {**stale, "train": {**stale["train"], "lr": 0.5}})
    tasks, stale_runs, blocked = pk.missing_tasks("tiny", ["int8_fallback"], str(tmp_path))
    names = [t.name for t in tasks if t.kind == pk.PRETRAIN]
    assert names == ["int8_fallback/llama2/int8_fallback/s0", "int8_fallback/gpt2/int8_fallback/s0"]
    assert stale_runs == ["int8_fallback/gpt2/int8_block/s0 (config changed: train.lr: 0.5 -> 0.003)"]
    # the fine-tuning runs start from the BF16 run's final weights, committed without them: that run
    # trains again in a folder of its own, for its checkpoint alone, and they wait for it
    bf16 = Path(runs[("int8_fallback", "llama2", "bf16", "0")]["output_dir"])
    again = [t for t in tasks if t.kind == pk.SOURCE]
    assert not blocked and [t.name for t in again] == ["int8_fallback/llama2/bf16/s0"]
    assert again[0].out == tmp_path.joinpath(*pk.SOURCES, "int8_fallback/llama2/bf16/s0")
    assert again[0].checkpoint == bf16 / "checkpoints" / "last.ckpt"
    assert again[0].config_path(str(tmp_path)) == tmp_path.joinpath(*pk.SOURCES, "configs", f"{again[0].name}.yaml")
    fts = [t for t in tasks if t.kind == pk.FINETUNE]
    assert len(fts) == len(ft) and {t.source for t in fts} == {again[0].name}

    # a missing source trains in the same job, and its fine-tuning runs wait for it
    (bf16 / "provenance.json").unlink()
    tasks, _, blocked = pk.missing_tasks("tiny", ["int8_fallback"], str(tmp_path))
    by = {t.name: t for t in tasks}
    assert not blocked and by["int8_fallback_finetune/llama2/int8_block/s0"].source == "int8_fallback/llama2/bf16/s0"
    assert by["int8_fallback/llama2/bf16/s0"].kind == pk.PRETRAIN
    # unless it is left out
    tasks, _, blocked = pk.missing_tasks("tiny", ["int8_fallback"], str(tmp_path), only=["*_finetune/*"])
    assert not tasks and all("is not selected" in b for b in blocked)
    with pytest.raises(pk.PackerError, match=r"--only \['gaussws/\*'\]: no run that is not committed matches"):
        pk.missing_tasks("tiny", ["int8_fallback"], str(tmp_path), only=["gaussws/*"])


def test_order_decides_the_most_claims_first(tmp_path):
    """Undecided claims first, the cheapest first; each claim's runs seed by seed (a paired test's
    arms together); runs no claim reads last."""
    tasks, _, _ = pk.missing_tasks("small", ["mor"], str(tmp_path), only=[
        "mor/*/bf16/s[34]", "mor/*/mor_block/s[34]", "mor/*/mor_block_b64/s[34]", "mor/*/mor_tensor/s3",
        "mor/*/bf16_cfg2/s3", "mor/*/mor_channel_cfg2/s3", "mor/*/fp8_tensorwise_current/s3"])
    for t in tasks:
        t.estimate = 300.0 if t.method.startswith("mor") else 50.0
    # verdicts at small as once committed: config2_on_par and finer_blocks_help inconclusive, the
    # scale ablations and sub-tensor MoR not run, the rest decided
    undecided = {"config2_on_par": "inconclusive", "finer_blocks_help": "inconclusive"}
    undecided.update(dict.fromkeys(["gam_beats_fp32_amax", "e8_beats_fp32_amax", "subtensor_two_way_on_par",
                                    "subtensor_three_way_lower_train_loss"], "not run at this scale"))
    table = tmp_path / "mor" / "small" / "tables" / "claims.csv"
    table.parent.mkdir(parents=True)
    table.write_text("claim,verdict\n" + "".join(f"{c['id']},{undecided.get(c['id'], 'reproduced')}\n"
                                                 for c in load_claims("mor")))
    names = [t.name for t in pk.order(tasks, "small", str(tmp_path))]
    assert names == [
        # undecided, 100 s: subtensor_two_way_on_par (its BF16 side; the sub-tensor arm is not selected)
        "mor/nemotron/bf16/s3", "mor/nemotron/bf16/s4",
        # undecided, 350 s: config2_on_par
        "mor/nemotron/bf16_cfg2/s3", "mor/nemotron/mor_channel_cfg2/s3",
        # undecided, 600 s: gam_beats_fp32_amax (mor_block); then finer_blocks_help's 64x64 blocks
        "mor/nemotron/mor_block/s3", "mor/nemotron/mor_block/s4",
        "mor/nemotron/mor_block_b64/s3", "mor/nemotron/mor_block_b64/s4",
        # decided: loss_per_tensor
        "mor/nemotron/mor_tensor/s3",
        # no claim reads FP8 current scaling at small
        "mor/nemotron/fp8_tensorwise_current/s3"]
    by = {t.name: t for t in tasks}
    assert by["mor/nemotron/mor_block/s3"].claims[:2] == ["mor/loss_per_block", "mor/errors_mostly_below_2p5"]
    assert by["mor/nemotron/fp8_tensorwise_current/s3"].claims == []


ORDER_IN_A_PROCESS = """
import sys
sys.path.insert(0, sys.argv[2])
from test_packer import _commit, _grid
from lowprec import packer as pk
runs, _ = _grid("tiny", ["int8_fallback"], sys.argv[1])
_commit(runs[("int8_fallback", "llama2", "bf16", "0")])   # no checkpoint: trains again for its fine-tuning runs
tasks, _, _ = pk.missing_tasks("tiny", ["int8_fallback"], sys.argv[1])
for t in tasks:
    t.estimate = 100.0
print("\\n".join(f"{t.name} {t.kind}" for t in pk.order(tasks, "tiny", sys.argv[1])))
"""


def test_the_order_is_the_same_in_every_process(tmp_path):
    """Runs trained again for their checkpoint beside the fine-tuning runs that start from them
    (equal in seed, model and method) come in one order, not that of a set of names: two processes
    of different string hashes agree, and each source precedes the fine-tuning runs of its claim."""
    outs = [subprocess.run([sys.executable, "-c", ORDER_IN_A_PROCESS, str(tmp_path / seed), str(Path(__file__).parent)],
                           capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")]
    assert outs[0] == outs[1]
    rows = [line.split() for line in outs[0].splitlines()]
    sources = [i for i, (_, kind) in enumerate(rows) if kind == pk.SOURCE]
    assert sources and all(rows[i + 1][1] == pk.FINETUNE for i in sources)


def test_claims_select_the_runs_that_read_them_with_their_sources(tmp_path):
    """--claims keeps, in order, the runs that the matching claims read, and the runs a kept
    fine-tuning run starts from; a pattern no run to train serves is refused, naming the claims."""
    tasks, _, _ = pk.missing_tasks("tiny", ["mor", "int8_fallback"], str(tmp_path))
    for t in tasks:
        t.estimate = 10.0
    ordered = pk.order(tasks, "tiny", str(tmp_path))
    kept = pk.serving(ordered, ["mor/loss_per_tensor"])
    assert {(t.paper, t.method) for t in kept} == {("mor", "bf16"), ("mor", "mor_tensor")}
    assert [t.name for t in kept] == [t.name for t in ordered if t in kept]   # the order is kept
    ft = pk.serving(ordered, ["int8_fallback/finetune_*"])
    assert any(t.kind == pk.FINETUNE for t in ft)
    assert {t.source for t in ft if t.source} <= {t.name for t in ft}
    with pytest.raises(pk.PackerError, match=r"--claims nope/\*: no run to train reads such a claim; .*mor/loss_per_tensor"):
        pk.serving(ordered, ["nope/*"])
    with pytest.raises(SystemExit, match="a size sweep's runs serve no claim"):
        pk.main(["plan", "--sweep", "configs/sweeps/medium.yaml", "--claims", "mor/*"])


# --------------------------------------------------------------------------- estimates

def test_estimates_from_committed_runs(tmp_path):
    runs, _ = _grid("small", ["mor"], tmp_path)
    cfg = lambda m, s: runs[("mor", "nemotron", m, str(s))]  # noqa: E731
    # bf16 ran alone (k = 1) for 100 s, and again for 200 s beside an FP8 run over the same span
    # (k = 2): wall ~ k^a with a = log(200/100) / log(2) = 1; alone it takes 100 s
    _commit(cfg("bf16", 0), wall=100, start=0)
    _commit(cfg("bf16", 1), wall=200, start=1000)
    _commit(cfg("fp8_tensorwise_current", 0), wall=200, start=1000)
    # an earlier version of the code, slower: the arm's runs of the code it last trained with count
    _commit(cfg("bf16", 2), wall=900, start=-2000, commit="c1")
    # at tiny: per step, mor_block_e8 takes 3x bf16 and 2x FP8 current scaling
    tiny, _ = _grid("tiny", ["mor"], tmp_path)
    for method, wall in (("bf16", 10.0), ("fp8_tensorwise_current", 15.0), ("mor_block_e8", 30.0)):
        _commit(tiny[("mor", "nemotron", method, "0")], wall=wall, start=5000 * len(method))
    est = Estimator(str(tmp_path), "small", startup=20.0)   # (the 900-s run alone would make a = 0)
    assert est.exponent == pytest.approx(1.0)
    # 4 runs sharing the GPU: 100 s alone x 4^1 + 20 s to start
    task = pk.Task("mor/nemotron/bf16/s3", cfg("bf16", 3), pk.PRETRAIN)
    assert est(task, 4) == (pytest.approx(420.0), "this arm's committed runs")
    # FP8 current scaling measured at k = 2 over 200 s: 100 s alone, the same
    assert est(pk.Task("mor/nemotron/fp8_tensorwise_current/s1", cfg("fp8_tensorwise_current", 1), pk.PRETRAIN),
               1)[0] == pytest.approx(120.0)
    # never run at small: from the arms whose settings differ least (both in three keys: recipe,
    # partition, scale) times the tiny ratio: bf16 100 x 3 = 300, FP8 100 x 2 = 200; the upper
    # median is 300 (x 2^1 + 20)
    seconds, source = est(pk.Task("mor/nemotron/mor_block_e8/s0", cfg("mor_block_e8", 0), pk.PRETRAIN), 2)
    assert seconds == pytest.approx(620.0) and source == "mor/nemotron/bf16 x 3.00 (tiny time per step)"
    # nothing to estimate from, and a given estimate
    assert est(pk.Task("mor/nemotron/mor_tensor/s0", cfg("mor_tensor", 0), pk.PRETRAIN), 2) == (
        None, "no committed run to estimate from: give --estimate")
    given = Estimator(str(tmp_path), "small", {"mor/*/mor_tensor/*": 77}, startup=20.0)
    assert given(pk.Task("mor/nemotron/mor_tensor/s0", cfg("mor_tensor", 0), pk.PRETRAIN), 2) == (
        77.0, "--estimate mor/*/mor_tensor/*")
    with pytest.raises(pk.PackerError, match="give PATTERN=SECONDS"):
        pk._estimates(["mor/*/mor_tensor/*"])


def test_a_step_of_more_tokens_than_the_committed_runs_took_is_estimated_longer(tmp_path):
    """A committed run's time per step holds for its tokens per step: a task whose step holds twice
    as many (its batch changed since) takes twice the time per step, one of half as many the
    committed time (an upper bound: fixed costs stay)."""
    runs, _ = _grid("small", ["mor"], tmp_path)
    _commit(runs[("mor", "nemotron", "bf16", "0")], wall=200, start=0)
    cfg = copy.deepcopy(runs[("mor", "nemotron", "bf16", "1")])
    est = Estimator(str(tmp_path), "small", startup=20.0)
    task = lambda c: pk.Task("mor/nemotron/bf16/s1", c, pk.PRETRAIN)  # noqa: E731
    assert est(task(cfg), 1)[0] == pytest.approx(220.0)
    cfg["train"]["batch_size"] *= 2
    assert est(task(cfg), 1)[0] == pytest.approx(420.0)
    cfg["train"]["batch_size"] //= 4
    assert est(task(cfg), 1)[0] == pytest.approx(220.0)


def test_a_runs_recorded_sharing_counts_over_its_neighbours_times(tmp_path):
    """The processes a packer job recorded beside a run (its provenance's SHARING_KEY) are its k,
    where the committed runs' times would say it ran alone (its neighbours left no run folder)."""
    runs, _ = _grid("small", ["mor"], tmp_path)
    cfg = runs[("mor", "nemotron", "bf16", "0")]
    _commit(cfg, wall=200, start=0)
    task = pk.Task("mor/nemotron/bf16/s1", runs[("mor", "nemotron", "bf16", "1")], pk.PRETRAIN)
    assert Estimator(str(tmp_path), "small", startup=20.0)(task, 1)[0] == pytest.approx(220.0)
    prov = Path(cfg["output_dir"]) / "provenance.json"
    prov.write_text(json.dumps({**json.loads(prov.read_text()), SHARING_KEY: 4.0}))
    # 200 s beside three others: 200 / 4^0.5 alone (the default exponent) + 20 s to start
    assert Estimator(str(tmp_path), "small", startup=20.0)(task, 1)[0] == pytest.approx(120.0)


def test_an_arm_never_run_on_the_gpu_takes_the_benchmarked_step_ratio(tmp_path):
    """An arm with no run at the scale, whose method the committed end-to-end benchmark runs: the
    nearest arm of its model that ran on a GPU here, times the ratio of the two arms' benchmarked
    step times at the benchmark's 98 M shape (each row against its own run's compiled BF16), not
    their CPU ratio at tiny; without a GPU anchor, or for a method the benchmark lacks, the tiny
    ratio as before."""
    from lowprec.run_estimates import SPEED_BENCHES, bench_arm

    runs, _ = _grid("small", ["mor"], tmp_path)
    cfg = lambda m, s: runs[("mor", "nemotron", m, str(s))]  # noqa: E731
    _commit(cfg("bf16", 0), wall=100, start=0, gpu_mib=8000)
    tiny, _ = _grid("tiny", ["mor"], tmp_path)
    for method, wall in (("bf16", 10.0), ("mor_block", 40.0), ("mor_block_e8", 30.0)):
        _commit(tiny[("mor", "nemotron", method, "0")], wall=wall, start=5000 * len(method))
    h200, h100 = (tmp_path / b for b in SPEED_BENCHES)
    h200.parent.mkdir(parents=True)
    h200.write_text("shape,arm,ratio_vs_bf16_compiled,commit\nllama_100m,bf16_compiled,1.000,c1\n"
                    "llama_100m,mor_block,0.800,c1\nllama_1b,mor_block,1.084,c1\n")
    est = Estimator(str(tmp_path), "small", startup=20.0)
    block = pk.Task("mor/nemotron/mor_block/s0", cfg("mor_block", 0), pk.PRETRAIN)
    # 100 s alone x (1 / 0.8) + 20 s to start, not x 4 (tiny)
    assert est(block, 1) == (pytest.approx(145.0), "mor/nemotron/bf16 x 1.25 (GPU benchmark, llama_100m)")
    # the other GPU's file: of an arm's rows the newest run's counts (its commit dated by the
    # provenance), an older one's does not
    h100.write_text("shape,arm,ratio_vs_bf16_compiled,commit\nllama_100m,mor_block,0.500,c0\n")
    runs_of = lambda *cs: json.dumps({"runs": [{"commit": c, "time": t} for c, t in cs]})  # noqa: E731
    h200.with_suffix(".provenance.json").write_text(runs_of(("c1", "2026-12-06T10:00:00+00:00")))
    h100.with_suffix(".provenance.json").write_text(runs_of(("c0", "2026-12-05T10:00:00+00:00")))
    assert Estimator(str(tmp_path), "small", startup=20.0)(block, 1)[0] == pytest.approx(145.0)
    h100.with_suffix(".provenance.json").write_text(runs_of(("c0", "2026-12-05T10:00:00+00:00"),
                                                            ("c0", "2026-12-07T10:00:00+00:00")))
    assert Estimator(str(tmp_path), "small", startup=20.0)(block, 1) == (
        pytest.approx(220.0), "mor/nemotron/bf16 x 2.00 (GPU benchmark, llama_100m)")
    h100.unlink()
    # E8 block scales are no benchmark arm: the tiny ratio
    e8 = pk.Task("mor/nemotron/mor_block_e8/s0", cfg("mor_block_e8", 0), pk.PRETRAIN)
    assert est(e8, 1)[1] == "mor/nemotron/bf16 x 3.00 (tiny time per step)"
    # an anchor that ran on the CPU: the tiny ratio
    _commit(cfg("bf16", 0), wall=100, start=0)
    assert Estimator(str(tmp_path), "small", startup=20.0)(block, 1)[1] == "mor/nemotron/bf16 x 4.00 (tiny time per step)"
    # what is logged and the learning rate do not change a step's kernels
    assert bench_arm({"name": "x", "recipe": "mor", "partition": "block", "telemetry_every": 20,
                      "train": {"lr": 1.2e-3}}) == "mor_block"
    assert bench_arm({"recipe": "bf16"}) == "bf16_compiled"
    assert bench_arm({"recipe": "int8_fallback", "tau": 4}) is None


def test_a_method_measured_here_on_another_model_gives_its_ratio_before_the_benchmark(tmp_path):
    """An arm with no run at the scale whose method ran here on another model: the task model's arm
    of another method (a GPU run of the same steps) times the measured arm's step time over its
    twin's, the other model's arm with the anchor's method; a benchmarked ratio only where no such
    pair exists (block INT8's first medium GPT2 runs: 501 s, where the benchmark's ratio gave 376)."""
    from lowprec.run_estimates import SPEED_BENCHES

    runs, _ = _grid("small", ["int8_fallback"], tmp_path)
    cfg = lambda m, model, s=0: runs[("int8_fallback", model, m, str(s))]  # noqa: E731
    _commit(cfg("bf16", "gpt2"), wall=100, start=0, gpu_mib=8000)
    _commit(cfg("int8_block", "gpt2"), wall=250, start=1000, gpu_mib=9000)
    _commit(cfg("bf16", "llama2"), wall=120, start=2000, gpu_mib=8000)
    bench = tmp_path / SPEED_BENCHES[0]
    bench.parent.mkdir(parents=True)
    bench.write_text("shape,arm,ratio_vs_bf16_compiled,commit\nllama_100m,bf16_compiled,1.000,c1\n"
                     "llama_100m,int8_block,0.500,c1\nllama_100m,int8_fallback,0.250,c1\n")
    est = Estimator(str(tmp_path), "small", startup=20.0)
    block = pk.Task("int8_fallback/llama2/int8_block/s0", cfg("int8_block", "llama2"), pk.PRETRAIN)
    # 120 s x (250 / 100) + 20 s, not x 2 (the benchmark)
    assert est(block, 1) == (pytest.approx(320.0), "int8_fallback/llama2/bf16 x 2.50 "
                             "(int8_fallback/gpt2/int8_block over int8_fallback/gpt2/bf16 here)")
    # an anchor of other tokens per step (a doubled batch) is passed over, however long it took
    gw, _ = _grid("small", ["gaussws"], tmp_path)
    doubled = gw[("gaussws", "llama2", "bf16", "0")]
    doubled["train"] = {**doubled["train"], "batch_size": 2 * doubled["train"]["batch_size"]}
    _commit(doubled, wall=400, start=3000, gpu_mib=9000)
    assert Estimator(str(tmp_path), "small", startup=20.0)(block, 1)[0] == pytest.approx(320.0)
    # a method that ran on no model here: the benchmark
    fallback = pk.Task("int8_fallback/llama2/int8_fallback/s0", cfg("int8_fallback", "llama2"), pk.PRETRAIN)
    assert est(fallback, 1) == (pytest.approx(500.0), "int8_fallback/llama2/bf16 x 4.00 (GPU benchmark, llama_100m)")
    # the measured arm's run of other steps (a fine-tuning run's start-up weighs more per step)
    # pairs with nothing: the benchmark again
    _commit(cfg("int8_block", "gpt2"), wall=250, start=1000, gpu_mib=9000, steps=7)
    (Path(cfg("int8_block", "gpt2")["output_dir"]) / "config.yaml").write_text(
        json.dumps({**cfg("int8_block", "gpt2"), "train": {**cfg("int8_block", "gpt2")["train"], "max_steps": 7}}))
    assert Estimator(str(tmp_path), "small", startup=20.0)(block, 1)[1] == (
        "int8_fallback/llama2/bf16 x 2.00 (GPU benchmark, llama_100m)")


def test_evaluations_are_the_pipelines_per_run_files():
    """The per-run files the packer computes after a run are those committed beside the tiny runs
    (where every evaluation of the pipelines was made), for every pre-training run of the grid."""
    runs, ft = _grid("tiny", lpc.papers(), lpc.REPO_ROOT / "results")
    made = {"export.csv", "exactness.csv", "outliers.csv", "outlier_ccdf.csv"}
    for kind, group in ((pk.PRETRAIN, runs), (pk.FINETUNE, ft)):
        for cfg in group.values():
            task = pk.Task(lpc.run_name(cfg["output_dir"]), cfg, kind)
            files = {f for fs, _ in pk.run_evaluations(task) for f in fs}
            assert files == {p.name for p in task.out.iterdir()} & made, task.name
    gw = pk.Task("gaussws/gpt2/bf16/s0", runs[("gaussws", "gpt2", "bf16", "0")], pk.PRETRAIN)
    export = pk.run_evaluations(gw)[0][1]
    assert export[:4] == ["-m", "lowprec.evaluate", "--run", str(gw.out)] and "mxfp6_e3m2" in export


# --------------------------------------------------------------------------- the job, with stand-ins

FAKE = r"""
import json, os, sys, time, subprocess, pathlib, yaml
cfg = yaml.safe_load(open(sys.argv[1]))
out = pathlib.Path(cfg["output_dir"]); out.mkdir(parents=True, exist_ok=True)
log = pathlib.Path(sys.argv[2])
mode, seconds = sys.argv[3], float(sys.argv[4])
if mode == "deaf":  # a process that does not end at SIGTERM (its children inherit this)
    import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # as compile workers are
with log.open("a") as f:
    f.write(json.dumps({"run": cfg["run_id"], "start": time.time(), "pid": os.getpid(), "child": child.pid,
                        "int8_records": os.environ.get("LOWPREC_INT8_TUNED")}) + "\n")
if not (out / "checkpoints" / "last.ckpt").is_file():  # a kept folder put back: training resumes
    (out / "metrics.csv").write_text("step,val_loss\n1,9.0\n")
(out / "checkpoints").mkdir(exist_ok=True)
(out / "checkpoints" / "last.ckpt").write_text("weights")
print("step 1/10 (10%) | train_loss 9.0", flush=True)
time.sleep(seconds)
child.kill()
if mode == "fail":
    sys.exit(3)
if mode == "oom" or (mode == "oom_once" and not (out.parent / "oom_once").exists()):
    (out.parent / "oom_once").write_text("")  # as torch ends when the GPU has no memory left for it
    print("step 3/10 (30%) | train_loss 5.0")
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB.")
    sys.exit(1)
(out / "config.yaml").write_text(yaml.safe_dump(cfg))
(out / "provenance.json").write_text(json.dumps({"status": "completed", "wall_s": seconds}))
with log.open("a") as f:
    f.write(json.dumps({"run": cfg["run_id"], "end": time.time()}) + "\n")
"""


def _fake_job(tasks, scale, results, tmp_path, monkeypatch, seconds=None):
    """A job of ``tasks`` (1 s estimates, two at a time) whose processes stand in for lowprec.train
    (FAKE, 0.1 s each unless ``seconds`` gives a run's, logging to tmp_path/ev.jsonl), with no data
    to prepare; the folder it archives into."""
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE)
    monkeypatch.setattr(pk, "phase_commands", lambda task, config: [
        [sys.executable, str(script), str(config), str(tmp_path / "ev.jsonl"), "ok",
         str((seconds or {}).get(task.name, 0.1))]])
    monkeypatch.setattr(pk, "prepare_data", lambda tasks, log_dir: None)
    for t in tasks:
        t.estimate = 1.0
    out = tmp_path / "out"
    pk.run_job(tasks, pk.Budget(jobs=2, seconds=20.0, reserve=1.0, eval_s=0.0), scale, str(results), out=out,
               poll_s=0.05)
    return out


@pytest.fixture
def fake_runs(tmp_path, monkeypatch):
    """Tiny MoR tasks whose processes stand in for lowprec.train: each sleeps (mode 'ok' or 'fail'
    and the seconds, per run name) beside a child process, logging its start, pid and end."""
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE)
    events = tmp_path / "events.jsonl"
    behaviour = {}

    def commands(task, config_path):
        mode, seconds = behaviour.get(task.name, ("ok", 0.5))
        return [[sys.executable, str(script), str(config_path), str(events), mode, str(seconds)]]

    monkeypatch.setattr(pk, "phase_commands", commands)
    monkeypatch.setattr(pk, "prepare_data", lambda tasks, log_dir: None)   # no process reads it
    tasks, _, _ = pk.missing_tasks("tiny", ["mor"], str(tmp_path / "results"),
                                   only=["mor/*/bf16/*", "mor/*/mor_block*/*", "mor/*/mor_tensor/*"])
    for t in tasks:
        t.estimate = 1.0

    def lines():
        return [json.loads(line) for line in events.read_text().splitlines()] if events.is_file() else []

    return tasks, behaviour, lines


def _alive(pid) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z" if Path(f"/proc/{pid}").exists() else True


def _members(path: Path) -> list[str]:
    import tarfile

    with tarfile.open(path) as tar:
        return sorted(m.name for m in tar.getmembers() if m.isfile())


def test_job_runs_n_at_a_time_and_archives_complete_runs(tmp_path, fake_runs):
    tasks, behaviour, lines = fake_runs
    tasks = tasks[:5]
    behaviour[tasks[4].name] = ("ok", 0.1)
    tasks[4].estimate = 50.0                    # needs more than the budget leaves: never started
    out = tmp_path / "out"
    pk.run_job(tasks, pk.Budget(jobs=2, seconds=12.0, reserve=1.0, eval_s=0.0), "tiny",
               str(tmp_path / "results"), out=out, poll_s=0.05, info={"note": "test"})
    assert [t.status for t in tasks] == ["done"] * 4 + ["not started"]
    assert tasks[4].note.startswith("needs 50 s,") and not tasks[4].out.exists()
    spans = {}
    for e in lines():
        spans.setdefault(e["run"], {}).update(e)
    assert len(spans) == 4 and all("end" in s for s in spans.values())
    # never more than 2 at once, and 2 at once at some time
    assert max(sum(o["start"] <= s["start"] < o["end"] for o in spans.values()) for s in spans.values()) == 2
    # what comes back: the complete run folders without their checkpoints, which stay here
    assert _members(out / "runs.tar.gz") == sorted(f"runs/tiny/{t.name}/{f}" for t in tasks[:4]
                                                   for f in ("config.yaml", "metrics.csv", "provenance.json"))
    assert all((t.out / "checkpoints" / "last.ckpt").is_file() for t in tasks[:4])
    assert _members(out / "logs.tar.gz") == sorted(f"{t.name}.log" for t in tasks[:4])
    summary = json.loads((out / "packer_summary.json").read_text())
    assert summary["note"] == "test" and [r["status"] for r in summary["runs"]] == [t.status for t in tasks]
    # placed under another results root; never over a complete run folder
    other = tmp_path / "checkout" / "results"
    assert pk.unpack(out / "runs.tar.gz", str(other)) == sorted(f"runs/tiny/{t.name}" for t in tasks[:4])
    assert (other / "runs" / "tiny" / tasks[0].name / "provenance.json").is_file()
    assert pk.unpack(out / "runs.tar.gz", str(other)) == []   # the same files again: nothing to place
    (other / "runs" / "tiny" / tasks[1].name / "metrics.csv").write_text("step,val_loss\n1,1.0\n")
    with pytest.raises(pk.PackerError, match="1 run folder\\(s\\) are complete under .* already, with other files"):
        pk.unpack(out / "runs.tar.gz", str(other))


def test_a_job_after_another_on_the_same_machine_archives_its_runs_again_instead_of_training_them(
        tmp_path, fake_runs):
    """Two jobs chained on one machine before the first's archive reached the checkout: the second
    starts from a fresh copy of the checkout (run folders absent, ignored folders kept), puts back
    the copies the first kept of the runs it completed, trains only the others, and archives both;
    the two archives unpack one after the other. A copy whose config changed is dropped."""
    tasks, behaviour, lines = fake_runs
    results, out1, out2 = tmp_path / "results", tmp_path / "out1", tmp_path / "out2"
    budget = pk.Budget(jobs=2, seconds=12.0, reserve=1.0, eval_s=0.0)
    pk.run_job(tasks[:2], budget, "tiny", str(results), out=out1, poll_s=0.05)
    assert [t.status for t in tasks[:2]] == ["done", "done"]
    for t in tasks[:2]:   # the next call's fresh copy of the checkout: the run folders are not in it
        assert (pk.done_path(t.archived_as(str(results)), str(results)) / "provenance.json").is_file()
        shutil.rmtree(t.out)
    configs = [t.cfg for t in tasks]
    earlier = pk.restore_done(str(results), configs)
    assert sorted(earlier) == sorted(t.archived_as(str(results)) for t in tasks[:2])
    again, _, _ = pk.missing_tasks("tiny", ["mor"], str(results), only=[t.name for t in tasks[:3]])
    assert [t.name for t in again] == [tasks[2].name]   # only the run no job completed
    again[0].estimate = 1.0
    started = len(lines())
    pk.run_job(again, budget, "tiny", str(results), out=out2, poll_s=0.05, earlier=earlier)
    assert [e["run"] for e in lines()[started:] if "start" in e] == [again[0].name.split("/", 1)[1]]
    assert {m.split("/")[4] for m in _members(out2 / "runs.tar.gz")} == {t.name.split("/")[2] for t in tasks[:3]}
    assert json.loads((out2 / "packer_summary.json").read_text())["done_earlier"] == sorted(earlier)
    checkout = tmp_path / "checkout"
    assert pk.unpack(out1 / "runs.tar.gz", str(checkout)) == sorted(f"runs/tiny/{t.name}" for t in tasks[:2])
    assert pk.unpack(out2 / "runs.tar.gz", str(checkout)) == [f"runs/tiny/{tasks[2].name}"]
    # complete in place: the copy is not needed and goes; a copy whose config changed goes too
    assert pk.restore_done(str(results), configs) == {}
    assert not any(pk.done_path(t.archived_as(str(results)), str(results)).exists() for t in tasks[:2])
    shutil.rmtree(tasks[2].out)
    changed = [{**c, "train": {**c["train"], "lr": 0.5}} if c is tasks[2].cfg else c for c in configs]
    assert pk.restore_done(str(results), changed) == {} and not tasks[2].out.exists()
    assert not pk.done_path(tasks[2].archived_as(str(results)), str(results)).exists()


def test_retrain_names_committed_runs_and_the_fine_tuning_runs_that_start_from_them(tmp_path):
    runs, ft = _grid("tiny", ["int8_fallback"], tmp_path)
    for cfg in [*runs.values(), *ft.values()]:
        _commit(cfg)
    stale = runs[("int8_fallback", "gpt2", "int8_block", "0")]
    write_yaml(Path(stale["output_dir"]) / "config.yaml", {**stale, "train": {**stale["train"], "lr": 0.5}})
    tasks, stale_runs, blocked = pk.missing_tasks("tiny", ["int8_fallback"], str(tmp_path))
    assert not tasks and not blocked and len(stale_runs) == 1
    # a stale run and a current one, named: both train again, replacing their folders
    named = ["int8_fallback/gpt2/int8_block/s0", "int8_fallback/gpt2/bf16/s0"]
    tasks, stale_runs, _ = pk.missing_tasks("tiny", ["int8_fallback"], str(tmp_path), retrain=named)
    assert sorted((t.name, t.kind, t.replaces) for t in tasks) == sorted((n, pk.PRETRAIN, True) for n in named)
    assert stale_runs == []
    # the source of the fine-tuning runs: they train again after it, from its new weights
    source = "int8_fallback/llama2/bf16/s0"
    tasks, _, blocked = pk.missing_tasks("tiny", ["int8_fallback"], str(tmp_path), retrain=[source])
    fts = [t for t in tasks if t.kind == pk.FINETUNE]
    assert not blocked and [(t.name, t.kind) for t in tasks if t.kind != pk.FINETUNE] == [(source, pk.PRETRAIN)]
    assert len(fts) == len(ft) and all(t.replaces and t.source == source for t in fts)
    # a fine-tuning run alone: its source, committed without its checkpoint, trains for it
    one = "int8_fallback_finetune/llama2/int8_block/s0"
    tasks, _, _ = pk.missing_tasks("tiny", ["int8_fallback"], str(tmp_path), retrain=[one])
    assert {(t.name, t.kind, t.replaces) for t in tasks} == {(one, pk.FINETUNE, True), (source, pk.SOURCE, False)}
    with pytest.raises(lpc.ConfigError, match=r"--retrain: \['nope/\*'\] match\(es\) no run of this grid"):
        pk.missing_tasks("tiny", ["int8_fallback"], str(tmp_path), retrain=["nope/*"])
    with pytest.raises(SystemExit, match="--retrain names a scale's grid runs"):
        pk.main(["plan", "--sweep", "configs/sweeps/medium.yaml", "--retrain", "*"])


def test_a_retrained_run_replaces_its_folder_only_when_it_completes(tmp_path, fake_runs, monkeypatch):
    """A committed run named by --retrain trains where it is, its committed files set aside: they
    are dropped when it completes and put back when it fails or is stopped; unpack replaces the
    committed folder only when told the same names; a killed job's set-aside folders are put back."""
    tasks, behaviour, _ = fake_runs
    results = tmp_path / "results"
    names = [t.name for t in tasks[:3]]
    for t in tasks[:3]:
        _commit(t.cfg)
    again, _, _ = pk.missing_tasks("tiny", ["mor"], str(results), only=names, retrain=names)
    assert [t.name for t in again] == names and all(t.replaces for t in again)
    ok, failing, slow = again
    behaviour[failing.name] = ("fail", 0.2)
    behaviour[slow.name] = ("ok", 60.0)        # stopped at the budget
    for t in again:
        t.estimate = 1.0
    monkeypatch.setattr(pk, "RESUMABLE_STOP_S", 1.0)
    monkeypatch.setattr(pk, "RESUMABLE_MIN_S", 2.0)
    out = tmp_path / "out"
    pk.run_job(again, pk.Budget(jobs=3, seconds=5.0, reserve=0.5, eval_s=0.0, resumable=True), "tiny",
               str(results), out=out, poll_s=0.05)
    assert [t.status for t in again] == ["done", "failed", "stopped"]
    assert (ok.out / "metrics.csv").read_text() == "step,val_loss\n1,9.0\n"  # trained again
    committed = ["config.yaml", "metrics.csv", "provenance.json"]
    for t in (failing, slow):   # the committed folder as it was, never kept for a next job
        assert (t.out / "metrics.csv").read_text() == "step,val_loss\n1,5.0\n"
        assert sorted(p.name for p in t.out.iterdir()) == committed
        assert "the committed folder put back" in t.note and not pk.kept_path(t, str(results)).exists()
    assert not list(results.joinpath(*pk.ASIDE).rglob("*.json"))
    assert _members(out / "runs.tar.gz") == [f"runs/tiny/{ok.name}/{f}" for f in committed]
    summary = json.loads((out / "packer_summary.json").read_text())
    assert [r["replaces"] for r in summary["runs"]] == [True] * 3
    # into a checkout that holds the committed run: refused unless the names are given again
    other = tmp_path / "checkout" / "results"
    _commit({**ok.cfg, "output_dir": str(other / "runs" / "tiny" / ok.name)})
    with pytest.raises(pk.PackerError, match="replace theirs with unpack --retrain"):
        pk.unpack(out / "runs.tar.gz", str(other))
    assert (other / "runs" / "tiny" / ok.name / "metrics.csv").read_text() == "step,val_loss\n1,5.0\n"
    assert pk.unpack(out / "runs.tar.gz", str(other), retrain=[ok.name]) == [f"runs/tiny/{ok.name}"]
    assert (other / "runs" / "tiny" / ok.name / "metrics.csv").read_text() == "step,val_loss\n1,9.0\n"
    # a job killed outright left a folder set aside and a partial one in place: put back first
    pk.set_aside(failing, str(results))
    failing.out.mkdir()
    (failing.out / "metrics.csv").write_text("step,val_loss\n")
    assert pk.restore_aside(str(results)) == [f"runs/tiny/{failing.name}"]
    assert (failing.out / "metrics.csv").read_text() == "step,val_loss\n1,5.0\n"


def test_unpack_refuses_what_is_no_run_folder(tmp_path):
    src = tmp_path / "x.txt"
    src.write_text("x")
    for name in ("data/x.txt", "runs/tiny/mor/nemotron/bf16/notaseed/x.txt", "runs/tiny/mor/nemotron/bf16/x.txt",
                 "runs/tiny/../../x.txt", "sweeps/medium/mor/nemotron/bf16/s0/x.txt"):
        pk.archive(tmp_path / "bad.tar.gz", {name: src})
        with pytest.raises(pk.PackerError, match=f"member '{name}' is not a file of a run folder under runs/"):
            pk.unpack(tmp_path / "bad.tar.gz", str(tmp_path / "results"))
    assert not (tmp_path / "results").exists()


def test_a_run_at_the_budget_is_stopped_and_removed_and_a_failed_one_too(tmp_path, fake_runs, monkeypatch):
    tasks, behaviour, lines = fake_runs
    slow, deaf, failing = tasks[:3]
    behaviour[slow.name] = ("ok", 60.0)        # its estimate (1 s) is wrong: the budget stops it
    behaviour[deaf.name] = ("deaf", 60.0)      # and this one ignores SIGTERM: SIGKILL after the grace
    behaviour[failing.name] = ("fail", 0.2)
    monkeypatch.setattr(pk, "GRACE_S", 1.0)
    out = tmp_path / "out"
    t0 = time.monotonic()
    pk.run_job(tasks[:3], pk.Budget(jobs=3, seconds=4.0, reserve=1.5, eval_s=0.0), "tiny",
               str(tmp_path / "results"), out=out, poll_s=0.05)
    assert time.monotonic() - t0 < 4.0    # the processes are stopped together, within the reserve
    assert (slow.status, deaf.status, failing.status) == ("stopped", "stopped", "failed")
    assert slow.note.startswith("at the budget at step 1/10; folder removed") and "see " in failing.note
    for t in (slow, deaf, failing):
        assert not t.out.exists()
    assert _members(out / "runs.tar.gz") == []
    for e in lines():
        if "pid" in e:   # the process and its child are gone (the whole process group)
            assert not _alive(e["pid"]) and not _alive(e["child"]), e


def test_a_resumable_job_keeps_a_run_longer_than_it_and_the_next_job_resumes_it(tmp_path, fake_runs, monkeypatch):
    """--resumable: a run longer than the job starts anyway, is stopped before the budget's end and
    kept, checkpoints and curve, outside the run folders (where a fresh copy of the checkout keeps
    it); it is in no archive; the next job puts it back before it trains, and it completes there."""
    tasks, behaviour, lines = fake_runs
    long_, short = tasks[:2]
    long_.estimate = 100.0                      # longer than the job: without --resumable, not started
    behaviour[long_.name] = ("ok", 60.0)
    monkeypatch.setattr(pk, "RESUMABLE_STOP_S", 1.0)
    monkeypatch.setattr(pk, "RESUMABLE_MIN_S", 2.0)
    results, out = tmp_path / "results", tmp_path / "out"
    budget = pk.Budget(jobs=2, seconds=5.0, reserve=0.5, eval_s=0.0, resumable=True)
    t0 = time.monotonic()
    pk.run_job([long_, short], budget, "tiny", str(results), out=out, poll_s=0.05)
    assert time.monotonic() - t0 < 5.0
    assert (long_.status, short.status) == ("stopped", "done")
    kept = pk.kept_path(long_, str(results))
    assert long_.note.startswith("at the budget at step 1/10; kept for the next job") and str(kept) in long_.note
    assert not long_.out.exists() and (kept / "checkpoints" / "last.ckpt").is_file()
    assert kept.relative_to(results).parts[:3] == ("logs", "packer", "kept")   # ignored by git
    assert pk.steps_done(long_, str(results)) == 1                              # its metrics' last step
    assert _members(out / "runs.tar.gz") == sorted(f"runs/tiny/{short.name}/{f}"
                                                   for f in ("config.yaml", "metrics.csv", "provenance.json"))
    (kept / "progress.txt").write_text("trained before")
    behaviour[long_.name] = ("ok", 0.2)
    long_.status, long_.estimate = "pending", 1.0
    pk.run_job([long_], budget, "tiny", str(results), out=out, poll_s=0.05)
    assert long_.status == "done" and not kept.exists()
    assert (long_.out / "progress.txt").read_text() == "trained before"        # resumed, not started over
    assert (long_.out / "metrics.csv").read_text() == "step,val_loss\n1,9.0\n"
    assert _members(out / "runs.tar.gz")[0].startswith(f"runs/tiny/{long_.name}/")


def test_a_resumable_job_starts_no_long_run_without_time_for_it_and_removes_one_without_checkpoint(
        tmp_path, fake_runs, monkeypatch):
    tasks, behaviour, lines = fake_runs
    long_, slow_start = tasks[:2]
    long_.estimate = slow_start.estimate = 100.0
    behaviour[slow_start.name] = ("deaf", 60.0)
    monkeypatch.setattr(pk, "RESUMABLE_STOP_S", 1.0)
    monkeypatch.setattr(pk, "RESUMABLE_MIN_S", 60.0)   # more than the job has: neither starts
    results = tmp_path / "results"
    budget = pk.Budget(jobs=2, seconds=4.0, reserve=0.5, eval_s=0.0, resumable=True)
    pk.run_job([long_, slow_start], budget, "tiny", str(results), poll_s=0.05)
    assert (long_.status, slow_start.status) == ("not started", "not started")
    monkeypatch.setattr(pk, "RESUMABLE_MIN_S", 1.0)
    shutil.rmtree(results, ignore_errors=True)
    long_.status = slow_start.status = "pending"
    monkeypatch.setattr(pk, "phase_commands", lambda task, config_path: [
        [sys.executable, "-c", "import time; time.sleep(60)"]])   # stopped before it saves anything
    pk.run_job([slow_start], budget, "tiny", str(results), poll_s=0.05)
    assert slow_start.status == "stopped" and slow_start.note.endswith("no checkpoint yet: folder removed")
    assert not slow_start.out.exists() and not pk.kept_path(slow_start, str(results)).exists()


def test_a_resumable_plan_counts_the_jobs_a_long_run_goes_on_in(fake_runs, monkeypatch):
    tasks, _, _ = fake_runs
    long_ = tasks[0]
    long_.estimate = 100.0
    monkeypatch.setattr(pk, "RESUMABLE_STOP_S", 5.0)
    monkeypatch.setattr(pk, "RESUMABLE_MIN_S", 20.0)
    plain = pk.Budget(jobs=1, seconds=60.0, reserve=5.0, eval_s=0.0)
    assert pk.simulate([long_], plain) == [] and pk.jobs_needed([long_], plain) == (0, [long_])
    budget = pk.Budget(jobs=1, seconds=60.0, reserve=5.0, eval_s=0.0, resumable=True, startup=10.0)
    [(t, start, end)] = pk.simulate([long_], budget)
    assert (t, start, end) == (long_, 0.0, 50.0) and pk.continues(t, start, end, budget)
    # 100 s: 50 in the first job; 10 + 50 left, 50 in the second; 10 + 10 in the third
    assert pk.jobs_needed([long_], budget) == (3, [])


def test_plan_estimates_a_kept_run_by_the_steps_it_has_left(tmp_path):
    from lowprec.sweep import load_sweep, sweep_runs

    results = tmp_path / "results"
    path = _sweep_file(tmp_path, results)
    runs = sweep_runs(load_sweep(path), str(results))
    tasks, _ = pk.sweep_tasks(str(path), str(results))
    kept = pk.kept_path(tasks[0], str(results))
    (kept / "checkpoints").mkdir(parents=True)
    (kept / "checkpoints" / "last.ckpt").write_text("weights")
    max_steps = runs[tasks[0].name]["train"]["max_steps"]
    (kept / "metrics.csv").write_text("step,train_loss,val_loss\n" + "".join(
        f"{s},5.0,\n" for s in range(1, max_steps // 2 + 1)))
    proc = subprocess.run([sys.executable, "-m", "lowprec.packer", "plan", "--sweep", str(path), "--results",
                           str(results), "--jobs", "1", "--estimate", "*=110", "--startup", "10"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(lpc.REPO_ROOT)})
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if tasks[0].name in line)
    assert " 60 " in row and f"resumes at step {max_steps // 2}" in row      # 10 + (110 - 10) / 2
    other = next(line for line in proc.stdout.splitlines() if tasks[1].name in line)
    assert " 110 " in other and "resumes" not in other
    # what the first job gets done by --jobs, the kept run at its steps left: within 235 s (250 less
    # the reserve) one process fits 60 + 110 s, two fit all four
    proc = subprocess.run([sys.executable, "-m", "lowprec.packer", "plan", "--sweep", str(path), "--results",
                           str(results), "--jobs", "1", "--budget", "250", "--estimate", "*=110", "--startup", "10"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(lpc.REPO_ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert ("the first job's runs (their estimates alone) by --jobs: --jobs 1: 2 (170 s alone), --jobs 2: 4 "
            "(390 s alone), --jobs 3: 4 (390 s alone), --jobs 4: 4 (390 s alone)") in proc.stdout


def test_a_run_out_of_gpu_memory_beside_others_is_retried_with_fewer(tmp_path, fake_runs):
    tasks, behaviour, lines = fake_runs
    tasks = tasks[:4]
    hungry = tasks[1]
    behaviour[hungry.name] = ("oom_once", 0.3)
    for t in tasks[2:]:
        behaviour[t.name] = ("ok", 0.6)
    pk.run_job(tasks, pk.Budget(jobs=3, seconds=20.0, reserve=1.0, eval_s=0.0), "tiny",
               str(tmp_path / "results"), out=tmp_path / "out", poll_s=0.05)
    assert [t.status for t in tasks] == ["done"] * 4 and hungry.attempts == 2
    assert hungry.note == "out of GPU memory with 3 runs sharing it: retried, at most 2 at a time"
    starts = [e for e in lines() if "start" in e]
    retry = [e for e in starts if e["run"] == hungry.cfg["run_id"]][-1]
    starts = [e for e in starts if e["run"] != retry["run"] or e is retry]   # the failed attempt ended at once
    ends = {e["run"]: e["end"] for e in lines() if "end" in e}
    after = [e for e in starts if e["start"] >= retry["start"]]
    # from the retry on, never more than two at once
    assert all(sum(o["start"] <= e["start"] < ends[o["run"]] for o in starts) <= 2 for e in after)
    log = (tmp_path / "results" / "logs" / "packer" / "tiny" / f"{hungry.name}.log").read_text()
    assert "CUDA out of memory" in log and "# attempt 2" in log   # both attempts' logs kept
    summary = json.loads((tmp_path / "out" / "packer_summary.json").read_text())
    assert summary["max_jobs"] == 2 and [r["attempts"] for r in summary["runs"]] == [1, 2, 1, 1]


def test_a_run_out_of_gpu_memory_alone_fails_with_the_step_it_reached(tmp_path, fake_runs):
    tasks, behaviour, _ = fake_runs
    behaviour[tasks[0].name] = ("oom", 0.1)
    behaviour[tasks[1].name] = ("ok", 60.0)
    pk.run_job(tasks[:1], pk.Budget(jobs=2, seconds=20.0, reserve=1.0, eval_s=0.0), "tiny",
               str(tmp_path / "results"), poll_s=0.05)
    assert tasks[0].status == "failed" and tasks[0].attempts == 1 and not tasks[0].out.exists()
    pk.run_job(tasks[1:2], pk.Budget(jobs=1, seconds=2.0, reserve=0.5, eval_s=0.0), "tiny",
               str(tmp_path / "results"), poll_s=0.05)
    assert tasks[1].status == "stopped" and tasks[1].note.startswith("at the budget at step 1/10; folder removed")


def test_runs_start_only_while_their_measured_memory_fits_the_gpu(tmp_path, fake_runs):
    """Three runs of a 30 GiB arm on a GPU of 79 GiB, --jobs 3: two at a time (footprints 34.5 GiB),
    the third when one ends; a run of an arm never measured is limited by --jobs alone, and one
    larger than the GPU still starts alone."""
    tasks, behaviour, lines = fake_runs
    tasks = tasks[:4]
    for t in tasks[:3]:
        t.memory_gib = 30.0
        behaviour[t.name] = ("ok", 1.0)
    behaviour[tasks[3].name] = ("ok", 1.0)
    budget = pk.Budget(jobs=3, seconds=30.0, reserve=1.0, eval_s=0.0, gpu_memory_gib=79.0)
    pk.run_job(tasks, budget, "tiny", str(tmp_path / "results"), poll_s=0.05)
    assert [t.status for t in tasks] == ["done"] * 4
    starts = {e["run"]: e["start"] for e in lines() if "start" in e}
    ends = {e["run"]: e["end"] for e in lines() if "end" in e}
    names = [t.cfg["run_id"] for t in tasks]
    assert starts[names[2]] >= min(ends[names[0]], ends[names[1]])   # the third waited for memory
    assert starts[names[3]] < ends[names[0]]                          # the unmeasured one did not
    assert [t for t, _, _ in pk.simulate(tasks[:3], budget)] == tasks[:3]
    assert pk.fits(replace(tasks[0], memory_gib=100.0), 0.0, budget)
    assert not pk.fits(tasks[0], 45.0, budget) and pk.fits(tasks[0], 44.0, budget)
    assert pk.fits(tasks[0], 78.0, replace(budget, gpu_memory_gib=None))


def test_the_memory_of_an_arm_is_its_measured_peak_or_that_of_the_same_run_config():
    """From the committed medium runs: MoR per tensor's size-sweep runs at the grid's shape (27.9
    GiB), and GaussWS's Llama2 BF16 arm, never trained at medium, from INT8 fallback's Llama2 BF16
    runs (the same run config); an arm with no such measurement is unknown."""
    results = str(lpc.REPO_ROOT / "results")
    tasks = {t.name: t for t in pk.missing_tasks("medium", ["mor", "gaussws"], results)[0]}
    est = Estimator(results, "medium", shape_runs=[str(lpc.REPO_ROOT / s["runs"]) for _, s in sweeps.scale_sweeps("medium")])
    assert est.memory_gib(tasks["mor/nemotron/mor_tensor/s2"]) == pytest.approx(27.90, abs=0.01)
    llama2 = est.memory_gib(tasks["gaussws/llama2/bf16/s0"])
    assert llama2 is not None and llama2 == est.peak_gib[("int8_fallback", "llama2", "bf16")]
    assert ("gaussws", "llama2", "bf16") not in est.peak_gib
    assert est.memory_gib(tasks["mor/nemotron/mor_channel/s0"]) is None
    # a size sweep's run: its own point's runs alone (8 x 512's INT8 fallback seed 0, not 12 x 768's)
    sweep = sweeps.load_sweep(str(lpc.REPO_ROOT / "configs/sweeps/medium.yaml"))
    at_points = {t.name: t for t in pk.sweep_tasks(str(lpc.REPO_ROOT / "configs/sweeps/medium.yaml"), results)[0]}
    own = Estimator(results, "medium", sweep_runs=str(lpc.REPO_ROOT / sweep["runs"]))
    small = own.memory_gib(at_points["d8w512/int8_fallback/llama2/int8_fallback/s1"])
    assert small == own.sweep_peak_gib[("d8w512", "int8_fallback", "llama2", "int8_fallback")] < 20.0
    assert own.memory_gib(at_points["d16w1024/mor/nemotron/mor_tensor/s0"]) is None


def test_evaluations_run_in_the_slot_and_a_missing_one_fails_the_run(tmp_path, monkeypatch):
    tasks, _, _ = pk.missing_tasks("tiny", ["gaussws"], str(tmp_path / "results"),
                                   only=["gaussws/gpt2/bf16/*", "gaussws/gpt2/gaussws_b6/*"])
    script = tmp_path / "fake.py"
    script.write_text(FAKE)

    def commands(task, config_path):
        train = [sys.executable, str(script), str(config_path), str(tmp_path / "ev.jsonl"), "ok", "0.1"]
        evals = []
        for files, _ in task.evaluations:   # BF16's evaluations write their files, GaussWS's export none
            paths = [str(task.out / f) for f in files] if task.method == "bf16" else []
            evals.append([sys.executable, "-c", f"import pathlib\nfor p in {paths!r}: pathlib.Path(p).write_text('x')"])
        return [train, *evals]

    monkeypatch.setattr(pk, "phase_commands", commands)
    monkeypatch.setattr(pk, "prepare_data", lambda tasks, log_dir: None)
    for t in tasks:
        t.estimate = 1.0
    pk.run_job(tasks, pk.Budget(jobs=2, seconds=20.0, reserve=1.0, eval_s=0.5), "tiny", str(tmp_path / "results"),
               poll_s=0.05)
    by = {t.method: t for t in tasks}
    assert by["bf16"].status == "done" and {"export.csv", "exactness.csv"} <= {p.name for p in by["bf16"].out.iterdir()}
    assert by["gaussws_b6"].status == "failed" and "(no export.csv)" in by["gaussws_b6"].note
    assert not by["gaussws_b6"].out.exists()


def test_a_committed_source_trains_again_for_its_checkpoint_alone(tmp_path, monkeypatch):
    """A fine-tuning run whose source is committed without its final checkpoint: the source trains
    again in a folder of its own; once it completes, its checkpoint goes where the fine-tuning run
    reads it (the committed folder's checkpoints/, which git ignores; the committed files stay as
    they were) and its folder goes; the fine-tuning run then trains, and only it is archived."""
    import tarfile

    results = tmp_path / "results"
    runs, _ = _grid("tiny", ["int8_fallback"], results)
    source = runs[("int8_fallback", "llama2", "bf16", "0")]
    _commit(source)
    committed = {f.name: f.read_bytes() for f in Path(source["output_dir"]).iterdir()}
    tasks, _, blocked = pk.missing_tasks("tiny", ["int8_fallback"], str(results),
                                         only=["int8_fallback_finetune/llama2/int8_block/s0"])
    assert not blocked and [t.kind for t in tasks] == [pk.FINETUNE, pk.SOURCE]
    _fake_job(tasks, "tiny", results, tmp_path, monkeypatch)
    ft, again = tasks
    assert again.status == "done" and ft.status == "done" and "not archived" in again.note
    ckpt = Path(source["output_dir"]) / "checkpoints" / "last.ckpt"
    assert ckpt.read_text() == "weights" and not again.out.exists()
    assert {f.name: f.read_bytes() for f in Path(source["output_dir"]).iterdir() if f.is_file()} == committed
    events = [json.loads(line) for line in (tmp_path / "ev.jsonl").read_text().splitlines()]
    end_source = next(e["end"] for e in events if "end" in e and e["run"] == again.cfg["run_id"])
    assert next(e["start"] for e in events if "start" in e and e["run"] == ft.cfg["run_id"]) >= end_source
    with tarfile.open(tmp_path / "out" / "runs.tar.gz") as tar:
        folders = {Path(n).parent.as_posix() for n in tar.getnames() if n.endswith("provenance.json")}
    assert folders == {"runs/tiny/int8_fallback_finetune/llama2/int8_block/s0"}


def test_fine_tuning_runs_take_the_free_slots_first_and_never_more_than_jobs(tmp_path, monkeypatch):
    """A source's four fine-tuning runs start in the slots that free up after it, before the
    pretraining runs waiting behind them, and the GPU never holds more than --jobs processes (they
    once all started beside the others); the source starts only with time for them one after another."""
    results = tmp_path / "results"
    tasks, _, _ = pk.missing_tasks("tiny", ["int8_fallback"], str(results))
    source = tasks[0]
    fts = [t for t in tasks if t.source == source.name]
    tasks = tasks[:3] + fts
    assert source.name == "int8_fallback/llama2/bf16/s0" and len(fts) == 4
    monkeypatch.setattr(pk, "run_evaluations", lambda task: [])   # the stand-ins write no evaluations
    # the pretraining run beside the source outlasts it by far: when the source ends, the next
    # pretraining run waits for a slot with the four fine-tuning runs (with equal lengths a run
    # ending with the source took the free slot while the source's process was still exiting)
    _fake_job(tasks, "tiny", results, tmp_path, monkeypatch, seconds={t.name: 3.0 for t in tasks[1:3]})
    assert [t.status for t in tasks] == ["done"] * len(tasks)
    events = [json.loads(line) for line in (tmp_path / "ev.jsonl").read_text().splitlines()]
    starts = {e["run"]: e["start"] for e in events if "start" in e}
    ends = {e["run"]: e["end"] for e in events if "end" in e}
    assert max(sum(starts[o] <= t < ends[o] for o in starts) for t in starts.values()) == 2
    ft_ids = {t.cfg["run_id"] for t in fts}
    later = [starts[r] for r in starts if r not in ft_ids and starts[r] >= ends[source.cfg["run_id"]]]
    assert later and max(starts[r] for r in ft_ids) <= min(later)
    # each archived run's provenance says how many processes shared the GPU while it trained: the
    # long pretraining run had the source and the fine-tuning runs beside it most of its time
    shared = {t.name: json.loads((t.out / "provenance.json").read_text())[SHARING_KEY]
              for t in tasks if t.kind != pk.SOURCE}
    assert all(1.0 <= v <= 2.0 for v in shared.values()) and shared[tasks[1].name] > 1.5, shared
    budget = pk.Budget(jobs=2, seconds=20.0, reserve=1.0, eval_s=0.0)
    assert pk.need(source, tasks, budget) == 5.0                     # itself, then the four in its slot
    assert source not in [t for t, _, _ in pk.simulate(tasks, replace(budget, seconds=5.5))]  # 4.5 s to the stop
    planned = [t.name for t, _, _ in pk.simulate(tasks, replace(budget, seconds=6.0))]
    assert planned.index(source.name) < min(planned.index(t.name) for t in fts)


def test_a_process_without_memory_for_its_cuda_context_is_out_of_memory(tmp_path):
    """torch's error where a process cannot make its CUDA context (Lightning's set_device with the
    GPU full) counts as out of memory, so the run is retried with fewer sharing; only the last
    attempt's tail counts."""
    log = tmp_path / "run.log"
    log.write_text("Traceback (most recent call last):\n  ...\ntorch.AcceleratorError: CUDA error: out of memory\n")
    assert pk.out_of_memory(log)
    log.write_text(log.read_text() + "# attempt 2\nValueError: data.path: no such file\n")
    assert not pk.out_of_memory(log)


def test_a_run_stopped_in_its_evaluation_says_so(tmp_path, monkeypatch):
    """The medium grid's first job (H100) stopped three Llama2 BF16 runs whose training had
    completed, in their outlier pass on the CPU; their note read 'at step 1000/1000', as if the
    training had been cut short."""
    tasks, _, _ = pk.missing_tasks("tiny", ["int8_fallback"], str(tmp_path / "results"), only=["int8_fallback/llama2/bf16/s0"])
    script = tmp_path / "fake.py"
    script.write_text(FAKE)
    (tmp_path / "slow_outliers.py").write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setattr(pk, "phase_commands", lambda task, config_path: [
        [sys.executable, str(script), str(config_path), str(tmp_path / "ev.jsonl"), "ok", "0.1"],
        [sys.executable, "-m", "slow_outliers", "outliers-run", "--runs", str(task.out)]])
    monkeypatch.setattr(pk, "prepare_data", lambda tasks, log_dir: None)
    monkeypatch.setattr(pk, "GRACE_S", 1.0)
    [task] = tasks
    assert task.evaluations[0][1][:3] == ["-m", "lowprec.report.int8_fallback", "outliers-run"]
    task.estimate = 0.5
    pk.run_job(tasks, pk.Budget(jobs=1, seconds=5.0, reserve=1.0, eval_s=0.5), "tiny", str(tmp_path / "results"),
               poll_s=0.05)
    assert task.status == "stopped" and not task.out.exists()
    assert task.note.startswith("at the budget, its training complete, in its evaluation (slow_outliers outliers-run); folder removed")


def test_data_that_cannot_be_prepared_stops_the_job_before_any_run(tmp_path):
    cfg = {"paper": "mor", "method": {"name": "bf16"}, "output_dir": str(tmp_path / "runs" / "x"),
           "data": {"source": "local", "path": str(tmp_path / "no-such-corpus"), "vocab_size": 300,
                    "val_fraction": 0.1, "dir": str(tmp_path / "data" / "d")}}
    with pytest.raises(pk.PackerError, match=r"could not prepare .*/data/d .*python -m lowprec.databundle pack"):
        pk.run_job([pk.Task("mor/m/bf16/s0", cfg, pk.PRETRAIN, estimate=1.0)], pk.Budget(1, 30.0, 1.0),
                   "tiny", str(tmp_path))
    assert not (tmp_path / "runs").exists()


def test_plan_of_the_small_grid(tmp_path):
    """GaussWS's committed small runs less their seed 4: the plan lists the runs missing, each
    estimated from its arm's committed runs, and says how many runs one job holds."""
    results = tmp_path / "results"
    for scale in ("small", "tiny"):  # tiny: the arms' reference times
        shutil.copytree(lpc.REPO_ROOT / "results" / "runs" / scale / "gaussws", results / "runs" / scale / "gaussws")
    for run in (results / "runs" / "small" / "gaussws").glob("*/*/s4"):
        shutil.rmtree(run)
    proc = subprocess.run([sys.executable, "-m", "lowprec.packer", "plan", "--scale", "small", "--papers", "gaussws",
                           "--results", str(results), "--jobs", "12", "--budget", "560"],
                          capture_output=True, text=True, cwd=lpc.REPO_ROOT)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    missing = [t.name for t in pk.missing_tasks("small", ["gaussws"], str(results))[0]]
    assert sorted(missing) == [f"gaussws/{m}/{a}/s4" for m in ("gpt2", "llama2") for a in ("bf16", "gaussws_b6")]
    assert lines[0].startswith(f"{len(missing)} run(s) to train; estimates with 12 sharing the GPU")
    listed = [line.split()[1] for line in lines[3:3 + len(missing)]]
    assert sorted(listed) == sorted(missing)
    assert all("this arm's committed runs" in line for line in lines[3:3 + len(missing)])
    assert f"one job of 560 s (12 processes) starts {len(missing)} of them" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "lowprec.packer", "plan", "--budget", "10"],
                         capture_output=True, text=True, cwd=lpc.REPO_ROOT)
    assert bad.returncode != 0 and "--budget 10.0 above --reserve 15.0" in bad.stderr


# --------------------------------------------------------------------------- a real job

@pytest.mark.slow
def test_a_real_job_trains_runs_together(tmp_path):
    """Two real smoke runs trained at once (their data prepared first); a third whose estimate does
    not fit is not started; the copies are complete and current."""
    results, out = tmp_path / "results", tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "lowprec.packer", "run", "--scale", "smoke", "--papers", "mor", "--results", str(results),
         "--only", "mor/nemotron/bf16*/s0", "mor/nemotron/mor_block/s0", "--jobs", "2", "--budget", "240",
         "--estimate", "mor/*/mor_block/*=400", "*=60", "--startup", "0", "--out", str(out)],
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(lpc.REPO_ROOT)})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((out / "packer_summary.json").read_text())
    status = {r["run"]: r["status"] for r in summary["runs"]}
    assert status == {"mor/nemotron/bf16/s0": "done", "mor/nemotron/bf16_cfg2/s0": "done",
                      "mor/nemotron/mor_block/s0": "not started"}
    assert "mor/nemotron/mor_block/s0  not started" in proc.stdout
    # placed in another checkout, the runs are complete and current there
    other = tmp_path / "checkout" / "results"
    assert pk.unpack(out / "runs.tar.gz", str(other)) == ["runs/smoke/mor/nemotron/bf16/s0",
                                                          "runs/smoke/mor/nemotron/bf16_cfg2/s0"]
    for root in (results, other):
        runs, _ = _grid("smoke", ["mor"], root)
        for method in ("bf16", "bf16_cfg2"):
            assert lpc.run_status(runs[("mor", "nemotron", method, "0")]) == ("current", ""), (root, method)
    prov = [json.loads((other / "runs" / "smoke" / "mor" / "nemotron" / m / "s0" / "provenance.json").read_text())
            for m in ("bf16", "bf16_cfg2")]
    a, b = (sorted((p["started"], p["finished"]) for p in prov))
    assert a[1] > b[0]   # they overlapped: trained together


def _sweep_file(tmp_path, results, points=({"name": "A", "layers": 1, "d_model": 32, "heads": 2},)) -> Path:
    import yaml

    sweep = {"scale": "smoke", "runs": str(results / "sweeps" / "sw"), "table": str(tmp_path / "sweep.csv"),
             "seeds": [0], "budgets": [2, 4], "points": list(points),
             "arms": {"fallback": {"paper": "int8_fallback", "model": "llama2", "method": "int8_fallback"},
                      "mor": {"paper": "mor", "model": "nemotron", "method": "mor_tensor"},
                      "gaussws": {"paper": "gaussws", "model": "gpt2", "method": "gaussws_b6", "baseline": "bf16"}}}
    path = tmp_path / "sw.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def test_a_sweeps_runs_are_estimated_from_its_completed_runs_by_parameters(tmp_path):
    """A sweep's run is estimated from its arm's completed runs: from a smaller point's by seconds
    per step and parameter alone, times its parameters, steps and the sharing; from a larger
    point's by their seconds per step, unscaled (a smaller model uses the GPU worse: scaled down,
    the estimate would fall short); at its own point by that point's runs; an arm with none needs
    --estimate."""
    from lowprec.sweep import load_sweep, run_parameters, sweep_runs

    results = tmp_path / "results"
    path = _sweep_file(tmp_path, results, points=({"name": "A", "layers": 1, "d_model": 32, "heads": 2},
                                                  {"name": "B", "layers": 2, "d_model": 64, "heads": 4}))
    runs = sweep_runs(load_sweep(path), str(results))
    done = runs["A/mor/nemotron/mor_tensor/s0"]
    _commit(done, wall=40.0)   # alone (no other run overlaps it): k = 1
    tasks, _ = pk.sweep_tasks(str(path), str(results))
    est = Estimator(str(results), "smoke", startup=5.0, sweep_runs=str(results / "sweeps" / "sw"))
    by = {t.name: t for t in tasks}
    big = by["B/mor/nemotron/mor_tensor/s0"]
    per = 40.0 / 4 / run_parameters(done)          # 4 steps (the largest budget)
    want = 5.0 + per * run_parameters(big.cfg) * 4 * 2 ** est.exponent
    got, why = est(big, 2)
    assert got == pytest.approx(want) and run_parameters(big.cfg) > run_parameters(done) and "other points" in why
    # the larger point's fallback run took 30 s alone: the smaller point's is bounded by its 30 / 4 a step
    _commit(runs["B/int8_fallback/llama2/int8_fallback/s0"], wall=30.0, start=100.0)   # alone too
    est = Estimator(str(results), "smoke", startup=5.0, sweep_runs=str(results / "sweeps" / "sw"))
    assert est(by["A/int8_fallback/llama2/int8_fallback/s0"], 1)[0] == pytest.approx(5.0 + 30.0)
    # at its own point: that point's run, whatever the smaller point's bound (here far above it)
    _commit(runs["B/mor/nemotron/mor_tensor/s0"], wall=24.0, start=200.0)
    est = Estimator(str(results), "smoke", startup=5.0, sweep_runs=str(results / "sweeps" / "sw"))
    got, why = est(big, 1)
    assert got == pytest.approx(5.0 + 24.0) and got < want and "at this point" in why
    assert est(by["B/gaussws/gpt2/bf16/s0"], 2) == (None, "no completed run of this arm in the sweep to "
                                                         "estimate from: give --estimate")


def test_a_job_brings_back_the_int8_tuning_its_runs_add_to_a_copy_of_the_committed_records(tmp_path, monkeypatch,
                                                                                            capsys):
    """With --out, a job's runs read and add to a copy of the committed INT8 tuning records in the
    out folder (which comes back with the job); a file the caller names is used instead (the job
    says that its tuning stays there), and without --out the runs name none (they read the
    committed file and add to nothing)."""
    from lowprec.kernels import INT8_COMMITTED_RECORDS, INT8_TUNED_ENV

    runs, _ = _grid("smoke", ["gaussws"], tmp_path / "results")
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE)
    monkeypatch.delenv(INT8_TUNED_ENV, raising=False)
    monkeypatch.setattr(pk, "prepare_data", lambda tasks, log_dir: None)

    def job(name, out):
        log = tmp_path / f"{name}.jsonl"
        monkeypatch.setattr(pk, "phase_commands", lambda task, config: [
            [sys.executable, str(script), str(config), str(log), "ok", "0.1"]])
        tasks, _, _ = pk.missing_tasks("smoke", ["gaussws"], str(tmp_path / "results"), only=["gaussws/gpt2/bf16/*"])
        for t in tasks:
            t.estimate, t.evaluations = 1.0, []   # training alone
        pk.run_job(tasks, pk.Budget(jobs=1, seconds=20.0, reserve=1.0, eval_s=0.0), "smoke",
                   str(tmp_path / "results"), out=out, poll_s=0.05)
        assert [t.status for t in tasks] == ["done"]
        shutil.rmtree(tasks[0].out)   # the next job trains it again
        return [json.loads(line)["int8_records"] for line in log.read_text().splitlines() if "start" in line]

    out = tmp_path / "out"
    assert job("copied", out) == [str(out / "int8_gemm_tuned.json")]
    assert (out / "int8_gemm_tuned.json").read_bytes() == INT8_COMMITTED_RECORDS.read_bytes()
    (out / "int8_gemm_tuned.json").write_text("{}")   # what a job's runs added is not overwritten
    assert job("again", out) == [str(out / "int8_gemm_tuned.json")]
    assert (out / "int8_gemm_tuned.json").read_text() == "{}"
    monkeypatch.setenv(INT8_TUNED_ENV, str(tmp_path / "mine.json"))
    capsys.readouterr()
    assert job("named", tmp_path / "out2") == [str(tmp_path / "mine.json")]
    assert not (tmp_path / "out2" / "int8_gemm_tuned.json").exists()
    assert f"{INT8_TUNED_ENV}={tmp_path / 'mine.json'}: the runs read and add their INT8 GEMM tuning there" \
        in capsys.readouterr().out
    monkeypatch.delenv(INT8_TUNED_ENV)
    assert job("no_out", None) == [None]


def test_a_grid_arm_without_runs_is_estimated_from_a_sweeps_runs_at_the_grids_shape(tmp_path):
    """A size sweep of the scale that trained an arm at the grid's own shape (the same parameters
    and tokens per step) estimates that arm's grid runs until the grid has runs of its own; a
    sweep run of another shape (llama2's smoke FFN is 96, the sweep point's 128) does not."""
    from lowprec.sweep import load_sweep, sweep_runs

    results = tmp_path / "results"
    path = _sweep_file(tmp_path, results)   # point A: 1 x 32, 2 heads, the smoke models' shape
    runs = sweep_runs(load_sweep(path), str(results))
    _commit(runs["A/gaussws/gpt2/gaussws_b6/s0"], wall=40.0)                        # 4 steps, alone
    _commit(runs["A/int8_fallback/llama2/int8_fallback/s0"], wall=40.0, start=100.0)
    sweeps_at_scale = [str(results / "sweeps" / "sw")]
    tasks, _, _ = pk.missing_tasks("smoke", ["gaussws", "int8_fallback"], str(results))
    by = {t.name: t for t in tasks}
    gws, fb = by["gaussws/gpt2/gaussws_b6/s0"], by["int8_fallback/llama2/int8_fallback/s0"]
    est = Estimator(str(results), "smoke", startup=5.0, shape_runs=sweeps_at_scale)
    got, why = est(gws, 2)
    assert got == pytest.approx(5.0 + 40.0 / 4 * gws.cfg["train"]["max_steps"] * 2 ** est.exponent)
    assert "size sweep sw" in why
    assert est(fb, 1) == (None, "no committed run to estimate from: give --estimate")
    assert Estimator(str(results), "smoke", startup=5.0)(gws, 1)[0] is None   # without the sweep
    # the grid's own runs, once there are some, come first
    _commit(gws.cfg, wall=12.0, start=300.0)
    got, why = Estimator(str(results), "smoke", startup=5.0, shape_runs=sweeps_at_scale)(gws, 1)
    assert got == pytest.approx(5.0 + 12.0) and why == "this arm's committed runs"


def test_a_sweeps_runs_train_in_a_job_and_come_back_under_sweeps(tmp_path, monkeypatch):
    """--sweep: the size sweep's runs whose folders are missing, in the sweep's order, without
    evaluations; a job trains them as a scale's runs and its archive places them under
    sweeps/<sweep>/ of another results root; a stale run is left alone."""
    import yaml

    from lowprec.sweep import sweep_runs, load_sweep

    results = tmp_path / "results"
    path = _sweep_file(tmp_path, results)
    runs = sweep_runs(load_sweep(path), str(results))
    stale = runs["A/gaussws/gpt2/bf16/s0"]
    _commit(dict(stale, seed=7))  # its folder holds another config: stale
    tasks, left = pk.sweep_tasks(str(path), str(results))
    assert [t.name for t in tasks] == [n for n in runs if n != "A/gaussws/gpt2/bf16/s0"] and len(tasks) == 3
    assert left == [f"A/gaussws/gpt2/bf16/s0 (config changed: {lpc.run_status(stale)[1]})"]
    assert all(t.kind == pk.SWEEP and t.evaluations == [] for t in tasks)
    assert tasks[0].config_path(str(results)) == results / "configs" / "sweeps" / "sw" / f"{tasks[0].name}.yaml"
    out = _fake_job(tasks, "smoke", results, tmp_path, monkeypatch)
    assert [t.status for t in tasks] == ["done"] * 3
    assert _members(out / "runs.tar.gz") == sorted(f"sweeps/sw/{t.name}/{f}" for t in tasks
                                                   for f in ("config.yaml", "metrics.csv", "provenance.json"))
    other = tmp_path / "checkout" / "results"
    assert pk.unpack(out / "runs.tar.gz", str(other)) == sorted(f"sweeps/sw/{t.name}" for t in tasks)
    assert (other / "sweeps" / "sw" / tasks[0].name / "provenance.json").is_file()


def test_a_job_counts_the_gpu_memory_that_is_free(monkeypatch):
    """``run`` shares what the device has free when the job starts, not its total (another process's
    memory is not the runs'); ``--gpu-memory-gib`` overrides it; without CUDA nothing is counted."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (10 * 2**30, 80 * 2**30))
    assert pk.gpu_memory(None) == 10
    assert pk.gpu_memory(40.0) == 40.0
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pk.gpu_memory(None) is None

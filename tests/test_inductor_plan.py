"""The kernel plan of a compiled block (lowprec.bench.inductor_plan): Inductor's Triton code for one
block, forward and backward, generated on the CPU without compiling or running a kernel."""

import csv
import json
import os
import re

import pytest

from lowprec.bench import inductor_plan as ip


def test_summarize_counts_kernels_launches_and_extern_calls():
    source = '''
triton_per_fused_amax_0 = async_compile.triton('triton_per_fused_amax_0', \'\'\'
@triton_heuristics.persistent_reduction(inductor_meta={'kernel_num_gb': 1.5e-3, 'x': 1})
@triton.jit
def triton_per_fused_amax_0(in_ptr0, out_ptr0):
    pass
def call(args):
    triton_per_fused_amax_0.run(*args, stream=stream0)
\'\'\', device_str='cuda')
triton_poi_fused_cast_1 = async_compile.triton('triton_poi_fused_cast_1', \'\'\'
@triton_heuristics.pointwise(inductor_meta={'kernel_name': 'triton_poi_fused_cast_1', 'kernel_num_gb': 0.25})
@triton.jit
def triton_poi_fused_cast_1(in_ptr0):
    pass
\'\'\', device_str='cuda')
class Runner:
    def call(self, args):
        triton_per_fused_amax_0.run(buf0, buf1, stream=s)
        triton_poi_fused_cast_1.run(buf1, stream=s)
        triton_poi_fused_cast_1.run(buf2, stream=s)
        extern_kernels._scaled_mm(buf1, buf2, out=buf3)
        torch.ops.lowprec.delayed_step_.default(buf4)
        torch.ops.lowprec.delayed_step_.default(buf5)
'''
    assert ip.summarize(source) == {
        "triton_kernels": 2, "reductions": 1, "pointwise": 1, "launches": 3, "triton_gb": 0.5015,
        "extern_calls": "extern_kernels._scaled_mm:1;torch.ops.lowprec.delayed_step_:2"}
    # without the estimate of one launched kernel, none is summed
    assert ip.summarize(source.replace("'kernel_num_gb': 0.25", ""))["triton_gb"] == ""


def test_delayed_scaling_steady_state_fuses_each_amax_into_its_cast():
    """The plan of FP8 delayed scaling's block: every GEMM an FP8 ``_scaled_mm`` (7 in the forward,
    14 in the backward) with a history update per operand; once the histories hold an amax
    (``QLinear.histories_recorded``) the forward computes each operand's amax in the kernel that
    casts it, where before the casts waited for amax reductions of their own: fewer kernels and
    launches (the reason the recorded path exists; Inductor fuses it on its Triton backend, which
    the C++ backend of a CPU run does not show)."""
    steady = {g: ip.summarize(s) for g, s in ip.plan("fp8_delayed", "llama_100m", tokens=1024).items()}
    first = ip.summarize(ip.plan("fp8_delayed", "llama_100m", tokens=1024, recorded=False)["forward"])
    assert "extern_kernels._scaled_mm:7" in steady["forward"]["extern_calls"]
    assert "extern_kernels._scaled_mm:14" in steady["backward"]["extern_calls"]
    assert "torch.ops.lowprec.delayed_step_:14" in steady["forward"]["extern_calls"]
    assert steady["forward"]["triton_kernels"] < first["triton_kernels"]
    assert steady["forward"]["launches"] < first["launches"]
    assert 0 < steady["forward"]["triton_gb"] < first["triton_gb"]  # a read of each operand fewer


def test_cli_writes_the_plan_with_provenance_and_refuses_what_it_cannot_plan(tmp_path, capsys, monkeypatch):
    # a process whose kernels run under the Triton interpreter (the kernel tests set it): the plan
    # generates kernels without loading them, and leaves the setting as it found it
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    out = tmp_path / "plan.csv"
    assert ip.main(["--shapes", "llama_100m", "--arms", "bf16_compiled", "--tokens", "512", "--out", str(out),
                    "--sources", str(tmp_path / "src")]) == 0
    rows = list(csv.DictReader(out.open()))
    assert [(r["arm"], r["graph"]) for r in rows] == [("bf16_compiled", "forward"), ("bf16_compiled", "backward")]
    assert rows[0]["extern_calls"].startswith("extern_kernels.mm:7") and int(rows[0]["triton_kernels"]) > 0
    assert "extern_kernels.mm:14" in rows[1]["extern_calls"] and rows[0]["tokens"] == "512"
    assert rows[0]["inductor_options"] == ""
    assert (tmp_path / "src" / "llama_100m_bf16_compiled_backward.py").read_text().count("def triton_") > 0
    assert os.environ["TRITON_INTERPRET"] == "1"
    prov = json.loads((tmp_path / "plan.provenance.json").read_text())
    assert "not a GPU measurement" in prov["note"] and prov["argv"]
    for argv, message in ((["--arms", "bf16_eager"], "--arms: unknown"),
                          (["--arms", "bf16_compiled", "--tokens", "0"], "--tokens must be positive"),
                          (["--arms", "bf16_compiled", "--inductor", "no_such_setting=1"], "has no setting")):
        with pytest.raises(SystemExit) as e:
            ip.main([*argv, "--out", str(tmp_path / "x.csv")])
        assert e.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


@pytest.fixture(scope="module")
def fp8_current_plan():
    """FP8 current scaling's block at 512 tokens, planned as it is: one compilation for the tests
    that read it."""
    return ip.plan("fp8_tensorwise_current", "llama_100m", tokens=512)


def test_combo_kernels_and_the_gpus_scheduling(fp8_current_plan):
    """FP8 current scaling's block at 512 tokens planned as it is, under ``--inductor
    combo_kernels=true`` and with loop ordering after fusion off (one test: each plan is a
    compilation).

    Combo kernels: the plan groups the CPU's independent kernels as Inductor groups a GPU's (it
    leaves a CPU's out on its own), so the block shows fewer launches for the same kernels' work
    (the bytes moved are unchanged). Scheduling: Inductor runs loop ordering after fusion for GPU
    nodes only; the plan schedules the CPU's Triton nodes as a GPU's, so that the backward's
    transposed casts fuse with kernels that read the same tensor, as on the H200 (where per-channel
    MoR's fused into its error reductions, ``profiles/llama_1b_mor_channel_48cad10``): fewer
    launches and bytes than with that pass switched off, which a plan without it could not tell
    apart. Inductor's own grouping, settings and device answers come back after the plans.

    And the SwiGLU product that the down projection quantizes is stored once, in bf16, for its amax
    and its cast to read (``gemm.quantize_fp8`` takes the amax of the operand as it is): when both
    read its fp32 widening, Inductor stored that instead, twice the bytes written and read again
    (92 MB of a 1 B block's forward at 4096 tokens)."""
    import torch._inductor.config as inductor_config
    from torch._inductor import scheduler

    from lowprec.bench.e2e_step import SHAPES

    grouping = scheduler.ForeachKernelSchedulerNode.group_algorithm_for_combo_kernels
    sources = {"default": fp8_current_plan,
               **{name: ip.plan("fp8_tensorwise_current", "llama_100m", tokens=512, inductor=opts)
                  for name, opts in (("combo", {"combo_kernels": True}),
                                     ("no_loop_ordering", {"loop_ordering_after_fusion": False}))}}
    plans = {name: {g: ip.summarize(s) for g, s in graphs.items()} for name, graphs in sources.items()}
    ffn = SHAPES["llama_100m"]["model"]["ffn"]
    stored = re.findall(rf"empty_strided_cpu\(\(512, {ffn}\), \({ffn}, 1\), torch\.(\w+)\)", sources["default"]["forward"])
    assert "bfloat16" in stored and "float32" not in stored, stored
    default, combo = plans["default"], plans["combo"]
    for graph in ip.GRAPHS:
        assert combo[graph]["launches"] < default[graph]["launches"], graph
        assert combo[graph]["triton_gb"] == pytest.approx(default[graph]["triton_gb"], rel=1e-3)
        assert combo[graph]["extern_calls"] == default[graph]["extern_calls"]
    on, off = default["backward"], plans["no_loop_ordering"]["backward"]
    assert on["launches"] < off["launches"] and on["triton_gb"] < off["triton_gb"]
    assert scheduler.ForeachKernelSchedulerNode.group_algorithm_for_combo_kernels is grouping
    assert not inductor_config.combo_kernels and not inductor_config.force_disable_caches
    assert not scheduler.is_gpu("cpu") and scheduler.BaseSchedulerNode.is_cpu.__name__ == "is_cpu"
    assert scheduler.Scheduler.create_backend.__name__ == "create_backend"


def test_int8_arms_are_planned_with_their_operators():
    """INT8 fallback's block is planned in its GPU form: the quantize and GEMM operators as nodes
    of the graph (7 GEMMs forward, 14 backward, no BF16 ``mm``), Inductor's kernels around them.
    The GEMMs write what their consumers take, bf16 under autocast (the forward's outputs, the
    input gradients; the weight gradients in the weights' fp32), with the second parts after the
    kernel's main loop; and the setting that put the operators on the CPU is undone after."""
    from lowprec.methods import int8_ops

    before = int8_ops.KERNEL_DEVICES
    sources = ip.plan("int8_fallback_b128", "llama_100m", tokens=512)
    plan = {g: ip.summarize(s) for g, s in sources.items()}
    assert "torch.ops.lowprec.int8_block_mm:7" in plan["forward"]["extern_calls"]
    assert "torch.ops.lowprec.int8_block_mm:14" in plan["backward"]["extern_calls"]
    assert "extern_kernels.mm" not in plan["forward"]["extern_calls"] + plan["backward"]["extern_calls"]
    assert "torch.ops.lowprec.int8_quantize" in plan["forward"]["extern_calls"]
    calls = {g: re.findall(r"int8_block_mm\.default\(.*\], (torch\.\w+), '(\w+)'\)", s) for g, s in sources.items()}
    assert calls["forward"] == [("torch.bfloat16", "tail")] * 7
    assert sorted(calls["backward"]) == [("torch.bfloat16", "tail")] * 7 + [("torch.float32", "tail")] * 7
    assert int8_ops.KERNEL_DEVICES == before


def test_torchao_peer_is_planned_beside_the_suites_arm(fp8_current_plan):
    """torchao's float8 tensorwise training, planned as the suite's arms are: its seven forward and
    fourteen backward FP8 GEMMs, and Inductor's kernels around them, to compare with
    ``fp8_tensorwise_current``'s (the same GEMMs; the bytes its casts move within a few percent)."""
    ours, peer = ({g: ip.summarize(s) for g, s in sources.items()}
                  for sources in (fp8_current_plan, ip.plan("torchao_tensorwise", "llama_100m", tokens=512)))
    for graph, gemms in (("forward", 7), ("backward", 14)):
        assert f"extern_kernels._scaled_mm:{gemms}" in peer[graph]["extern_calls"], peer[graph]
        assert f"extern_kernels._scaled_mm:{gemms}" in ours[graph]["extern_calls"], ours[graph]
    moved = {name: p["forward"]["triton_gb"] + p["backward"]["triton_gb"] for name, p in (("ours", ours), ("peer", peer))}
    assert moved["ours"] < 1.1 * moved["peer"], moved

"""Command-line plumbing shared by the GPU benchmarks (they themselves need CUDA and are run by hand)."""

import json

import pytest

from lowprec.bench.common import inductor_options, parse_int_list, parse_names
from lowprec.errors import error_text


def test_parse_names_keeps_order_and_names_the_unknown(capsys):
    assert parse_names("b", "--arms", " bf16,int8_block, ", ("bf16", "int8_block")) == ["bf16", "int8_block"]
    with pytest.raises(SystemExit) as e:
        parse_names("b", "--arms", "bf16,int9", ("bf16", "int8_block"))
    assert e.value.code == 2 and "--arms: unknown ['int9']" in capsys.readouterr().err


def test_error_text_is_one_line_that_says_what_went_wrong():
    assert error_text(ValueError("bad shape (3, 5)\n  detail")) == "ValueError: bad shape (3, 5)"
    assert error_text(EOFError()) == "EOFError"  # an empty message: no dangling colon, no IndexError
    assert error_text(RuntimeError("\n\n  out of resources  \n")) == "RuntimeError: out of resources"
    assert error_text(RuntimeError("x" * 500), limit=10) == "RuntimeError: " + "x" * 10
    # a Triton compilation error: location, source listing, then the error itself
    msg = "at 12:4:\n    acc = tl.dot(a, b)\n    ^\nValueError('unsupported tensor layout')"
    assert error_text(RuntimeError(msg)) == "RuntimeError: ValueError('unsupported tensor layout')"


def test_parse_int_list_range(capsys):
    assert parse_int_list("b", "--sizes", "2048,4096", range(1, 9000)) == [2048, 4096]
    with pytest.raises(SystemExit):
        parse_int_list("b", "--sizes", "2048,x", None)
    assert "expected comma-separated integers" in capsys.readouterr().err


def _bench_file(path, rows, runs, device):
    import csv
    import json
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    path.with_name(path.stem + ".provenance.json").write_text(json.dumps({"device": device, "runs": runs}))


def test_e2e_merge_from_keeps_each_rows_run_and_baseline(tmp_path, capsys):
    import csv
    import json

    from lowprec.bench import e2e_step as e2e
    old, new, out = tmp_path / "old.csv", tmp_path / "new.csv", tmp_path / "e2e.csv"
    row = {"shape": "llama_1b", "path": "compiled", "tokens_per_s": "100", "ratio_vs_bf16_compiled": "1.000"}
    # an old file without the commit / baseline columns, as written before they existed
    _bench_file(old, [{**row, "arm": "bf16_compiled"}, {**row, "arm": "fp8_hybrid", "tokens_per_s": "90"}],
                [{"commit": "aaa", "time": "t0"}], {"gpu": "H200"})
    _bench_file(new, [{**row, "arm": "bf16_compiled", "tokens_per_s": "110", "baseline_tokens_per_s": "110",
                       "commit": "bbb"},
                      {**row, "arm": "fp8_hybrid", "tokens_per_s": "130", "baseline_tokens_per_s": "110",
                       "commit": "bbb"}],
                [{"commit": "bbb", "time": "t1", "device": {"gpu": "H200"}}], {"gpu": "H200"})
    e2e.main(["--out", str(out), "--merge-from", str(old)])
    e2e.main(["--out", str(out), "--merge-from", str(new), str(new)])  # twice: its run is listed once
    rows = {r["arm"]: r for r in csv.DictReader(out.open())}
    assert rows["fp8_hybrid"]["tokens_per_s"] == "130" and rows["fp8_hybrid"]["commit"] == "bbb"
    prov = json.loads((tmp_path / "e2e.provenance.json").read_text())
    assert [r["commit"] for r in prov["runs"]] == ["aaa", "bbb"] and prov["runs"][0]["device"] == {"gpu": "H200"}
    _bench_file(old, [{**row, "arm": "torchao_rowwise", "tokens_per_s": "95"}, {**row, "arm": "bf16_compiled"}],
                [{"commit": "aaa", "time": "t0"}], {"gpu": "H200"})
    e2e.main(["--out", str(out), "--merge-from", str(old)])
    rows = {r["arm"]: r for r in csv.DictReader(out.open())}
    # the old row keeps its own run and baseline
    assert rows["torchao_rowwise"]["commit"] == "aaa" and rows["torchao_rowwise"]["baseline_tokens_per_s"] == "100"
    with pytest.raises(SystemExit) as e:
        e2e.main(["--out", str(out), "--merge-from", str(tmp_path / "missing.csv")])
    assert e.value.code == 2 and "missing.csv does not exist" in capsys.readouterr().err


def test_e2e_counts_low_precision_gemms_by_operator_or_by_kernel():
    """Names from H200 profiles: a step replayed as CUDA graphs has kernels only, and Inductor's
    fused kernels may carry _scaled_mm in their names without being GEMMs."""
    from lowprec.bench.e2e_step import count_lowp

    eager = [("aten::_scaled_mm", False), ("nvjet_sm90_qqtst_128x160_128x5_1x2_h_bz_coopA_algo2_TNT", True),
             ("_block_scaled_gemm_kernel", True), ("_gemm_kernel", True),
             ("aten::mm", False), ("nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN", True)]
    # cuBLAS's FP8 GEMM by its operator, the Triton GEMMs by their kernels (a triton_op leaves no operator)
    assert count_lowp(eager) == 3
    graphed = [("nvjet_sm90_qqtst_128x160_128x5_1x2_h_bz_coopA_algo2_TNT", True), ("_gemm_kernel", True),
               ("triton_poi_fused__scaled_mm__to_copy_abs_e4m3_clamp_0", True),
               ("nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN", True), ("aten::_scaled_mm", False)]
    assert count_lowp(graphed, by_kernel=True) == 2
    assert count_lowp([("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", True)], by_kernel=True) == 0  # BF16


def test_e2e_inductor_options_are_parsed_checked_and_kept_out_of_the_default_file(capsys):
    from lowprec.bench import e2e_step as e2e
    got = inductor_options("e2e_step", ["emulate_precision_casts=false", "max_autotune=True",
                                        "coordinate_descent_tuning=1"])
    assert got == {"emulate_precision_casts": False, "max_autotune": True, "coordinate_descent_tuning": 1}
    for bad, says in (("nosuch_setting=1", "has no setting 'nosuch_setting'"),
                      ("emulate_precision_casts", "KEY=VALUE")):
        with pytest.raises(SystemExit) as exc:
            inductor_options("e2e_step", [bad])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and says in err and err.startswith("e2e_step: ")
    with pytest.raises(SystemExit) as exc:  # the suite's rows keep the suite's numerics
        e2e.main(["--inductor", "emulate_precision_casts=false"])
    assert exc.value.code == 2 and "its own --out" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        e2e.main(["--inductor-arms-only", "--out", "x.csv"])
    assert exc.value.code == 2 and "give the settings with --inductor" in capsys.readouterr().err
    # --inductor-arms-only: the baseline compiles at the defaults, each row names its own settings
    args = e2e._parse(["--inductor", "combo_kernels=true", "--inductor-arms-only", "--out", "x.csv"])
    args.inductor_options = inductor_options("e2e_step", args.inductor)
    assert e2e.arm_inductor_options(e2e.BASELINE, args) == {}
    assert e2e.arm_inductor_options("mor_block", args) == {"combo_kernels": True}
    args.inductor_arms_only = False
    assert e2e.arm_inductor_options(e2e.BASELINE, args) == {"combo_kernels": True}
    measured = [{"shape": "llama_100m", "arm": a, "path": "compiled", "reps": [100.0], "peak_mem_gib": 1.0,
                 "lowp_gemms_per_step": 0, "batch": 1, "seq": 10, "n_params": 1, "warmup_s": 1.0,
                 "inductor_options": o} for a, o in ((e2e.BASELINE, {}), ("mor_block", {"combo_kernels": True}))]
    rows = e2e._rows(measured, {"llama_100m": 100.0}, args, "c")
    assert [r["inductor_options"] for r in rows] == ["", "combo_kernels=True"]


def test_e2e_runs_under_a_switch_stay_out_of_the_default_file(tmp_path, monkeypatch, capsys):
    """A LOWPREC_* switch (a kernel on that is off by default) is named in the run's provenance and
    keeps the run's rows out of the default CSV, written there directly or merged."""
    from lowprec import provenance
    from lowprec.bench import e2e_step as e2e
    monkeypatch.setenv("LOWPREC_GIT_COMMIT", "0" * 40)  # names the code: not a switch
    monkeypatch.setenv("LOWPREC_TEST_TIMEOUT", "120")  # bounds the test harness: not a switch
    monkeypatch.setenv("LOWPREC_QUANT_KERNELS", "0")
    assert provenance.switches() == {"LOWPREC_QUANT_KERNELS": "0"}
    with pytest.raises(SystemExit) as exc:
        e2e.main(["--arms", "mor_block"])
    assert exc.value.code == 2 and "LOWPREC_QUANT_KERNELS=0: write the run to its own --out" in capsys.readouterr().err
    src = tmp_path / "switched.csv"
    src.write_text("shape,arm,tokens_per_s\nllama_1b,mor_block,100\n")
    src.with_suffix(".provenance.json").write_text('{"runs": [{"commit": "x", "switches": {"LOWPREC_QUANT_KERNELS": "0"}}]}')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        e2e.main(["--out", e2e.DEFAULT_OUT, "--merge-from", str(src)])
    assert exc.value.code == 2 and "stay out of" in capsys.readouterr().err
    assert not (tmp_path / e2e.DEFAULT_OUT).exists()


def test_e2e_arms_build_and_hardware_arms_have_a_fast_plan():
    """Every suite arm of the end-to-end benchmark is a method config that builds; those it counts
    as running on low-precision hardware have a fast plan (else the run would fail on the GPU)."""
    from lowprec.bench import e2e_step as e2e
    from lowprec.gemm import FastPlan
    from lowprec.recipes import recipe_from_config

    for arm, method in e2e.METHODS.items():
        recipe = recipe_from_config(dict(method))
        if arm in e2e.HARDWARE_ARMS:
            assert FastPlan.for_recipe(recipe) is not None, arm
    assert set(e2e.HARDWARE_ARMS) <= set(e2e.ARMS)



def test_e2e_profile_sources_are_found_in_inductor_cache_by_full_name(tmp_path, monkeypatch):
    """The profile's kernel sources come from the cache by the kernel's exact name, the kernel alone
    (not the compiled module around it), each once; a kernel whose name extends another's is not
    taken for it, and a missing one says so."""
    from lowprec.bench.e2e_step import generated_sources

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / "k1.py").write_text("@triton.jit\ndef triton_poi_fused_add_10(x):\n    return 1\n")
    (tmp_path / "ab" / "module.py").write_text(
        "triton_poi_fused_add_1 = async_compile.triton('triton_poi_fused_add_1', \'\'\'\n"
        "@triton_heuristics.pointwise(size_hints={'x': 8})\n@triton.jit\ndef triton_poi_fused_add_1(x):\n"
        "    return 2\n\'\'\', device_str='cuda')\nother_code = 3\n")
    text = generated_sources([("triton_poi_fused_add_1", 2.5, 16), ("triton_poi_fused_add_1", 0.1, 16),
                              ("triton_red_fused_sum_3", 1.0, 4)])
    assert text.count("triton_poi_fused_add_1:") == 1
    assert "# triton_poi_fused_add_1: 2.50 ms in 16 calls per step\n@triton_heuristics.pointwise" in text
    assert "return 2" in text and "return 1" not in text and "other_code" not in text
    assert "# triton_red_fused_sum_3: 1.00 ms in 4 calls per step\n# (source not found)" in text


def test_fresh_compilation_keeps_every_case_compiled(monkeypatch):
    """Cases that compile the same code each get their own graph: without the reset the ninth
    would pass Dynamo's recompile limit and run eagerly (no graph), unannounced."""
    import torch
    from torch._dynamo.utils import counters

    from lowprec.bench.common import fresh_compilation

    monkeypatch.setattr(torch._dynamo.config, "fail_on_recompile_limit_hit", False)  # restored after

    def case(k):
        def step(x):
            return x * k  # the closure's constant: a guard that fails for every other case
        return step

    try:
        for k in range(12):
            fresh_compilation()
            counters.clear()
            assert torch.equal(torch.compile(case(k), backend="eager")(torch.ones(2)), torch.full((2,), float(k)))
            assert counters["stats"]["unique_graphs"] == 1, k
        assert torch._dynamo.config.fail_on_recompile_limit_hit
        torch._dynamo.reset()
        compiled = [torch.compile(case(k), backend="eager") for k in range(12)]
        counters.clear()
        for f in compiled:
            f(torch.ones(2))
        assert counters["stats"]["unique_graphs"] < 12  # what the reset prevents
    finally:
        torch._dynamo.reset()


def test_e2e_arms_record_the_int8_configurations_they_tuned(monkeypatch):
    """Each arm starts the INT8 GEMM's tuning afresh and its provenance lists the configuration
    chosen for each shape class it met (label and time), none for an arm that met none."""
    from lowprec.bench import e2e_step
    from lowprec.kernels import int8_fallback_tuning as kt

    monkeypatch.setattr(kt, "_TUNED", {})
    monkeypatch.setattr(kt, "_TUNE_LOG", [])
    key = ("main", 16384, 2048, 2048, 32, 32, 32, True, True, False)
    kt.tuned_config(key, lambda: (kt.GemmConfig(block_n=64, tma=True, pipelined=True), 0.4381))
    assert e2e_step.int8_tuned() == ["16384x2048x2048 group 32 rows 32/32: 128x64_kg1_w8_s3_gm8_tma_pipe 0.438 ms"]
    e2e_step.forget_int8_tuning()
    assert e2e_step.int8_tuned() == [] and kt.tuning_log() == []
    calls = []
    kt.tuned_config(key, lambda: calls.append(1) or (kt.GemmConfig(), 1.0))
    assert calls == [1]  # tuned again


def test_kernel_digest_follows_the_code_a_kernel_runs_not_its_comments(tmp_path):
    """The tuning records' kernel digest (``kernels._common.code_digest``): a docstring, a comment or
    a change to a jit function the kernel never calls leaves it as it was; a change to a helper it
    calls, or to a constant that helper reads, changes it. The INT8 GEMM's digest is computed."""
    import importlib.util

    from lowprec.kernels import int8_fallback_tuning as kt
    from lowprec.kernels._common import code_digest

    base = ("import triton\nimport triton.language as tl\nSCALE = 2\n\n\n"
            "@triton.jit\ndef _helper(x):\n    return x * SCALE\n\n\n"
            "@triton.jit\ndef _other(x):\n    return x - 1\n\n\n"
            "@triton.jit\ndef kernel(p):\n    tl.store(p, _helper(tl.load(p)))\n")
    variants = {"base": base,
                "comments": base.replace("def _helper(x):\n", 'def _helper(x):\n    """Doubles."""\n    # twice\n'),
                "unrelated": base.replace("return x - 1", "return x - 2"),
                "helper": base.replace("return x * SCALE", "return x * SCALE + 1"),
                "constant": base.replace("SCALE = 2", "SCALE = 3")}
    digests = {}
    for name, src in variants.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "mod.py").write_text(src)
        spec = importlib.util.spec_from_file_location(f"digest_{name}", folder / "mod.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        digests[name] = code_digest(mod.kernel, package=folder)
    assert digests["base"] == digests["comments"] == digests["unrelated"]
    assert len({digests["base"], digests["helper"], digests["constant"]}) == 3
    assert len(kt._kernel_sources()) == 16


def test_int8_tuning_takes_the_recorded_choices_of_its_gpu_triton_and_kernels(tmp_path, monkeypatch):
    """LOWPREC_INT8_TUNED: a shape class recorded for this GPU model, Triton and kernel sources takes
    its recorded configuration without tuning, another class tunes and is added to the file (the
    first kept), and a record of another GPU or other kernel sources is ignored; without the
    variable the committed file is read, with "none" no file; a file that holds no records is
    named."""
    from lowprec.kernels import int8_fallback_tuning as kt

    for name, empty in (("_TUNED", {}), ("_TUNE_LOG", []), ("_RECORDED", {})):
        monkeypatch.setattr(kt, name, empty)
    monkeypatch.setattr(kt, "gpu_name", lambda device: "H100 test")
    path, calls = tmp_path / "tuned.json", []
    key = ("main", 16384, 2048, 2048, 128, 128, 128, True, True, False)
    other = ("main", 16384, 8192, 2048, 128, 128, 128, True, True, False)
    chosen = kt.GemmConfig(64, 128, 1, 4, 3, magic=False)

    def tune(tag, cfg=kt.GemmConfig(), ms=1.0):
        return lambda: calls.append(tag) or (cfg, ms)
    monkeypatch.setattr(kt, "COMMITTED_RECORDS", tmp_path / "committed.json")  # absent: none read
    monkeypatch.delenv(kt.TUNED_ENV, raising=False)
    assert kt.records_file() is None
    assert kt.tuned_config(key, tune("first", chosen, 0.19), "cuda") == chosen  # no file: tunes
    assert kt.record_tuning(path, "H100 test") == 1
    kt.forget_tuning()
    monkeypatch.setenv(kt.TUNED_ENV, str(path))
    assert kt.named_records_file() == path  # where the benchmark adds what it tunes
    assert kt.tuned_config(key, tune("again"), "cuda") == chosen
    kt.tuned_config(other, tune("other", kt.GemmConfig(block_n=64), 0.5), "cuda")
    assert calls == ["first", "other"]
    assert [(r["config"], r["recorded"]) for r in kt.tuned_configs()] == [
        (chosen.label(), True), (kt.GemmConfig(block_n=64).label(), False)]
    assert kt.record_tuning(path, "H100 test") == 1  # the tuned class only
    records = json.loads(path.read_text())["records"]
    assert {tuple(r["key"]) for r in records} == {key, other} and {r["gpu"] for r in records} == {"H100 test"}
    kt.forget_tuning()
    assert kt.tuned_config(key, tune("recorded"), "cuda") == chosen and calls[-1] == "other"
    for name, patched in (("gpu_name", lambda device: "H200 test"), ("_kernel_sources", lambda: "changed")):
        with monkeypatch.context() as m:
            m.setattr(kt, name, patched)
            kt.forget_tuning()
            kt.tuned_config(key, tune(name), "cuda")
        assert calls[-1] == name
    # the committed file is read where no file is named; "none" reads none
    monkeypatch.delenv(kt.TUNED_ENV)
    path.replace(tmp_path / "committed.json")
    kt.forget_tuning()
    assert kt.records_file() == tmp_path / "committed.json"
    assert kt.tuned_config(key, tune("committed"), "cuda") == chosen and calls[-1] == "_kernel_sources"
    monkeypatch.setenv(kt.TUNED_ENV, "none")
    kt.forget_tuning()
    assert kt.records_file() is None and kt.named_records_file() is None
    assert kt.tuned_config(key, tune("none"), "cuda") == kt.GemmConfig()
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="LOWPREC_INT8_TUNED=.*tuned.json: not a file of recorded"):
        kt.recorded_configs(path, "H100 test")


def test_a_recorded_int8_configuration_whose_product_is_wrong_is_tuned_again(tmp_path, monkeypatch):
    """tuned_config's check: a recorded configuration is taken where its product is right; where it
    is wrong, the record is logged as such and the class tuned instead, and the named file records
    the new choice in its place."""
    from lowprec.kernels import int8_fallback_tuning as kt

    for name, empty in (("_TUNED", {}), ("_TUNE_LOG", []), ("_RECORDED", {})):
        monkeypatch.setattr(kt, name, empty)
    monkeypatch.setattr(kt, "gpu_name", lambda device: "H100 test")
    path = tmp_path / "tuned.json"
    monkeypatch.setenv(kt.TUNED_ENV, str(path))
    key = ("main", 32768, 2048, 1024, 32, 32, 32, True, False, False)
    recorded, retuned = kt.GemmConfig(64, 128, 4, 4, 4, magic=False), kt.GemmConfig(128, 64, 1, 4, 3)
    kt.tuned_config(key, lambda: (recorded, 0.39), "cuda")
    assert kt.record_tuning(path, "H100 test") == 1
    checked = []
    kt.forget_tuning()
    assert kt.tuned_config(key, lambda: pytest.fail("tuned"), "cuda", check=lambda cfg: checked.append(cfg)) == recorded
    assert checked == [recorded]
    kt.forget_tuning()
    got = kt.tuned_config(key, lambda: (retuned, 0.45), "cuda", check=lambda cfg: "max error 3e+05 of 3e+05")
    assert got == retuned
    (row,) = [r for r in kt.tuning_log() if r["error"]]
    assert row["config"] == recorded.label() and row["error"] == f"recorded in {path}, wrong output: max error 3e+05 of 3e+05"
    assert [r["config"] for r in json.loads(path.read_text())["records"]] == [retuned.label()]


def test_budget_allows_a_step_only_if_its_need_fits(monkeypatch):
    """Budget.allows(what, need): yes while the elapsed time plus ``need`` fits, else no, with `what`
    recorded; no limit allows everything; the end-to-end benchmark takes --budget-s."""
    from lowprec.bench import common
    from lowprec.bench.e2e_step import _parse

    clock = iter([100.0, 130.0, 130.0, 130.0, 200.0])
    monkeypatch.setattr(common.time, "monotonic", lambda: next(clock))
    budget = common.Budget(60.0)  # starts at 100
    assert budget.allows("a", need=25.0) and not budget.allows("b", need=31.0) and budget.skipped == ["b"]
    assert budget.allows("c")  # nothing more needed: 30 s spent of 60
    assert common.Budget(None).allows("d", need=1e9)
    assert _parse(["--budget-s", "540"]).budget_s == 540.0 and _parse([]).budget_s is None


def test_e2e_budget_leaves_out_the_arms_that_do_not_fit_and_keeps_the_closing_baseline(tmp_path, monkeypatch):
    """With --budget-s the end-to-end run starts an arm only while, with the closing baseline, it
    fits as long as the longest arm so far: the arms left out are in the provenance's run, the
    baseline is measured at both ends and the CSV holds what ran (measure stood in for: no GPU)."""
    import csv
    import json

    from lowprec.bench import common
    from lowprec.bench import e2e_step as e2e

    now = [0.0]
    took = {"bf16_compiled": 20.0, "fp8_hybrid": 100.0, "mor_tensor": 30.0, "gaussws": 30.0}
    measured = []

    def fake_measure(arm, shape, args):
        now[0] += took[arm]
        measured.append(arm)
        return {"shape": shape, "arm": arm, "path": "compiled", "reps": [1000.0 if arm == e2e.BASELINE else 1200.0],
                "inductor_options": {}, "fallback_ratio_reps": [], "mor_e4m3_share_reps": [], "peak_mem_gib": 1.0, "held_before_gib": 0.25,
                "lowp_gemms_per_step": 336, "batch": 8, "seq": 2048, "n_params": 1, "warmup_s": 1.0,
                "int8_tuned": []}
    monkeypatch.setattr(e2e, "measure", fake_measure)
    monkeypatch.setattr(e2e, "require_cuda", lambda prog: None)
    monkeypatch.setattr(common.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(e2e.time, "monotonic", lambda: now[0])
    out = tmp_path / "e2e.csv"
    # 20 (baseline) + 100 (fp8_hybrid); mor_tensor would need 100 + 20 more from 120: 240 > 200
    assert e2e.main(["--shapes", "llama_1b", "--arms", "fp8_hybrid,mor_tensor,gaussws", "--budget-s", "200",
                     "--out", str(out)]) == 0
    assert measured == ["bf16_compiled", "fp8_hybrid", "bf16_compiled"]
    rows = {r["arm"]: r for r in csv.DictReader(out.open())}
    assert set(rows) == {"bf16_compiled", "fp8_hybrid"} and rows["fp8_hybrid"]["ratio_vs_bf16_compiled"] == "1.200"
    run = json.loads((tmp_path / "e2e.provenance.json").read_text())["runs"][-1]
    assert run["skipped"] == ["llama_1b/mor_tensor", "llama_1b/gaussws"]
    assert run["shapes"]["llama_1b"]["held_before_gib"] == {"bf16_compiled": 0.25, "fp8_hybrid": 0.25}


def test_e2e_fallback_share_per_repeat_reads_the_layers_counts():
    """The benchmark's per-repeat fallback share: the blocks that fell back over the blocks
    quantized between two readings of every INT8 fallback layer's counts (a fixed budget of a
    quarter of the blocks gives a quarter); none for a model without fallback layers."""
    import torch

    from lowprec.bench.e2e_step import fallback_blocks, interval_shares
    from lowprec.linear import convert
    from lowprec.models import build_model
    from lowprec.recipes import recipe_from_config

    shape = {"name": "t", "family": "llama", "layers": 1, "d_model": 64, "heads": 2, "kv_heads": 2, "ffn": 128,
             "max_seq_len": 64, "tie_embeddings": False}
    torch.manual_seed(0)
    plain = build_model(shape, 256)
    assert fallback_blocks(plain) is None and interval_shares([None, None]) == []
    model = build_model(shape, 256)
    convert(model, recipe_from_config({"recipe": "int8_fallback", "rule": "topk", "rho": 0.25}))
    model.train()
    x = torch.randint(0, 256, (2, 64))
    totals = [fallback_blocks(model)]
    for steps in (1, 2):
        for _ in range(steps):
            model(input_ids=x, labels=x, use_cache=False).loss.backward()
        totals.append(fallback_blocks(model))
    assert totals[0] == (0, 0) and totals[2][0] == 3 * totals[1][0] > 0
    assert interval_shares(totals) == [0.25, 0.25]
    assert interval_shares([(0, 0), (0, 0), (8, 1)]) == [0.0, 0.125]


def test_e2e_names_an_arm_whose_repeats_spread():
    """Repeats more than 10 % apart make an arm unsteady (its median stands, the run says so)."""
    from lowprec.bench.e2e_step import unsteady

    assert unsteady([422140.0, 174149.0]) and unsteady([100.0, 100.0, 111.0])
    assert not unsteady([100.0, 109.0, 105.0]) and not unsteady([500.0]) and not unsteady([])


def test_e2e_mor_share_per_repeat_reads_the_layers_decisions():
    """The benchmark's per-repeat MoR E4M3 share: calls that chose E4M3 over the calls between two
    readings of every MoR layer's decision counts. A threshold of 0 sends every operand to BF16
    (share 0), the default keeps random data in E4M3 (share 1); none for a model without MoR."""
    import torch

    from lowprec.bench.e2e_step import interval_shares, mor_choices
    from lowprec.linear import convert
    from lowprec.models import build_model
    from lowprec.recipes import recipe_from_config

    shape = {"name": "t", "family": "llama", "layers": 1, "d_model": 64, "heads": 2, "kv_heads": 2, "ffn": 128,
             "max_seq_len": 64, "tie_embeddings": False}
    torch.manual_seed(0)
    assert mor_choices(build_model(shape, 256)) is None
    x = torch.randint(0, 256, (2, 64))
    shares = {}
    for threshold in (0.0, None):
        model = build_model(shape, 256)
        method = {"recipe": "mor", "partition": "tensor", **({} if threshold is None else {"threshold": threshold})}
        convert(model, recipe_from_config(method))
        model.train()
        totals = [mor_choices(model)]
        model(input_ids=x, labels=x, use_cache=False).loss.backward()
        totals.append(mor_choices(model))
        # seven linears a block, three GEMMs of two operands each
        assert totals[0] == (0, totals[0][1]) and totals[1][0] == 7 * 3 * 2
        shares[threshold] = interval_shares(totals)
    assert shares == {0.0: [0.0], None: [1.0]}


def test_cudagraph_timer_is_chosen_and_named(monkeypatch):
    """--cudagraph times with do_bench_cudagraph (the GPU's time, not the host's launches) and the
    provenance's timer says so; without it, do_bench."""
    import argparse

    import triton.testing

    from lowprec.bench.common import add_do_bench_args, do_bench_median
    p = argparse.ArgumentParser()
    add_do_bench_args(p)
    assert p.parse_args(["--cudagraph"]).cudagraph and not p.parse_args([]).cudagraph
    calls = []
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, **kw: calls.append(("do_bench", kw)) or 1.0)
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", lambda fn, **kw: calls.append(("graph", kw)) or 2.0)
    for graphed, want, ms in ((False, "do_bench", 1.0), (True, "graph", 2.0)):
        bench, timer = do_bench_median(10, 50, graphed)
        assert bench(lambda: None) == ms and calls[-1][0] == want and calls[-1][1]["rep"] == 50
        assert ("CUDA graph" in timer) == graphed


def test_mor_linear_fast_rows_compare_with_the_fast_fp8_row():
    """The compiled training path's rows (step time only) get their ratios and deciding cost from
    FP8 current scaling on the same path, and the layer arms keep theirs from the layer FP8 row."""
    from lowprec.bench.mor_linear import _finish, _line

    rows, flops = [], 3 * 2 * 8192 * 8192 * 8192

    def add(**row):
        row.update(tokens=8192, hidden=8192)
        rows.append(row)
        _finish(row, flops, rows)
        _line(row)  # prints with any subset of the timed columns
        return row

    add(method="bf16", step_ms=4.0, quant_ms=0.0, gemm_ms=4.0, fp8_gemms=0)
    add(method="fp8_current", step_ms=3.2, quant_ms=1.2, gemm_ms=2.0, fp8_gemms=3)
    layer = add(method="mor_tensor", step_ms=4.8, quant_ms=2.4, gemm_ms=2.4, fp8_gemms=3)
    add(method="fp8_current_fast", step_ms=2.5)
    fast = add(method="mor_tensor_fast", step_ms=2.75)
    assert (layer["vs_fp8_current"], layer["decide_extra_ms"], layer["quant_share"]) == ("0.667", "1.2000", "0.5000")
    assert (fast["vs_fp8_current"], fast["speedup_vs_bf16"]) == ("0.909", "1.455")
    assert (fast["decide_extra_ms"], fast["decide_extra_share"]) == ("0.2500", "0.0909")
    assert "quant_share" not in fast and fast["step_ms"] == "2.7500"


@pytest.mark.parametrize("method", [{"recipe": "fp8_tensorwise_current"}, {"recipe": "mor", "partition": "tensor"}])
def test_mor_linear_fast_arm_times_all_three_gemms(method, monkeypatch):
    """The compiled training path's arm runs what the other arms time: forward, input gradient and
    weight gradient, three low-precision GEMMs a step (run eagerly on the CPU here)."""
    import torch

    import lowprec.bench.mor_linear_arms as arms
    import lowprec.gemm as gemm
    import lowprec.linear as lin
    import lowprec.methods.mor_fast as mor_fast
    monkeypatch.setattr(arms, "DEVICE", "cpu")
    monkeypatch.setattr(lin, "FAST_PATH", "all")
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)
    calls = []
    real = gemm.operand_mm
    for module in (gemm, mor_fast):  # the FP8 product of FP8 recipes, and of MoR's GEMM before its fix-up
        monkeypatch.setattr(module, "operand_mm", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    layer = arms.FastPathLinear(method, 64)
    x, dy = torch.randn(32, 64).bfloat16(), torch.randn(32, 64).bfloat16()
    layer.step(x, None, dy)
    assert len(calls) == 3 and layer.model[0].weight.grad is not None


def test_inductor_kernel_reads_a_profiles_kernels_and_makes_its_variants(tmp_path, capsys):
    """The kernels of a committed profile are found with their sizes, call counts and stores; each
    variant changes only the part it names; options are checked before any GPU work."""
    from pathlib import Path

    from lowprec.bench import inductor_kernel as ik
    kernels = ik.read_kernels(Path(ik.DEFAULT_KERNELS), "triton_red")
    assert len(kernels) == 4 and all(k.xnumel == 16384 and not k.fp_fusion for k in kernels)
    first = kernels[0]
    assert first.calls == 32 and first.r0_numel == 5632
    assert first.store_sizes() == {"out_ptr0": 16384 * 5632, "out_ptr3": 16384 * 5632, "out_ptr1": 16384,
                                   "out_ptr2": 16384}
    approx, no_store = first.variant_source("approx_div"), first.variant_source("no_transposed_store")
    assert "div_rn" in first.source and "div_rn" not in approx and "(tmp16 / tmp17)" in approx
    assert "out_ptr3" not in no_store.split("def ", 1)[1].split(":", 1)[1] and "out_ptr0 +" in no_store
    assert kernels[2].variant_source("no_transposed_store") is None  # it has none
    for argv, msg in ((["--variants", "fast"], "unknown ['fast']"), (["--configs", "4x512"], "is not XBLOCK"),
                      (["--kernels", str(tmp_path / "none.txt")], "no file"), (["--match", "nothing"], "no reduction")):
        with pytest.raises(SystemExit) as exc:
            ik.main(["--out", str(tmp_path / "x.csv"), *argv])
        assert exc.value.code == 2 and msg in capsys.readouterr().err


def test_kernel_sass_options_are_checked_before_compiling(tmp_path, capsys):
    """One scale-block height per group, and machine code only without the interpreter: exit 2
    naming the option, nothing written."""
    from lowprec.bench import kernel_sass

    out = tmp_path / "sass.csv"
    with pytest.raises(SystemExit) as e:
        kernel_sass.main(["--groups", "32,128", "--block-rows", "32", "--out", str(out)])
    assert e.value.code == 2 and "--block-rows: one per group (2), got 1" in capsys.readouterr().err
    assert not out.exists()


def test_kernel_sass_finds_the_longest_loop_and_counts_its_classes():
    """The hot loop is the longest span from a backward branch's target to the branch (an inner
    loop inside it counts with it); predicated and uniform instructions are classed by opcode."""
    from lowprec.bench.kernel_sass import Instruction, counts, hot_loop

    code = [(0x00, "MOV", "R1, R2"), (0x10, "LDG.E", "R3, desc[UR4][R4.64]"), (0x20, "FFMA", "R5, R3, R6, R5"),
            (0x30, "BRA", "0x20"), (0x40, "IGMMA.64x128x32", "gdesc[UR8]"), (0x50, "UIADD3", "UR4, UR4, 0x1, URZ"),
            (0x60, "LDL", "R7, [R1]"), (0x70, "FMUL", "R8, R7, R7"), (0x80, "BRA", "0x10"), (0x90, "EXIT", "")]
    loop = hot_loop([Instruction(*c) for c in code])
    assert [i.address for i in loop] == list(range(0x10, 0x90, 0x10))
    assert counts(loop) == {"fp32": 2, "fmul": 1, "int": 1, "moves": 0, "global_loads": 1, "spills": 1, "mma": 1,
                            "conversions": 0, "global_stores": 0, "shared_accesses": 0, "barriers": 0}
    assert hot_loop([Instruction(*c) for c in code[:3]]) == []


def test_kernel_sass_jobs_each_compile_their_own_configuration(monkeypatch):
    """The table's rows are one per candidate and group, each compiled with its own configuration
    (the jobs bind their arguments), and the mor_cast rows one per layout and variant."""
    import argparse

    from lowprec.bench import kernel_sass as ks

    monkeypatch.setattr(ks, "int8_gemm_row", lambda cfg, group, rows, variant: (cfg.label(), group, rows, variant))
    monkeypatch.setattr(ks, "mor_cast_row", lambda lay, native, approx, own_t=False: (lay, native, approx, own_t))
    args = argparse.Namespace(groups="32,128", block_rows="32,128", variant="first_parts")
    got = [job() for job in ks._int8_gemm_rows("kernel_sass", args, ["_pipe"])]
    assert len(set(got)) == len(got) > 2 and {g for _, g, _, _ in got} == {32, 128}
    assert all("_pipe" in label and rows == g and v == "first_parts" for label, g, rows, v in got)
    # the tail variant: the same Triton candidates, none of the Gluon kernel's (it takes no second part)
    args.variant = "tail_bf16"
    tail = [job() for job in ks._int8_gemm_rows("kernel_sass", args, [])]
    assert tail and all(v == "tail_bf16" and "async" not in label for label, _, _, v in tail)
    args.variant = "fused"
    with pytest.raises(SystemExit):
        ks._int8_gemm_rows("kernel_sass", args, [])
    cast = [job() for job in ks._mor_cast_rows("kernel_sass", None, ["both"])]
    assert sorted(cast) == sorted(("both", n, a, False) for n in (True, False) for a in (True, False))
    own = [job() for job in ks._mor_cast_rows("kernel_sass", None, ["both_own_t"])]
    assert sorted(own) == sorted(("both", n, a, True) for n in (True, False) for a in (True, False))


def test_kernel_sass_writes_its_table_and_provenance(tmp_path):
    """The command end to end, in a process without the interpreter: one row of each of the
    sub-tensor passes compiled for sm_90, written with the table's columns and the provenance
    beside it. The errors pass stays under 115 instructions an element (113.8 with Triton 3.9; 115.5
    while its zero's term was selected after the division, its flags held across it)."""
    import csv
    import json

    from conftest import compiled_probe
    from lowprec.bench.kernel_sass import FIELDS

    values, errors = tmp_path / "values.csv", tmp_path / "errors.csv"
    compiled_probe(f"""
import sys
from lowprec.bench import kernel_sass as ks
if ks.nvidia_tool("cuobjdump") is None:
    print("SKIP"); sys.exit()
ks.main(["--kernel", "mor_sub_values", "--configs", "bf16", "--out", {str(values)!r}])
ks.main(["--kernel", "mor_sub_errors", "--configs", "need", "--out", {str(errors)!r}])
""", "this Triton ships no cuobjdump")
    rows = list(csv.DictReader(values.open()))
    assert len(rows) == 1 and tuple(rows[0]) == FIELDS["mor_sub_values"] and rows[0]["choice"] == "bf16"
    assert not rows[0]["error"] and float(rows[0]["per_element"]) > 0 and int(rows[0]["loop_instructions"]) > 0
    prov = json.loads((tmp_path / "values.provenance.json").read_text())
    assert prov["kernel"].endswith("_values_kernel") and "sm_90" in prov["target"]
    rows = list(csv.DictReader(errors.open()))
    assert len(rows) == 1 and tuple(rows[0]) == FIELDS["mor_sub_errors"] and rows[0]["need"] == "True"
    assert not rows[0]["error"] and 0 < float(rows[0]["per_element"]) < 115, rows[0]
    assert json.loads((tmp_path / "errors.provenance.json").read_text())["kernel"].endswith("_errors_kernel")


def test_mor_fixup_configurations_are_parsed_and_bad_ones_named(capsys):
    """The fix-up benchmark's launch configurations: tiles, warps, stages, an optional register cap,
    programs an SM and the pointer loop; anything else exits 2 naming the item, before CUDA is asked
    for. Each GEMM of a linear layer hands the fix-up the layout the fast path does."""
    import torch
    from lowprec.bench import mor_fixup as mf
    from lowprec.kernels.mor_gemm import GemmConfig

    assert mf.parse_config("default") is None
    assert mf.parse_config("128x256x64w8s3") == GemmConfig(128, 256, 64, 64, 8, 3)
    assert mf.parse_config("128x128x64w8s4r128p1-notma") == GemmConfig(128, 128, 64, 64, 8, 4, 128, 1, tma=False)
    with pytest.raises(SystemExit) as exc:
        mf.main(["--out", "x.csv", "--configs", "default,128x128w8"])
    assert exc.value.code == 2 and "'128x128w8' is not BMxBNxBKwWsS" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        mf.main(["--out", "x.csv", "--layouts", "fprop,bprop"])
    assert exc.value.code == 2 and "bprop" in capsys.readouterr().err
    x, w, dy = torch.zeros(6, 4), torch.zeros(5, 4), torch.zeros(6, 5)
    shapes = {k: tuple(((s.t() if ta else s).shape, (t.t() if tb else t).shape))
              for k in mf.LAYOUTS for s, ta, t, tb in [mf._layout_operands(k, x, w, dy)]}
    # A @ B.T with A (M, K), B (N, K): fprop Y (6, 5), dgrad dX (6, 4), wgrad dW (5, 4)
    assert shapes == {"fprop": ((6, 4), (5, 4)), "dgrad": ((6, 5), (4, 5)), "wgrad": ((5, 6), (4, 6))}


RECORDER = r"""
import sys, time
from lowprec.kernels import int8_fallback_tuning as kt
kt._kernel_sources = lambda: "test sources"
read = kt._read_records
kt._read_records = lambda p: [read(p), time.sleep(0.02)][0]   # a slow read: writers overlap
path, first = sys.argv[1], int(sys.argv[2])
for i in range(first, first + 25):   # one class tuned at a time, each recorded at once
    kt._TUNED[("main", 1024 * i, 2048, 2048, 128, 128, 128, True, True, False)] = (kt.GemmConfig(), 1.0, False)
    kt.record_tuning(path, "H100 test")
    kt._TUNED.clear()
"""


def test_the_runs_of_a_job_record_their_int8_tuning_in_one_file_without_losing_any(tmp_path):
    """Training runs sharing a GPU job add the classes they tuned to the file LOWPREC_INT8_TUNED
    names, each when it ends: records of processes writing at once are all kept (a lock around
    each read and rewrite)."""
    import subprocess
    import sys

    path = tmp_path / "tuned.json"
    procs = [subprocess.Popen([sys.executable, "-c", RECORDER, str(path), str(first)]) for first in (1, 101, 201)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    keys = {r["key"][1] // 1024 for r in json.loads(path.read_text())["records"]}
    assert keys == set(range(1, 26)) | set(range(101, 126)) | set(range(201, 226))


TUNER = r"""
import sys, time
from lowprec.kernels import int8_fallback_tuning as kt
kt.gpu_name = lambda device: "H100 test"
key = ("main", 16384, 2048, 2048, 128, 128, 128, True, True, False)
def tune():
    with open(sys.argv[1], "a") as log:
        log.write("tuned\n")
    time.sleep(1.5)   # the other process asks for the class meanwhile
    return kt.GemmConfig(block_n=64), 0.5
print(kt.tuned_config(key, tune, "cuda").label(), kt.tuned_configs()[0]["recorded"])
"""


def test_the_runs_of_a_job_tune_a_shape_class_once(tmp_path):
    """Two processes naming one LOWPREC_INT8_TUNED file (the runs of a GPU job) meet the same shape
    class at once: one tunes it and records it before letting the class go, the other waits and takes
    that record (both run one configuration), and the file holds the class once."""
    import os
    import subprocess
    import sys

    path, log = tmp_path / "tuned.json", tmp_path / "tunings.log"
    env = {**os.environ, "LOWPREC_INT8_TUNED": str(path)}
    procs = [subprocess.Popen([sys.executable, "-c", TUNER, str(log)], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    assert log.read_text().splitlines() == ["tuned"]
    assert sorted(out.split() for out, _ in outs) == [["128x64_kg1_w8_s3_gm8", "False"],
                                                      ["128x64_kg1_w8_s3_gm8", "True"]]
    assert [r["key"][2] for r in json.loads(path.read_text())["records"]] == [2048]

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from lowprec.report import readme


def test_readme_results_block_matches_committed_tables():
    text = (REPO / "README.md").read_text()
    assert readme.render(text, REPO / "results") == text, \
        "README.md results block is stale: run `python -m lowprec.report.readme`"


def test_readme_has_the_two_fresh_machine_commands():
    text = (REPO / "README.md").read_text()
    assert "pip install -e . && snakemake --cores all" in text
    test_cmd = 'pip install -e ".[test]" && python -m pytest -q'
    assert test_cmd in text and test_cmd in (REPO / ".ci" / "run").read_text()


def test_readme_is_short_and_its_links_resolve():

    text = (REPO / "README.md").read_text()
    assert len(text.encode()) < 20_000, f"README.md is {len(text.encode())} bytes; long text goes to docs/"
    for target in re.findall(r"\]\(([^)#]+?)(?:#[^)]*)?\)", text):
        if not target.startswith("http"):
            assert (REPO / target).exists(), f"README links to {target}, which is not in the repository"
    for doc, anchor in re.findall(r"\]\((docs/[^)#]+)#([^)]+)\)", text):
        headings = [re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
                    for h in re.findall(r"^#+ (.*)$", (REPO / doc).read_text(), flags=re.M)]
        assert anchor in headings, f"README links to {doc}#{anchor}; headings there: {headings}"


def test_verdict_table_says_where_each_number_comes_from():
    import csv

    import yaml

    rows = {}
    for line in readme.verdict_table(REPO / "results", ["gaussws", "int8_fallback", "mor"])[2:]:
        paper, claim, _, ours, source, verdict, _medium, _why = [c.strip() for c in line.strip("|").split(" | ")]
        rows[(paper, claim)] = (ours, source, verdict)
    for paper in ("gaussws", "int8_fallback", "mor"):
        registry = yaml.safe_load((REPO / "configs" / "claims" / f"{paper}.yaml").read_text())["claims"]
        with (REPO / "results" / paper / "small" / "tables" / "claims.csv").open(newline="") as f:
            small = {r["claim"]: r for r in csv.DictReader(f)}
        for claim in registry:
            ours, source, verdict = rows[(paper, claim["id"])]
            file = str(claim["metric"].get("file", ""))
            if verdict == "not run at this scale":
                assert source == "–"
            elif file.startswith("/"):  # a committed GPU measurement, whatever the scale
                assert source.startswith("H200 benchmark") and f"(results{file})" in source, source
            elif claim["id"] in small and small[claim["id"]]["verdict"] in ("reproduced", "not reproduced"):
                # decided at small: shown from there, or from medium where medium decides it too
                assert re.fullmatch(r"`(small|medium)` \((H100|H200)(, H[12]00)*, \d+(-\d+)? seeds?\)", source) \
                    or "benchmark" in source, source
                if source.startswith("`small`"):
                    assert ours == (small[claim["id"]]["ours"] or "–")


def test_verdict_row_takes_a_decided_verdict_else_the_larger_scale(tmp_path):
    """A decided verdict at `tiny` outranks an undecided one at `small`; between undecided ones the
    larger scale is shown (a phenomenon absent at `tiny`, present but too weak to decide at `small`)."""
    import pandas as pd

    verdicts = {"tiny": {"decided_small": "not exercised", "decided_tiny": "reproduced",
                         "undecided": "not exercised", "both": "reproduced"},
                "small": {"decided_small": "not reproduced", "decided_tiny": "inconclusive",
                          "undecided": "inconclusive", "both": "not reproduced"}}
    for scale, by_claim in verdicts.items():
        d = tmp_path / "mor" / scale / "tables"
        d.mkdir(parents=True)
        pd.DataFrame([{"claim": c, "paper_value": "1", "ours": f"{scale} {c}", "verdict": v, "why": ""}
                      for c, v in by_claim.items()]).to_csv(d / "claims.csv", index=False)
    rows = {r["claim"]: (r["scale"], r["verdict"]) for r in readme.verdict_rows(tmp_path, ["mor"])}
    assert rows == {"decided_small": ("small", "not reproduced"), "decided_tiny": ("tiny", "reproduced"),
                    "undecided": ("small", "inconclusive"), "both": ("small", "not reproduced")}


def test_report_modules_start_without_torch():
    """The report jobs that read committed files (tables, figures, claims, the report) import no
    torch: a workflow runs dozens of them, and torch with what it pulls in took 2-3 s of each."""
    modules = ["build", "claims", "tables", "curves", "matrix", "mor", "int8_fallback", "gaussws", "speed",
               "size_sweep"]
    code = ("import sys\n" + "".join(f"import lowprec.report.{m}\n" for m in modules)
            + "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout[:300]


def test_speed_section_shows_each_cell_with_the_commit_it_was_measured_at(tmp_path):
    """The report's training-speed table from an end-to-end benchmark file: arms in the file's
    order, one column per shape, "–" where an arm was not measured at a shape, how an arm ran where
    it was not the compiled path, and each cell's commit (merged runs go stale one by one)."""
    from lowprec.report.speed import SPEED_CSV, speed_lines

    assert speed_lines(tmp_path) == []  # no benchmark committed: no section
    bench = tmp_path / SPEED_CSV
    bench.parent.mkdir(parents=True)
    bench.write_text("shape,arm,path,tokens_per_s,ratio_vs_bf16_compiled,commit\n"
                     "s100m,bf16_compiled,cudagraphs,500,1.000,aaaaaaa\n"
                     "s100m,fp8_delayed,eager,30,0.060,bbbbbbb\n"
                     "s1b,bf16_eager,eager,60,0.648,ccccccc\n"
                     "s1b,bf16_compiled,compiled,90,1.000,ddddddd\n"
                     "s1b,fp8_delayed,compiled,64,0.711,0123456789abcdef\n")
    lines = speed_lines(tmp_path, lambda p: f"<{p.name}>")
    assert lines[0] == "## Training speed on the GPU" and "(<e2e_h200.csv>)" in lines[2]
    assert lines[4:] == ["| arm | `s100m` | `s1b` |", "|---|---|---|",
                         "| `bf16_compiled` | 1.000x, CUDA graphs `aaaaaaa` | 1.000x `ddddddd` |",
                         "| `fp8_delayed` | 0.060x, eager `bbbbbbb` | 0.711x `0123456` |",
                         "| `bf16_eager` | – | 0.648x `ccccccc` |", ""]
    # runs the provenance lists without a timer timed between two syncs: marked, with a note
    timer = {"timer": "steady state"}
    bench.with_name("e2e_h200.provenance.json").write_text(json.dumps({"runs": [
        {"commit": "aaaaaaa", **timer}, {"commit": "bbbbbbb"}, {"commit": "ddddddd", **timer},
        {"commit": "0123456789abcdef"}]}))
    lines = speed_lines(tmp_path, lambda p: f"<{p.name}>")
    assert lines[6:9] == ["| `bf16_compiled` | 1.000x, CUDA graphs `aaaaaaa` | 1.000x `ddddddd` |",
                          "| `fp8_delayed` | 0.060x†, eager `bbbbbbb` | 0.711x† `0123456` |",
                          "| `bf16_eager` | – | 0.648x `ccccccc` |"]
    assert lines[-2].startswith("† Timed by the wall clock between two syncs")
    bench.write_text("shape,arm,tokens_per_s\ns1b,bf16_compiled,90\n")
    with pytest.raises(ValueError, match=r"e2e_h200.csv: no column path, ratio_vs_bf16_compiled, commit"):
        speed_lines(tmp_path)


def test_speed_section_gives_each_cards_file_its_columns(tmp_path):
    """With the H100's benchmark file beside the H200's, each file's shapes are columns named by
    its card (from its provenance), arms in the reference file's order then the others', and a
    file alone (the H100's without the reference) makes no section."""
    from lowprec.report.speed import SPEED_CSVS, speed_inputs, speed_lines

    head = "shape,arm,path,tokens_per_s,ratio_vs_bf16_compiled,commit\n"
    h100 = tmp_path / SPEED_CSVS[1]
    h100.parent.mkdir(parents=True)
    h100.write_text(head + "s1b,bf16_compiled,compiled,90,1.000,eeeeeee\ns1b,int8_block,compiled,50,0.561,fffffff\n")
    assert speed_inputs(tmp_path) == [] and speed_lines(tmp_path) == []
    for path, gpu, rows in ((tmp_path / SPEED_CSVS[0], "NVIDIA H200", "s100m,bf16_compiled,compiled,500,1.000,aaaaaaa\n"
                             "s1b,bf16_compiled,compiled,95,1.000,bbbbbbb\ns1b,fp8_hybrid,compiled,110,1.190,ccccccc\n"),
                            (h100, "NVIDIA H100 80GB HBM3", None)):
        if rows:
            path.write_text(head + rows)
        path.with_name(path.stem + ".provenance.json").write_text(json.dumps({"device": {"gpu": gpu}}))
    assert speed_inputs(tmp_path) == [tmp_path / SPEED_CSVS[0], h100]
    lines = speed_lines(tmp_path, lambda p: f"<{p.name}>")
    assert "[bench/e2e_h200.csv](<e2e_h200.csv>) (H200); [bench/e2e_h100.csv](<e2e_h100.csv>) (H100)" in lines[2]
    assert lines[4:] == ["| arm | `s100m` (H200) | `s1b` (H200) | `s1b` (H100) |", "|---|---|---|---|",
                         "| `bf16_compiled` | 1.000x `aaaaaaa` | 1.000x `bbbbbbb` | 1.000x `eeeeeee` |",
                         "| `fp8_hybrid` | – | 1.190x `ccccccc` | – |",
                         "| `int8_block` | – | – | 0.561x `fffffff` |", ""]


def test_committed_reports_end_with_the_committed_speed_table():
    from lowprec.report.speed import speed_lines

    want = "\n".join(speed_lines(REPO / "results", lambda p: str(p.relative_to(REPO / "results"))))
    for report in ("REPORT.md", "REPORT_small.md", "REPORT_medium.md"):
        assert (REPO / "results" / report).read_text().endswith(want), f"{report}: regenerate it"


def test_size_sweep_section_shows_the_committed_table_of_the_scale(tmp_path):
    """A report at a scale with a size sweep shows its committed table (what it decided, each
    point's measures), and where the table is not committed, no section."""
    import csv
    import shutil

    from lowprec.report.size_sweep import sweep_lines

    bench = tmp_path / "bench"
    bench.mkdir()
    assert sweep_lines(tmp_path, "medium") == []
    for suffix in (".csv", ".provenance.json"):
        shutil.copy(REPO / "results" / "bench" / f"medium_sweep{suffix}", bench / f"medium_sweep{suffix}")
    with (bench / "medium_sweep.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    rows[0].update(fallback_ratio="0.000123", a_fallback_rising="True", gpus="Card X")
    rows[1].update(fallback_ratio="1.341432e-07")  # tiny, not zero
    rows[2].update(fallback_ratio="0.0")
    with (bench / "medium_sweep.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    lines = sweep_lines(tmp_path, "medium", lambda p: "LINK")
    text = "\n".join(lines)
    assert lines[0] == "## Size sweep (`configs/sweeps/medium.yaml`)" and "](LINK)" in text
    assert json.loads((bench / "medium_sweep.provenance.json").read_text())["answer"] in text
    assert f"| {rows[0]['point']} | {rows[0]['budget_steps']} |" in text and "| 0.00012 |" in text
    assert "| 1.3e-07 |" in text and f"| {rows[2]['budget_steps']} | {float(rows[2]['tokens_m']):.1f} | 0 |" in text
    assert "Card X" in text and sum(line.startswith("| d") for line in lines) == len(rows)
    assert sweep_lines(tmp_path, "small") == []


def test_the_medium_report_shows_the_committed_size_sweep():
    from lowprec.report.size_sweep import sweep_lines

    want = "\n".join(sweep_lines(REPO / "results", "medium", lambda p: str(p.relative_to(REPO / "results"))))
    assert want and want in (REPO / "results" / "REPORT_medium.md").read_text(), "regenerate it"


def test_the_medium_column_shows_the_verdict_there_once_it_has_runs(tmp_path):
    """The issue's `medium` column: the verdict at medium beside the row's own, '–' while medium's
    claims table says its runs are missing; a decided verdict at medium becomes the row's."""
    import pandas as pd

    def claims(scale, rows):
        d = tmp_path / "mor" / scale / "tables"
        d.mkdir(parents=True)
        pd.DataFrame([{"claim": c, "paper_value": "p", "ours": o, "verdict": v, "why": w} for c, o, v, w in rows]) \
            .to_csv(d / "claims.csv", index=False)

    claims("small", [("loss_per_tensor", "+0.007", "reproduced", ""), ("loss_per_block", "+0.003", "inconclusive", "noise"),
                     ("loss_per_channel", "+0.004", "reproduced", "")])
    claims("medium", [("loss_per_tensor", "", "not run at this scale", ""),
                      ("loss_per_block", "+0.020", "not reproduced", "a real gap"),
                      ("loss_per_channel", "+0.001", "inconclusive", "few seeds")])
    rows = {r["claim"]: r for r in readme.verdict_rows(tmp_path, ["mor"])}
    assert (rows["loss_per_tensor"]["verdict"], rows["loss_per_tensor"]["medium"]) == ("reproduced", "–")
    assert rows["loss_per_tensor"]["scale"] == "small"
    block = rows["loss_per_block"]
    assert (block["verdict"], block["medium"], block["scale"], block["ours"]) == ("not reproduced", "not reproduced", "medium", "+0.020")
    channel = rows["loss_per_channel"]
    assert (channel["verdict"], channel["scale"], channel["medium"]) == ("reproduced", "small", "inconclusive")
    header = readme.verdict_table(tmp_path, ["mor"])[0]
    assert header.split(" | ")[5:7] == ["verdict", "`medium`"]


def test_a_runs_numerics_say_whether_it_ran_the_fast_path_or_the_emulation(tmp_path):
    """The final-loss tables' numerics column tells a GPU run on the fast path from an emulated
    one: from the provenance (a plan, the device, LOWPREC_FAST_PATH), whatever the run wrote
    after the description before the reports told them apart (every run then read 'emulated')."""
    import pandas as pd

    from lowprec.report.runs import EMULATED, Run

    def run(gpu, fast_path, numerics, switches=None, layers=("h.0.mlp",)):
        method = {"numerics": numerics, "layers": list(layers)}
        if fast_path is not None:
            method["fast_path"] = fast_path
        prov = {"method": method, "device": {"gpu": gpu}, "switches": switches or {}}
        return Run(tmp_path, "p", "small", "gpt2", "int8_block", "int8_block", 0, pd.DataFrame(), prov, {})

    plan = "fprop: int8 32x32 / int8 32x32 on the Triton INT8 GEMM (CUDA; telemetry steps emulated)"
    old = "int8_block: INT8 per 32x32 block (emulated, fp32 accumulate)"
    new = "int8_block: INT8 per 32x32 block"
    fast = "int8_block: INT8 per 32x32 block (fast path; telemetry steps emulated)"
    emulated = f"int8_block: INT8 per 32x32 block {EMULATED}"
    assert run("NVIDIA H100 80GB HBM3", plan, old).numerics == fast
    assert run("NVIDIA H100 80GB HBM3", plan, new).numerics == fast
    assert run(None, plan, old).numerics == emulated == run(None, plan, new).numerics
    assert run(None, plan, new, {"LOWPREC_FAST_PATH": "all"}).numerics == fast
    assert run("NVIDIA H200", plan, new, {"LOWPREC_FAST_PATH": "off"}).numerics == emulated
    assert run("NVIDIA H200", "none: emulated", new).numerics == emulated
    assert run("NVIDIA H200", None, old).numerics == emulated  # a run from before plans were recorded
    native = "bf16 autocast (Lightning bf16-mixed)"
    assert run("NVIDIA H200", None, native, layers=()).numerics == native


def test_the_verdict_table_names_a_gpu_by_its_model():
    """'H100' for 'NVIDIA H100 80GB HBM3', found anywhere in a provenance record; None without one."""
    assert readme._gpu({"device": {"gpu": "NVIDIA H100 80GB HBM3"}}) == "H100"
    assert readme._gpu({"gpu": "NVIDIA H200"}) == "H200"
    assert readme._gpu({"runs": [{"device": {"gpu": None}}, {"device": {"gpu": "NVIDIA A100-SXM4-80GB"}}]}) \
        == "A100-SXM4-80GB"
    assert readme._gpu({"device": {"gpu": " "}, "cpu": "x86_64"}) is None


def test_a_claims_runs_are_counted_from_its_own_arms(tmp_path):
    """'from' counts the seeds of the claim's arms, fine-tuning runs included: a fine-tuning claim
    with one INT8-fallback run is not shown as the three seeds of the paper's pre-training arms."""
    import json

    import yaml

    from lowprec import config as cfglib
    from lowprec.config import FINETUNE, PRETRAIN

    def run(experiment, method, seed, gpu="NVIDIA H100 80GB HBM3"):
        d = tmp_path / "runs" / "medium" / experiment / "llama2" / method / f"s{seed}"
        d.mkdir(parents=True)
        resolve = cfglib.resolve_finetune_run if experiment.endswith(FINETUNE) else cfglib.resolve_run
        cfg = resolve("medium", "int8_fallback", "llama2", method, seed, results=str(tmp_path))
        for f in cfglib.RUN_FILES:  # the grid's config: a current run
            (d / f).write_text(json.dumps({"gpu": gpu}) if f == "provenance.json" else
                               yaml.safe_dump(cfg) if f == "config.yaml" else "x\n")

    for s in range(3):
        run("int8_fallback", "bf16", s)
    run("int8_fallback", "int8_block", 0, gpu="NVIDIA H200")
    run("int8_fallback_finetune", "bf16", 0)
    run("int8_fallback_finetune", "bf16", 1)
    run("int8_fallback_finetune", "int8_fallback", 0)
    assert readme.runs_of_scale(tmp_path, "medium", "int8_fallback") == "`medium` (H100, H200, 1-3 seeds)"
    finetune = {(FINETUNE, "int8_fallback"), (FINETUNE, "bf16")}
    assert readme.runs_of_scale(tmp_path, "medium", "int8_fallback", finetune) == "`medium` (H100, 1-2 seeds)"
    assert readme.runs_of_scale(tmp_path, "medium", "int8_fallback", {(PRETRAIN, "bf16")}) == "`medium` (H100, 3 seeds)"
    claim = {"metric": {"kind": "value", "file": "tables/finetune.csv"}, "finetune_arms": ["int8_fallback", "bf16"]}
    assert readme.number_source(tmp_path, "int8_fallback", claim, "medium") == "`medium` (H100, 1-2 seeds)"

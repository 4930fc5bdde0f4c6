# Produced the curves in int8_finetune_fast_path_40d1dc1_h100.csv (H100, torch 2.11, Triton 3.6, commit 40d1dc1):
# python3 -m lowprec.databundle unpack <the medium data bundle>, LOWPREC_INT8_TUNED=results/bench/int8_gemm_tuned.json, then this script
# the medium INT8-fallback fine-tuning fault, end to end: the BF16 source (1000 steps), then the 60
# fine-tuning steps under six arms that isolate the fast path, compile, CUDA graphs and telemetry
set -o pipefail
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
mkdir -p $OUT/b /tmp/ft
export TORCHINDUCTOR_CACHE_DIR=/tmp/ic TRITON_CACHE_DIR=/tmp/ic/triton
( timeout 420 python3 -m pytest -q -p no:cacheprovider -n 2 tests/test_gpu.py -k "medium_down or fast_path_follows_the_emulation or compiled_int8_layer or int8_fallback_fused" > /tmp/tests.log 2>&1; tail -40 /tmp/tests.log > $OUT/b/tests.log ) &
python3 -m lowprec.databundle unpack .data/medium-data.tar.xz || exit 1
python3 - <<'PY' || exit 1
import yaml, copy
from lowprec import config as c
src = c.resolve_run("medium", "int8_fallback", "llama2", "bf16", 0)
src["output_dir"] = "/tmp/diag/src"
yaml.safe_dump(src, open("/tmp/diag_src.yaml", "w"))
arms = {
  "bf16": ("bf16", {}, {}),
  "block": ("int8_block", {}, {}),
  "fb": ("int8_fallback", {}, {}),
  "fb_emu": ("int8_fallback", {"compile": False}, {"gemm": "emulated"}),
  "fb_nograph": ("int8_fallback", {"cudagraphs": False}, {}),
  "fb_notel": ("int8_fallback", {}, {"telemetry_every": 1000}),
  "bf16_lr3": ("bf16", {"lr": 3e-4}, {}),
  "block_lr3": ("int8_block", {"lr": 3e-4}, {}),
  "fb_lr3": ("int8_fallback", {"lr": 3e-4}, {}),
}
for arm, (m, tr, meth) in arms.items():
    r = c.resolve_finetune_run("medium", "int8_fallback", "llama2", m, 0)
    r["train"].update({"init_from": "/tmp/diag/src/checkpoints/last.ckpt", "log_every": 1, "lr": 1e-3, **tr})
    r["method"].update(meth)
    r["output_dir"] = f"/tmp/diag/{arm}"
    yaml.safe_dump(r, open(f"/tmp/diag_{arm}.yaml", "w"))
PY
t0=$(date +%s)
timeout 220 python3 -m lowprec.train --config /tmp/diag_src.yaml > /tmp/src.log 2>&1; echo "source rc=$? $(( $(date +%s)-t0 )) s"
tail -3 /tmp/src.log; cp /tmp/diag/src/metrics.csv /tmp/ft/src.csv
run_wave() { pids=""; for a in "$@"; do
  if [ $a = fb_emu ]; then LOWPREC_FAST_PATH=off timeout 175 python3 -m lowprec.train --config /tmp/diag_$a.yaml > /tmp/$a.log 2>&1 &
  else timeout 175 python3 -m lowprec.train --config /tmp/diag_$a.yaml > /tmp/$a.log 2>&1 & fi
  pids="$pids $!"; done; wait $pids; echo "wave $* done at $(( $(date +%s)-t0 )) s"; }
run_wave bf16 block fb fb_emu
run_wave fb_nograph fb_notel bf16_lr3 block_lr3 fb_lr3
for a in bf16 block fb fb_emu fb_nograph fb_notel bf16_lr3 block_lr3 fb_lr3; do
  cp /tmp/diag/$a/metrics.csv /tmp/ft/$a.csv 2>/dev/null; cp /tmp/diag/$a/telemetry.csv.gz /tmp/ft/${a}_tel.csv.gz 2>/dev/null; cp /tmp/$a.log /tmp/ft/$a.log
  echo "== $a"; grep -v "^\s*$" /tmp/$a.log | tail -4
done
python3 - <<'PY'
import pandas as pd, glob, os
for f in sorted(glob.glob("/tmp/ft/*.csv")):
    if f.endswith("src.csv"): continue
    d = pd.read_csv(f); tl = d.dropna(subset=["train_loss"]).set_index("step")["train_loss"]
    v = d.dropna(subset=["val_loss"])[["step", "val_loss"]].values.tolist() if "val_loss" in d else []
    print(os.path.basename(f), "train", [round(tl.get(s, float("nan")), 3) for s in (0, 1, 2, 5, 10, 20, 30, 40, 59)], "val", v)
PY
tar czf $OUT/diag.tar.gz -C /tmp ft
wait; cat $OUT/b/tests.log | tail -15

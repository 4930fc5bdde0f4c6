# device job: verification tests of the merged fast paths, the 1B e2e rows with eager numerics, a CUDA-graph probe at 100M
mkdir -p /tmp/o/prof /tmp/o/cg
T0=$(date +%s)
left() { echo $(( $1 - ($(date +%s)-T0) )); }
timeout -k 5 240 python -m pytest -q -n 0 -o addopts=-ra tests/test_gpu.py -k "triton_ops or never_wait_for or graph_breaks or blockwise or int8" > /tmp/o/tests_gpu.txt 2>&1
echo "tests_gpu rc=$? $(( $(date +%s)-T0 ))s" >> /tmp/o/times.txt
timeout -k 5 50 python -m pytest -q -n 0 -o addopts=-ra tests/test_kernels_block_fp8_gemm.py > /tmp/o/tests_bfp8.txt 2>&1
echo "tests_bfp8 rc=$? $(( $(date +%s)-T0 ))s" >> /tmp/o/times.txt
timeout -k 5 $(left 470) python -m lowprec.bench.e2e_step --shapes llama_1b --arms bf16_compiled,int8_block,int8_fallback,mor_tensor --repeats 2 --steps 3 --profile-dir /tmp/o/prof --out /tmp/o/e2e_1b.csv > /tmp/o/e2e_1b.txt 2>&1
echo "e2e rc=$? $(( $(date +%s)-T0 ))s" >> /tmp/o/times.txt
TORCHINDUCTOR_CUDAGRAPHS=1 timeout -k 5 $(left 575) python -m lowprec.bench.e2e_step --shapes llama_100m --arms bf16_compiled,fp8_tensorwise_current,mor_tensor --repeats 2 --steps 5 --out /tmp/o/cg/e2e_100m_cg.csv > /tmp/o/e2e_100m_cg.txt 2>&1
echo "cg rc=$? $(( $(date +%s)-T0 ))s" >> /tmp/o/times.txt
tar czf $OUT/out.tgz -C /tmp o
cat /tmp/o/times.txt; tail -5 /tmp/o/tests_gpu.txt /tmp/o/tests_bfp8.txt; tail -8 /tmp/o/e2e_1b.txt; tail -8 /tmp/o/e2e_100m_cg.txt

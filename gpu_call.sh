# device job: the INT8 fast path's remaining GPU tests, then the 100M step with CUDA graphs
mkdir -p /tmp/o/prof
T0=$(date +%s)
left() { echo $(( $1 - ($(date +%s)-T0) )); }
timeout -k 5 300 python -m pytest -v -n 0 -o addopts=-ra --timeout 110 tests/test_gpu.py -k int8 --deselect "tests/test_gpu.py::test_compiled_model_has_no_graph_breaks[int8_block]" --deselect "tests/test_gpu.py::test_compiled_model_has_no_graph_breaks[int8_fallback]" > /tmp/o/tests_gpu.txt 2>&1
echo "tests_gpu rc=$? $(( $(date +%s)-T0 ))s" >> /tmp/o/times.txt
timeout -k 5 $(left 560) python -m lowprec.bench.e2e_step --cudagraphs --shapes llama_100m --arms bf16_compiled,fp8_tensorwise_current,mor_tensor,int8_block --repeats 2 --steps 5 --profile-dir /tmp/o/prof --out /tmp/o/e2e_100m_cg.csv > /tmp/o/e2e_100m_cg.txt 2>&1
echo "e2e rc=$? $(( $(date +%s)-T0 ))s" >> /tmp/o/times.txt
tar czf $OUT/out.tgz -C /tmp o
cat /tmp/o/times.txt; grep -E "PASS|FAIL|ERROR|Timeout" /tmp/o/tests_gpu.txt | tail -20; grep -v Warn /tmp/o/e2e_100m_cg.txt | grep "^#\|^llama\|rror" | tail -12

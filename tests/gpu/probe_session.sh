# Issue 40's GPU look, one call: the gate, the profiler's markers, every example's CUDA solution
# judged (the judge's clock against the in-process events), then the clock's GPU tests. Logs under $OUT.
source .whl/activate.sh
export KCODER_CACHE=/tmp/kc KCODER_TEST_CACHE=/tmp/kc
start=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
for d in examples/*/; do n=$(basename $d)
  python3 -m kcoder eval $d/model.py $d/solution_cuda.py --device cuda --stop-after build --json > $OUT/build_$n.json 2>&1 &
done
python3 - > /dev/null 2>&1 <<'PY' &
import sys; sys.path.insert(0, "tests")
from sources import cuda_candidate_source
open("/tmp/cuda_testlib_candidate.py", "w").write(cuda_candidate_source("return _ext.scale_add_relu(x, y, self.scale)"))
PY
wait
python3 -m kcoder eval tests/problems/scale_add.py /tmp/cuda_testlib_candidate.py --device cuda --stop-after build --json > $OUT/build_testlib.json 2>&1 &
python3 tests/gpu/probe_gate.py 2>&1 | tee $OUT/gate.log | tail -3
python3 tests/gpu/probe_markers.py > $OUT/probe.log 2>&1
wait
echo "builds and probes: $(( $(date +%s) - start )) s"
for d in examples/*/; do n=$(basename $d)
  timeout 120 python3 -m kcoder eval $d/model.py $d/solution_cuda.py --device cuda --json > $OUT/ex_$n.json 2> $OUT/ex_$n.err
done
python3 tests/gpu/clock_table.py $OUT/ex_*.json
echo "examples: $(( $(date +%s) - start )) s"
timeout $(( 520 - $(date +%s) + start )) python3 -m pytest -m gpu -q -s tests/gpu/test_outer_clock_gpu.py 2>&1 | tee $OUT/outer.log | grep -E "OUTER|passed|failed|Error" | cut -c1-300
grep -E "events$|RECORD|FINDING|PROFILE_TIMED|Error" $OUT/probe.log | cut -c1-200 | head -16

#!/usr/bin/env bash
# One GPU-machine session: prebuild every CUDA extension in parallel, run the gpu tests and
# the benchmarks, and capture Nsight Compute fixtures. Usage on the device machine:
#   source .whl/activate.sh && bash tests/gpu/device_session.sh PART   (PART = 1 or 2)
set -u
export KCODER_CACHE="$PWD/.kcoder-cache"
out="${OUT:-/tmp/out}"; mkdir -p "$out"
part="${1:-1}"
if [ "$part" = 1 ]; then
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu --format=csv
  start=$(date +%s)
  python3 - <<'PY'
import sys; sys.path.insert(0, "tests")
from sources import cuda_candidate_source
open("/tmp/cuda_testlib_candidate.py", "w").write(cuda_candidate_source("return _ext.scale_add_relu(x, y, self.scale)"))
PY
  python3 -m kcoder eval tests/problems/scale_add.py /tmp/cuda_testlib_candidate.py --device cuda --stop-after build --json > "$out/build_testlib.json" &
  for d in examples/*/; do
    python3 -m kcoder eval "$d/model.py" "$d/solution_cuda.py" --device cuda --stop-after build --json > "$out/build_$(basename "$d").json" &
  done
  wait
  echo "PREBUILD seconds: $(( $(date +%s) - start ))"
  grep -h '"reason"' "$out"/build_*.json
  python3 -m pytest -m gpu -q -s tests/gpu 2>&1 | tee "$out/gpu_tests.log" | grep -E "EXAMPLE|passed|failed|Error|assert" | head -40
  python3 bench/examples.py --device cuda 2>&1 | tee "$out/bench_examples.log" | tail -6
else
  python3 bench/spread.py examples/softmax_rows/model.py --device cuda --runs 5 2>&1 | tee "$out/spread.log" | tail -3
  mkdir -p /tmp/ncu
  for d in examples/*/; do
    name=$(basename "$d")
    timeout 120 ncu --clock-control none --nvtx --nvtx-include "kcoder_candidate/" \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
      --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis \
      --metrics dram__bytes_read.sum,dram__bytes_write.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__sass_thread_inst_executed_op_fadd_pred_on.sum,smsp__sass_thread_inst_executed_op_fmul_pred_on.sum \
      -f -o "/tmp/ncu/$name" python3 tests/gpu/ncu_capture.py "$d/model.py" "$d/solution_cuda.py" > "/tmp/ncu/$name.stdout" 2>&1
    echo "ncu $name rc=$?"
    ncu --import "/tmp/ncu/$name.ncu-rep" --csv --page details > "/tmp/ncu/$name.details.csv" 2>&1
    ncu --import "/tmp/ncu/$name.ncu-rep" --csv --page raw > "/tmp/ncu/$name.raw.csv" 2>&1
    ncu --import "/tmp/ncu/$name.ncu-rep" --page details > "/tmp/ncu/$name.details.txt" 2>&1
  done
  tar czf "$out/ncu_fixtures.tgz" -C /tmp ncu
  ls -la /tmp/ncu | head -30
fi

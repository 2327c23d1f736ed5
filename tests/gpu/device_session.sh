#!/usr/bin/env bash
# One GPU-machine session: prebuild every CUDA extension in parallel, run the gpu tests and
# the benchmarks, and capture Nsight Compute fixtures (tests/gpu/test_profile_gpu.py takes ~5 min
# on its own: run it in a separate call). On the device machine:
#   source .whl/activate.sh && bash tests/gpu/device_session.sh
set -u
export KCODER_CACHE="$PWD/.kcoder-cache"
out="${OUT:-/tmp/out}"; mkdir -p "$out" /tmp/ncu
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
start=$(date +%s)
python3 - <<'PY'
import sys; sys.path.insert(0, "tests")
from sources import cuda_candidate_source
open("/tmp/cuda_testlib_candidate.py", "w").write(cuda_candidate_source("return _ext.scale_add_relu(x, y, self.scale)"))
PY
python3 -m kcoder eval tests/problems/scale_add.py /tmp/cuda_testlib_candidate.py --device cuda --stop-after build --json > /tmp/ncu/build_testlib.json &
for d in examples/*/; do
  python3 -m kcoder eval "$d/model.py" "$d/solution_cuda.py" --device cuda --stop-after build --json > "/tmp/ncu/build_$(basename "$d").json" &
done
wait
echo "PREBUILD seconds: $(( $(date +%s) - start ))"
python3 -m pytest -m gpu -q -s tests/gpu/test_cuda.py 2>&1 | tee "$out/gpu_tests.log" | grep -E "EXAMPLE|passed|failed|Error|assert" | head -30
python3 bench/examples.py --device cuda 2>&1 | tee "$out/bench_examples.log" | tail -5
python3 bench/spread.py examples/elementwise_chain/model.py --device cuda --runs 5 2>&1 | tee "$out/spread.log" | tail -3
for d in examples/*/; do
  name=$(basename "$d"); t0=$(date +%s)
  timeout 150 python3 -m kcoder profile "$d/model.py" "$d/solution_cuda.py" --save-ncu "/tmp/ncu/h200_$name" > "/tmp/ncu/profile_$name.txt" 2>&1
  echo "kcoder profile $name rc=$? $(( $(date +%s) - t0 )) s"; head -c 1500 "/tmp/ncu/profile_$name.txt"
done
rm -f /tmp/ncu/*.ncu-rep
tar czf "$out/ncu_fixtures.tgz" -C /tmp ncu
echo; grep -E "passed|failed" "$out/gpu_tests.log" | tail -2; grep EXAMPLE "$out/gpu_tests.log"
tail -6 "$out/bench_examples.log"; tail -2 "$out/spread.log"

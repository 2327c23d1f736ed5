#!/usr/bin/env bash
# GPU-machine sessions, in two calls of under 10 minutes each. On the device machine:
#   source .whl/activate.sh && bash tests/gpu/device_session.sh checks   # ~8 min
#   source .whl/activate.sh && bash tests/gpu/device_session.sh bench    # ~9 min
#   source .whl/activate.sh && bash tests/gpu/device_session.sh profile_tests
# checks: prebuild every CUDA extension in parallel, the CUDA gpu tests,
#         kcoder profile of every example with its Nsight Compute pages kept as fixtures.
# bench:  bench/turnaround.py (builds of its own, in fresh caches) and bench/spread.py.
# cost:   bench/evalcost.py --device cuda: stage times, kcoder vs a naive checker (~9 min).
# profile_tests: tests/gpu/test_profile_gpu.py (~4-5 min on a fresh machine: its builds are cold).
# tune:   bench/tune.py --device cuda (TUNE_S, TUNE_ARGS).
# suite: kcoder suite on the GPU(s) (see suite() below).
# kb:    the built-in policy's candidates on KernelBench problems (see kb() below).
set -u
export KCODER_CACHE="$PWD/.kcoder-cache" KCODER_TEST_CACHE="$PWD/.kcoder-cache"  # tests reuse the prebuilds
out="${OUT:-/tmp/out}"; mkdir -p "$out" /tmp/ncu
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
start=$(date +%s)

# every example's CUDA solution built in parallel (the later steps find them in the cache)
prebuild_examples() {
  for d in examples/*/; do
    python3 -m kcoder eval "$d/model.py" "$d/solution_cuda.py" --device cuda --stop-after build --json >/dev/null &
  done
  wait
}

checks() {
  python3 - <<'PY'
import sys; sys.path.insert(0, "tests")
from sources import cuda_candidate_source
open("/tmp/cuda_testlib_candidate.py", "w").write(cuda_candidate_source("return _ext.scale_add_relu(x, y, self.scale)"))
PY
  KCODER_PCH=wait python3 -m kcoder eval tests/problems/scale_add.py /tmp/cuda_testlib_candidate.py --device cuda \
    --stop-after build --json > /tmp/ncu/build_testlib.json
  for d in examples/*/; do
    python3 -m kcoder eval "$d/model.py" "$d/solution_cuda.py" --device cuda --stop-after build --json \
      > "/tmp/ncu/build_$(basename "$d").json" &
  done
  wait
  echo "PREBUILD seconds: $(( $(date +%s) - start ))"
  # Where the binding unit's time goes with the precompiled header (issue 7's measurements).
  python3 - <<'PY' 2>&1 | tail -25
import glob, re, subprocess, sys, time
sys.path.insert(0, ".")
from kcoder.build.fastbuild import parse_ninja_variables
d = sorted(glob.glob(".kcoder-cache/build/elementwise_chain_cuda-*"))[0]
ninja = open(d + "/build.ninja").read()
v = parse_ninja_variables(ninja)
source = re.search(r"^(?:# kcoder reused: )?build main\.o: compile (\S+)$", ninja, re.M).group(1)
cmd = [v["cxx"], *v["cflags"].split(), "-c", source, "-o", "/tmp/m.o", *v.get("post_cflags", "").split()]
for extra in ([], ["-ftime-report"]):
    t = time.perf_counter(); r = subprocess.run(cmd + extra, capture_output=True, text=True)
    print("main.cpp", extra, f"{time.perf_counter() - t:.2f} s rc={r.returncode}")
print("\n".join(l for l in r.stderr.splitlines() if "%" in l and ("phase" in l or "TOTAL" in l or "template" in l)))
PY
  timeout 300 python3 -m pytest -m gpu -q -s tests/gpu/test_cuda.py 2>&1 | tee "$out/gpu_tests.log" \
    | grep -E "EXAMPLE|passed|failed|Error|assert" | head -30
  for d in examples/*/; do
    name=$(basename "$d"); t0=$(date +%s)
    timeout 100 python3 -m kcoder profile "$d/model.py" "$d/solution_cuda.py" --save-ncu "/tmp/ncu/h200_$name" \
      > "/tmp/ncu/profile_$name.txt" 2>&1
    echo "kcoder profile $name rc=$? $(( $(date +%s) - t0 )) s"; grep -E "ncu kernel time|^forward|^time" "/tmp/ncu/profile_$name.txt"
    cuobjdump --dump-resource-usage .kcoder-cache/build/"${name}"_cuda-*/*.so > "/tmp/ncu/h200_cuobjdump_$name.txt" 2>&1
  done
  rm -f /tmp/ncu/*.ncu-rep
  tar czf "$out/ncu_fixtures.tgz" -C /tmp ncu
  echo; grep -E "passed|failed" "$out/gpu_tests.log" | tail -2; grep EXAMPLE "$out/gpu_tests.log"
}

bench() {
  timeout 400 python3 bench/turnaround.py --device cuda 2>&1 | tee "$out/turnaround.log" | tail -16
  timeout 180 python3 bench/spread.py examples/elementwise_chain/model.py --device cuda --runs 5 2>&1 \
    | tee "$out/spread.log" | tail -3
}

# trust: the sandboxed evaluator on the GPU (bwrap from .whl/bin when the machine has none),
#        the CUDA gpu tests and red team, and bench/memory.py (examples + a 6.4 GiB problem).
trust() {
  export PATH="$PWD/.whl/bin:$PATH"
  python3 -c "from kcoder.evaluate.sandbox import resolve_mode; print('SANDBOX', resolve_mode('auto'))"
  KCODER_PCH=wait python3 -m kcoder eval examples/softmax_rows/model.py examples/softmax_rows/solution_cuda.py \
    --device cuda --stop-after build --json | grep -E '"(status|reason)"'
  for d in examples/*/; do
    python3 -m kcoder eval "$d/model.py" "$d/solution_cuda.py" --device cuda --stop-after build --json \
      | grep -E '"status"' &
  done
  wait
  echo "PREBUILD seconds: $(( $(date +%s) - start ))"
  [ "${MEMORY_S:-300}" != 0 ] && KCODER_TRACE=1 timeout "${MEMORY_S:-300}" python3 bench/memory.py ${MEMORY_ARGS:-} 2>&1 | tee "$out/memory.log"
  timeout "${REDTEAM_S:-150}" python3 -m pytest -m gpu -q -s tests/gpu/test_cuda_redteam.py \
    tests/gpu/test_cuda.py::test_hidden_stream_work_rejected 2>&1 \
    | tee "$out/gpu_tests.log" | grep -E "SABOTAGE|passed|failed|Error|assert|^E "
}

# trust_cost: the red team, then the cost bench (one bare machine, one call)
trust_cost() {
  MEMORY_S=0 trust
  cost
}

# cost: where a verdict's seconds go (issue 28): kcoder eval of every example and a large problem, its
#       first verdict and its next (cached baselines), beside a naive in-process checker; stage table last.
cost() {
  export PATH="$PWD/.whl/bin:$PATH"
  prebuild_examples
  echo "PREBUILD seconds: $(( $(date +%s) - start ))"
  timeout "${COST_S:-500}" python3 bench/evalcost.py --device cuda --deadline-s "${COST_DEADLINE_S:-400}" \
    ${COST_ARGS:-} 2>&1 | tee "$out/evalcost.log" | tail -60
}

# tune: issue 18's figures: every example's space exhaustively, the guided strategies replayed
#       with a quarter of its budget, the tuned files against torch.compile (bench/tune.py).
tune() {
  export PATH="$PWD/.whl/bin:$PATH"
  prebuild_examples
  timeout "${TUNE_S:-540}" python3 bench/tune.py --device cuda ${TUNE_ARGS:-} 2>&1 | tee "$out/tune.log"
}

# suite: kcoder suite over the examples on every GPU, and over a KernelBench level when a checkout
#        (KERNELBENCH=DIR, carried: the device machine has no network) and its solutions
#        (KB_SOLUTIONS=DIR) are there; summary, CSV and plots come back in $OUT.
suite() {
  timeout 300 python3 -m pytest -m gpu -q -s tests/gpu/test_suite_gpu.py 2>&1 | grep -E "SUITE|passed|failed|assert"
  timeout 240 python3 -m kcoder suite examples --device cuda --backend pool --budget 1 --out "$out/suite_examples" \
    | tail -15
  if [ -n "${KERNELBENCH:-}" ] && [ -n "${KB_SOLUTIONS:-}" ]; then
    timeout "${KB_S:-400}" python3 -m kcoder suite "$KERNELBENCH" --level "${KB_LEVEL:-1}" --solutions "$KB_SOLUTIONS" \
      --device cuda --backend pool --budget 1 --out "$out/suite_kernelbench" | tail -15
  fi
}

# kb: the built-in policy on the GPU (issues 19, 20). KB=DIR holds level1/ level2/ of a KernelBench
#     checkout and KB_SOL=DIR the policy's rendered candidates (bench/policy.py --emit: DIR/examples
#     for the examples and tests/policy/problems, DIR/level1, DIR/level2), both carried; KB_L1 /
#     KB_L2 name the problems (file stems); KB_PARTS picks the steps (default: all). Every build
#     runs first, in parallel; each suite's folder comes back in $OUT (one cut short by its
#     timeout keeps the results it finished in its results.jsonl).
kb() {
  export PATH="$PWD/.whl/bin:$PATH"
  parts="${KB_PARTS:-test examples policy l2 l1}"
  families="$(ls tests/policy/problems/*.py | grep -v sort)"
  l1=""; for n in ${KB_L1:-}; do l1="$l1 $KB/level1/$n.py"; done
  l2=""; for n in ${KB_L2:-}; do l2="$l2 $KB/level2/$n.py"; done
  has() { case " $parts " in *" $1 "*) return 0;; esac; return 1; }
  { has examples && for d in examples/*/; do echo "$d/model.py $d/solution_cuda.py"; done
    has policy && for d in examples/*/; do echo "$d/model.py $KB_SOL/examples/$(basename "$d").py"; done
    has policy && for f in $families; do echo "$f $KB_SOL/examples/$(basename "$f")"; done
    has l2 && for f in $l2; do echo "$f $KB_SOL/level2/$(basename "$f")"; done
    has l1 && for f in $l1; do echo "$f $KB_SOL/level1/$(basename "$f")"; done
  } | MAX_JOBS=4 xargs -P 8 -L 1 sh -c 'python3 -m kcoder eval "$0" "$1" --device cuda --stop-after build \
        --allow gemm,conv --json 2>&1 | grep -E "\"(compiled|reason)\"" | tr -d "\n"; echo " $1"' \
    > "$out/prebuild.log"
  echo "built: $(grep -c '"compiled": true' "$out/prebuild.log") of $(wc -l < "$out/prebuild.log")"
  grep -v '"compiled": true' "$out/prebuild.log" | head -12 | cut -c1-400
  echo "PREBUILD seconds: $(( $(date +%s) - start ))"
  suite_run() {  # NAME TIMEOUT ARGS...: one suite, its last lines printed
    local name=$1 limit=$2; shift 2
    echo "== suite $name ($(( $(date +%s) - start )) s)"
    timeout "$limit" python3 -m kcoder suite "$@" --device cuda --backend pool --budget 1 --allow gemm,conv \
      --out "$out/$name" > "$out/$name.log" 2>&1; echo "rc=$?"; grep -vE "^\s*$" "$out/$name.log" | tail -24
  }
  if has test; then
    timeout 150 python3 -m pytest -m gpu -q -s tests/gpu/test_policy_cuda.py -k space_tunes 2>&1 \
      | tee "$out/policy_tests.log" | grep -E "passed|failed|Error|assert"
  fi
  has examples && suite_run suite_examples 200 examples
  has policy && suite_run suite_policy_examples 200 examples $families --solutions "$KB_SOL/examples"
  has l2 && [ -n "$l2" ] && suite_run suite_kb2 "${KB2_S:-240}" $l2 --solutions "$KB_SOL/level2"
  has l1 && [ -n "$l1" ] && suite_run suite_kb1 "${KB1_S:-400}" $l1 --solutions "$KB_SOL/level1"
}

profile_tests() {
  timeout 330 python3 -m pytest -m gpu -q -s tests/gpu/test_profile_gpu.py 2>&1 | tee "$out/gpu_profile.log" \
    | grep -E "PROFILE|MEMORY|passed|failed|Error|assert" | head -30
}

"${1:-checks}"
echo "session seconds: $(( $(date +%s) - start ))"

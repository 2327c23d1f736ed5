#!/usr/bin/env bash
# GPU-machine sessions, in two calls of under 10 minutes each. On the device machine:
#   source .whl/activate.sh && bash tests/gpu/device_session.sh checks   # ~8 min
#   source .whl/activate.sh && bash tests/gpu/device_session.sh bench    # ~9 min
#   source .whl/activate.sh && bash tests/gpu/device_session.sh profile_tests
# checks: prebuild every CUDA extension in parallel, the CUDA gpu tests,
#         kcoder profile of every example with its Nsight Compute pages kept as fixtures.
# bench:  bench/turnaround.py (builds of its own, in fresh caches) and bench/spread.py.
# lock: issue 27's device lock and sandboxed profiling (see lock() below).
# cost:   bench/evalcost.py --device cuda: stage times, kcoder vs a naive checker (~9 min).
# profile_tests: tests/gpu/test_profile_gpu.py (~4-5 min on a fresh machine: its builds are cold).
# tune:   bench/tune.py --device cuda (TUNE_S, TUNE_ARGS).
# suite: kcoder suite on the GPU(s) (see suite() below).
# kb:    the built-in policy's candidates on KernelBench problems (see kb() below).
# envs:  kcoder synth --n 50 and one kcoder rollout batch on the GPU, timed (issue 31; see envs() below).
# fair_judge: issue 36: the fair judge's GPU tests (see fair_judge()).
# judge: issue 27: every example's CUDA solution evaluated in full (a table: no integrity rejection),
#        the outer clock's GPU tests, the CUDA red team, then the policy's candidates (see judge()).
# kernels: the policy's candidates for the examples and tests/policy/problems, judged by kcoder suite.
# kbsuite: a slice of KernelBench judged by kcoder suite --results, resuming the committed results
#          (bench/results/kernelbench-<card>.jsonl); KB=DIR carried (see kbsuite()).
# fair:   issue 36's figures in one call (see fair()).
# measure: PAIRS built, TESTS run, every pair judged, a table (see measure()).
# quickstart: kcoder optimize on an example, as the README's GPU quick start (see quickstart()).
# shapes: issue 48: the examples' CUDA kernels (hand and policy) verified at batch sizes the judge draws.
# gap:    issue 46 item 2: why the policy's CUDA kernels lose to the hand solutions (elementwise_chain,
#         softmax_rows): plain-event rates with the launching loop's host time (probe_rates.py), each
#         judged by kcoder eval, and kcoder profile --summary of each (see gap()).
# judgeclock: issue 40's figures in one call: the gate, the profiler's markers, every example's CUDA
#          solution judged (the judge's clock against the in-process events), the clock's GPU tests.
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

# Shared by kernels and kbsuite: every "PROBLEM CANDIDATE" line of file $1 compiled at once, host work only
# (kcoder eval --stop-after compile: no GPU, no device lock), KB_BUILDS at a time with MAX_JOBS each; the
# verdicts that follow find the builds in the cache. One line per build in $out/$2.
prebuild_pairs() {  # FILE LOG [SECONDS: the whole prebuild's limit, 600]
  MAX_JOBS="${KB_MAX_JOBS:-2}" timeout "${3:-600}" xargs -P "${KB_BUILDS:-8}" -L 1 sh -c 'timeout 600 python3 -m kcoder eval "$0" "$1" \
      --device cuda --stop-after compile --allow gemm,conv --json 2>&1 | grep -E "\"(compiled|reason)\"" | tr -d "\n"
      echo " $1"' < "$1" > "$out/$2"
  echo "built: $(grep -c '"compiled": true' "$out/$2") of $(wc -l < "$out/$2") ($(( $(date +%s) - start )) s)"
  grep -v '"compiled": true' "$out/$2" | head -8 | cut -c1-300
}

# kernels: the built-in policy's CUDA candidates for the examples and tests/policy/problems, rendered here
#     (bench/policy.py --emit), built in parallel and judged by kcoder suite (one clock: the judge's; the
#     old in-process quick look, bench/kernels.py, timed without the judge's GPU head start and misled).
#     Rows go to $OUT/examples-<card>.jsonl (kcoder suite --results); the table is printed last. For
#     KernelBench problems use kbsuite (KB_ONLY names them).
kernels() {
  export PATH="$PWD/.whl/bin:$PATH"
  local sol=/tmp/kernels_sol card families
  export KCODER_COMMIT="${KCODER_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}"
  card=$(gpu_card)
  families="$(ls tests/policy/problems/*.py | grep -v sort)"
  timeout 300 python3 bench/policy.py --device cuda --allow gemm,conv --jobs 12 --emit $sol $families \
    > "$out/kernels_emit.log" 2>&1
  echo "EMIT seconds: $(( $(date +%s) - start ))"; grep -E " none |rendered \(" "$out/kernels_emit.log" | head
  { for d in examples/*/; do n=$(basename "$d"); [ -f $sol/$n.py ] && echo "$d/model.py $sol/$n.py"; done
    for f in $families bench/problems/*.py; do [ -f "$sol/$(basename "$f")" ] && echo "$f $sol/$(basename "$f")"; done
  } > /tmp/kernels_pairs.txt
  prebuild_pairs /tmp/kernels_pairs.txt kernels_build.log
  timeout "${KERNELS_S:-420}" python3 -m kcoder suite examples $families bench/problems --solutions $sol --results \
    "$out/examples-$card.jsonl" --device cuda --backend pool --budget 1 --allow gemm,conv \
    --out /tmp/kernels_suite > "$out/kernels_suite.log" 2>&1; echo "suite rc=$?"
  grep -E "^[✓✗–] " "$out/kernels_suite.log" | cut -c1-200
  python3 bench/results_table.py "$out/examples-$card.jsonl" | tee "$out/kernels_table.md"
}

# shapes: issue 48 on the GPU: every example's hand CUDA solution and the policy's CUDA candidate
#     verified at the batch sizes the judge draws (kcoder eval --shapes auto --stop-after verify), built in
#     parallel first; a table of "right at N of M" per pair last (the policy's CUDA kernels are made for
#     their shapes today: their guard's message is the expected note, a wrong answer is the bug to see).
shapes() {
  export PATH="$PWD/.whl/bin:$PATH"
  local sol=/tmp/shapes_sol families f
  families="${SHAPES_FAMILIES-$(ls tests/policy/problems/*.py | grep -v sort)}"  # SHAPES_FAMILIES= : examples only
  timeout 200 python3 bench/policy.py --device cuda --allow gemm,conv --jobs 12 --emit $sol examples/*/ $families \
    > "$out/shapes_emit.log" 2>&1
  # the policy's candidates made for any batch size first (issue 48), then the hand solutions
  { for d in examples/*/; do n=$(basename "$d"); [ -f $sol/$n.py ] && echo "$d/model.py $sol/$n.py"; done
    for f in $families; do [ -f "$sol/$(basename "$f")" ] && echo "$f $sol/$(basename "$f")"; done
    [ "${SHAPES_HAND:-1}" = 1 ] && for d in examples/*/; do echo "$d/model.py $d/solution_cuda.py"; done; } \
    > /tmp/shapes_pairs.txt
  grep -l "Made for any batch size" $sol/*.py | sed 's/^/generic: /' | tee "$out/shapes_generic.txt"
  handoff_test
  prebuild_pairs /tmp/shapes_pairs.txt shapes_build.log "${SHAPES_BUILD_S:-240}"
  verify_shapes /tmp/shapes_pairs.txt shapes_table.txt 120
}

# a smaller output after a bigger one (the drawn sizes after the problem's own) read back whole: the GPU test
# of the hand-off fix
handoff_test() {
  timeout 120 python3 -m pytest -m gpu -q tests/gpu/test_handoff_gpu.py -k "smaller_output or copied_into" 2>&1 \
    | tail -3 | tee "$out/shapes_handoff.log"
}

# every pair of PAIRS (built) verified at the batch sizes the judge draws, no timing, SHAPES_JOBS (4) at once;
# a row each (tests/gpu/shapes_row.py) into $out/TABLE
verify_shapes() {  # PAIRS TABLE SECONDS
  export out limit="$3"
  xargs -P "${SHAPES_JOBS:-4}" -L 1 sh -c 'name="$(basename "$(dirname "$0")")_$(basename "$1" .py)"
    timeout "$limit" python3 -m kcoder eval "$0" "$1" --device cuda --shapes auto --stop-after verify \
      --allow gemm,conv --json > "$out/shapes_$name.json" 2> "$out/shapes_$name.err"
    python3 tests/gpu/shapes_row.py "$out/shapes_$name.json" "$name"' < "$1" | tee "$out/$2"
}

gap() {
  export PATH="$PWD/.whl/bin:$PATH"
  local sol=/tmp/gap_sol ex c name
  timeout 200 python3 bench/policy.py --device cuda --emit $sol examples/elementwise_chain/ examples/softmax_rows/ \
    > "$out/gap_emit.log" 2>&1
  for ex in elementwise_chain softmax_rows; do
    echo "examples/$ex/model.py examples/$ex/solution_cuda.py"; echo "examples/$ex/model.py $sol/$ex.py"
  done > /tmp/gap_pairs.txt
  prebuild_pairs /tmp/gap_pairs.txt gap_build.log 300
  for ex in elementwise_chain softmax_rows; do
    # one at a time: two timing loops on one GPU would slow each other
    timeout 150 python3 tests/gpu/probe_rates.py "examples/$ex" "$sol/$ex.py" > "$out/gap_rates_$ex.log" 2>&1
  done
  for ex in elementwise_chain softmax_rows; do  # the judge's figures of the same pairs (the ones that count)
    for c in "examples/$ex/solution_cuda.py" "$sol/$ex.py"; do
      name="${ex}_$(basename "$c" .py)"
      timeout 120 python3 -m kcoder eval "examples/$ex/model.py" "$c" --device cuda --json \
        > "$out/gap_eval_$name.json" 2> "$out/gap_eval_$name.err"
      python3 tests/gpu/verdict_row.py EVAL "$out/gap_eval_$name.json" "$name"
    done
  done
  # issue 48 on the same builds: each pair verified at the batch sizes the judge draws, and the hand-off GPU test
  verify_shapes /tmp/gap_pairs.txt gap_shapes.txt 150
  handoff_test
  for ex in elementwise_chain softmax_rows; do
    for c in "examples/$ex/solution_cuda.py" "$sol/$ex.py"; do
      timeout 120 python3 -m kcoder profile "examples/$ex/model.py" "$c" --summary \
        > "$out/gap_profile_${ex}_$(basename "$c" .py).txt" 2>&1
    done
  done
  grep -h RATE "$out"/gap_rates_*.log
  cat "$out/gap_shapes.txt" "$out/shapes_handoff.log"
  for f in "$out"/gap_profile_*.txt; do echo "== $f"; head -c 1200 "$f"; echo; done
}

gpu_card() {  # h100, h200, ... of the first GPU (names the results file)
  local card
  card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -oiE 'h100|h200|a100|b200|l40s' | head -1)
  echo "${card:-gpu}" | tr 'A-Z' 'a-z'
}

# kbsuite: issue 35's results kept. A slice of KernelBench (KB=DIR with level1/ level2/, carried: the device
#     machine has no network) in one call: the built-in policy's candidates rendered here (bench/policy.py
#     --emit), the slice's problems without a row in bench/results/kernelbench-<card>.jsonl for this
#     candidate, commit, device and options chosen smallest footprint first (bench/kbslice.py), built in
#     parallel, then judged by kcoder suite --results $OUT/kernelbench-<card>.jsonl (a copy of the committed
#     file; a row appended under $OUT as each verdict lands, so a call cut short keeps what it finished),
#     starting no verdict past the call's time; the README tables (bench/results_table.py) last. Copy
#     $OUT/kernelbench-<card>.jsonl over bench/results/ and commit it: the next call goes on from there.
#     Problems judged at this commit are not rendered again (bench/kbslice.py --to-render).
#     KB_LEVEL ("1 2"), KB_FROM / KB_TO (problem numbers), KB_ONLY (numbers), KB_SKIP (numbers), KB_MAX_MB
#     (skip bigger footprints), KB_N (problems this call, 16), KB_RENDERS (captures at once, 8: each holds its
#     problem's get_inputs() in host memory), KB_CALL_S (seconds this stage may take, 540),
#     KB_LAST_S (the longest verdict: none starts later than that before the end, 110), KCODER_COMMIT (the
#     commit of the tree: the device's copy has no .git; rows say "unknown" without it), KB_SOL (candidates
#     rendered ahead, carried: see pre_rendered).
# KB_SOL=DIR (carried): candidates rendered ahead on another machine (bench/policy.py --device cuda --emit
# DIR/level1 ...; rendering needs no GPU), so the device's minutes go to builds and verdicts. Copies those
# of LEVEL into the stage's solutions and prints the problem files left to render.
pre_rendered() {
  local level=$1 f n; shift
  if [ -f "${KB_SOL:-}/level$level/footprints.json" ]; then  # kbslice.py takes small footprints first
    mkdir -p "$sol/level$level"; cp "$KB_SOL/level$level/footprints.json" "$sol/level$level/"
  fi
  for f in "$@"; do
    n=$(basename "$f")
    if [ -n "${KB_SOL:-}" ] && [ -f "$KB_SOL/level$level/$n" ]; then
      mkdir -p "$sol/level$level"; cp "$KB_SOL/level$level/$n" "$sol/level$level/$n"
    else
      echo "$f"
    fi
  done
}

kbsuite() {
  export PATH="$PWD/.whl/bin:$PATH"
  if [ ! -d "${KB:-}/level1" ] && [ ! -d "${KB:-}/level2" ]; then
    echo "kbsuite: KB=DIR holding level1/ level2/ of a KernelBench checkout is needed (carried)"; return 2
  fi
  local sol=/tmp/kbsuite_sol card results deadline level files left limit
  card=$(gpu_card)
  results="$out/kernelbench-$card.jsonl"
  [ -f "bench/results/kernelbench-$card.jsonl" ] && cp "bench/results/kernelbench-$card.jsonl" "$results"
  touch "$results"
  export KCODER_COMMIT="${KCODER_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}"
  [ -z "$KCODER_COMMIT" ] && echo "kbsuite: no KCODER_COMMIT and no .git here: rows say commit unknown"
  deadline=$(( start + ${KB_CALL_S:-540} ))
  echo "results: $(grep -c . "$results") rows in $results; commit ${KCODER_COMMIT:-unknown}" | tee "$out/kbsuite.log"
  : > /tmp/kbsuite_chosen.txt
  local only skip slice  # numbers as one word each (kbslice.py reads "19,20")
  only=$(echo ${KB_ONLY:-} | tr ' ' ','); skip=$(echo ${KB_SKIP:-} | tr ' ' ',')
  slice="${KB_FROM:+--from $KB_FROM} ${KB_TO:+--to $KB_TO} ${only:+--only $only} ${skip:+--skip $skip}"
  for level in ${KB_LEVEL:-1 2}; do
    [ -d "$KB/level$level" ] || continue
    files=$(timeout 120 python3 bench/kbslice.py "$KB" --level "$level" --results "$results" --to-render $slice \
      2>> "$out/kbsuite.log")
    [ -n "$files" ] || continue
    files=$(pre_rendered "$level" $files)  # those rendered ahead (KB_SOL) are copied, not rendered here
    [ -n "$files" ] || continue
    limit=$(( deadline - $(date +%s) - 240 )); [ "$limit" -lt 30 ] && limit=30  # 4 min kept for builds + verdicts
    timeout "$limit" python3 bench/policy.py --device cuda --allow gemm,conv --no-examples --jobs "${KB_RENDERS:-8}" \
      --emit "$sol/level$level" $files >> "$out/kbsuite_emit.log" 2>&1
    echo "level $level: $(ls "$sol/level$level"/*.py 2>/dev/null | wc -l) rendered of $(echo $files | wc -w) ($(( $(date +%s) - start )) s)" \
      | tee -a "$out/kbsuite.log"
  done
  [ -d "$sol" ] || { echo "kbsuite: nothing to judge in the slice (see kbsuite.log, kbsuite_emit.log)"; return 0; }
  for level in ${KB_LEVEL:-1 2}; do
    [ -d "$sol/level$level" ] || continue
    timeout 120 python3 bench/kbslice.py "$KB" --level "$level" --solutions "$sol/level$level" --results "$results" \
      $slice ${KB_MAX_MB:+--max-mb $KB_MAX_MB} -n "${KB_N:-16}" >> /tmp/kbsuite_chosen.txt 2>> "$out/kbsuite.log"
  done
  LC_ALL=C sort -k2,2n /tmp/kbsuite_chosen.txt | head -n "${KB_N:-16}" > /tmp/kbsuite_next.txt
  sed 's/^/next: level /' /tmp/kbsuite_next.txt | tee -a "$out/kbsuite.log"
  awk -v sol="$sol" '{ n = $3; sub(".*/", "", n); print $3, sol "/level" $1 "/" n }' /tmp/kbsuite_next.txt > /tmp/kbsuite_pairs.txt
  limit=$(( deadline - $(date +%s) - ${KB_LAST_S:-110} - 60 )); [ "$limit" -lt 30 ] && limit=30
  [ -s /tmp/kbsuite_pairs.txt ] && prebuild_pairs /tmp/kbsuite_pairs.txt kbsuite_build.log "$limit" | tee -a "$out/kbsuite.log"
  for level in ${KB_LEVEL:-1 2}; do
    files=$(awk -v l="$level" '$1 == l { print $3 }' /tmp/kbsuite_next.txt)
    [ -n "$files" ] || continue
    left=$(( deadline - $(date +%s) - ${KB_LAST_S:-110} ))
    if [ "$left" -le 0 ]; then echo "level $level: no time left for a verdict" | tee -a "$out/kbsuite.log"; continue; fi
    echo "== kcoder suite level $level: $(echo $files | wc -w) problems, --time-budget $left ($(( $(date +%s) - start )) s)" \
      | tee -a "$out/kbsuite.log"
    timeout $(( left + ${KB_LAST_S:-110} )) python3 -m kcoder suite $files --solutions "$sol/level$level" \
      --results "$results" --time-budget "$left" --device cuda --backend pool --budget 1 --allow gemm,conv \
      --out "/tmp/kbsuite_l$level" >> "$out/kbsuite.log" 2>&1
    echo "suite rc=$?" | tee -a "$out/kbsuite.log"
  done
  grep -E "^[✓✗–] |left for a later|already in" "$out/kbsuite.log" | cut -c1-220
  python3 -c 'import json, sys
for line in open(sys.argv[1]):
    row = json.loads(line)
    if row.get("log_tail") and row.get("commit") == sys.argv[2]:
        print("--", row["problem"], "log tail:"); print(row["log_tail"][-800:])' "$results" "$KCODER_COMMIT"
  python3 bench/results_table.py "$results" > "$out/kbsuite_table.md" 2>&1
  head -8 "$out/kbsuite_table.md"; echo "($(grep -c . "$results") rows; the whole table in kbsuite_table.md)"
}

# quickstart: issue 35 item 5: kcoder optimize on a named example as the README's GPU quick start runs it
#     (QS_EXAMPLE, default elementwise_chain; QS_PROBLEM=FILE for any other problem; QS_ARGS appended), its
#     output in $OUT/quickstart.log and its report.json beside it; the final verdict block printed last.
quickstart() {
  export PATH="$PWD/.whl/bin:$PATH"
  local problem="${QS_PROBLEM:-examples/${QS_EXAMPLE:-elementwise_chain}/model.py}" report rc
  [ -f "$problem" ] || { echo "quickstart: no problem file $problem"; return 2; }
  COLUMNS=150 timeout "${QS_S:-540}" python3 -m kcoder optimize "$problem" --device cuda ${QS_ARGS:-} \
    > "$out/quickstart.log" 2>&1
  rc=$?
  echo "kcoder optimize $problem --device cuda ${QS_ARGS:-}: rc=$rc, $(( $(date +%s) - start )) s"
  report=$(ls -t "$(dirname "$problem")"/.kcoder/runs/*/report.json 2>/dev/null | head -1)
  [ -n "$report" ] && cp "$report" "$out/quickstart_report.json"
  grep -E "^reference:|speed of light|★" "$out/quickstart.log" | cut -c1-200
  sed -n '/VERIFIED CANDIDATE/,$p' "$out/quickstart.log"  # "NO VERIFIED CANDIDATE" too
}

# envs: issue 31's figures. kcoder synth --n SYNTH_N (50) on the GPU (SYNTH_JOBS checks side by side),
#       then one rollout batch: the built-in policy, one episode per example, one GPU per episode.
#       The manifest, the episodes and both logs come back in $OUT; a table is printed last.
envs() {
  export PATH="$PWD/.whl/bin:$PATH"
  t0=$(date +%s)
  timeout "${SYNTH_S:-330}" python3 -m kcoder synth --n "${SYNTH_N:-50}" --device cuda --jobs "${SYNTH_JOBS:-4}" \
    --out "$out/synth" > "$out/synth.log" 2>&1; echo "synth rc=$?"; tail -3 "$out/synth.log"
  t1=$(date +%s)
  timeout "${ROLLOUT_S:-230}" python3 -m kcoder rollout examples --policy builtin --device cuda --backend pool \
    --budget 1 --tune-trials 2 --max-turns 8 --out "$out/rollout" > "$out/rollout.log" 2>&1; echo "rollout rc=$?"
  tail -6 "$out/rollout.log"
  t2=$(date +%s)
  python3 - "$out" $((t1 - t0)) $((t2 - t1)) <<'PY'
import json, statistics, sys
out, synth_s, rollout_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
try:
    m = json.load(open(f"{out}/synth/manifest.json"))
except OSError:
    m = {"tasks": [], "rejected": [], "attempts": 0}
ms = [t["eager_ms"] for t in m["tasks"]]
reasons = {}
for r in m["rejected"]:
    key = r["reason"].split(":")[0][:40]
    if key.startswith("eager time"):
        key = "eager > max" if r.get("eager_ms", 0) > m["max_ms"] else "eager < min"
    reasons[key] = reasons.get(key, 0) + 1
try:
    eps = [json.loads(l) for l in open(f"{out}/rollout/rollouts.jsonl")]
except OSError:
    eps = []
print("| figure | value |\n| --- | --- |")
print(f"| synth: kept / drawn | {len(ms)} / {m['attempts']} in {synth_s} s |")
if ms:
    print(f"| synth: eager ms min / median / max | {min(ms):.2f} / {statistics.median(ms):.2f} / {max(ms):.2f} |")
print(f"| synth: rejected by reason | {reasons} |")
print(f"| rollout: episodes, wall time | {len(eps)} in {rollout_s} s |")
for e in eps:
    print(f"| rollout {e['name']} | {e.get('status')}, reward {e.get('reward')}, {e.get('turns')} turns, "
          f"{e.get('seconds')} s |")
PY
}

# judge: issue 27's outer clock on the GPU. JUDGE_PARTS picks the steps (default: all); the policy
#        step (test_policy_cuda.py: the built-in policy's candidate for every example and family
#        problem, timed in full) gets what its timeout (JUDGE_POLICY_S) allows.
judge() {
  export PATH="$PWD/.whl/bin:$PATH"
  parts="${JUDGE_PARTS:-examples clock redteam policy}"
  has() { case " $parts " in *" $1 "*) return 0;; esac; return 1; }
  python3 - <<'PY'
import sys; sys.path.insert(0, "tests")
from sources import cuda_candidate_source
open("/tmp/cuda_testlib_candidate.py", "w").write(cuda_candidate_source("return _ext.scale_add_relu(x, y, self.scale)"))
PY
  python3 -m kcoder eval tests/problems/scale_add.py /tmp/cuda_testlib_candidate.py --device cuda --stop-after build \
    --json > /dev/null 2>&1 &
  prebuild_examples
  echo "PREBUILD seconds: $(( $(date +%s) - start ))"
  if has examples; then
    for d in examples/*/; do
      name=$(basename "$d")
      timeout 120 python3 -m kcoder eval "$d/model.py" "$d/solution_cuda.py" --device cuda --allow gemm,conv --json \
        > "$out/judge_eval_$name.json" 2> "$out/judge_eval_$name.err"
      python3 tests/gpu/verdict_row.py JUDGE "$out/judge_eval_$name.json" "$name"
    done
  fi
  tests=""
  has clock && tests="$tests tests/gpu/test_outer_clock_gpu.py"
  has redteam && tests="$tests tests/gpu/test_cuda_redteam.py tests/gpu/test_cuda.py::test_hidden_stream_work_rejected"
  [ -n "$tests" ] && timeout "${JUDGE_TESTS_S:-300}" python3 -m pytest -m gpu -q -s $tests 2>&1 \
    | tee "$out/judge_tests.log" | grep -E "OUTER CLOCK|SABOTAGE|passed|failed|Error|^E " | cut -c1-400
  has policy && timeout "${JUDGE_POLICY_S:-200}" python3 -m pytest -m gpu -q -s tests/gpu/test_policy_cuda.py \
    -k verified_and_timed 2>&1 | tee "$out/judge_policy.log" | grep -E "POLICY|passed|failed|^E " | cut -c1-300
}

# lock: issue 27 items 2-3 (~6 min): two kcoder evals at once on one GPU, a tune run with its
#       build-ahead, a profile (ncu inside the sandbox); tests/gpu/lock_check.py prints the table.
lock() {
  export KCODER_DEVICE_TRACE="$out/device_trace.jsonl"; rm -f "$KCODER_DEVICE_TRACE"
  d=examples/softmax_rows
  for i in 1 2; do
    timeout 300 python3 -m kcoder eval $d/model.py $d/solution_cuda.py --device cuda --budget 1 --json \
      > "$out/lock_eval$i.json" 2> "$out/lock_eval$i.log" &
  done
  wait
  timeout 300 python3 -m kcoder tune $d/model.py $d/solution_cuda.py --device cuda --trials 6 --jobs 3 \
    --no-cache --profile-top 1 --json --out-dir "$out/lock_tune" > "$out/lock_tune.json" 2> "$out/lock_tune.log"
  echo "tune rc=$? $(grep -o '"status": "[a-z-]*"' "$out/lock_tune.json" | sort | uniq -c | tr -s ' ' | tr '\n' ' ')"
  timeout 200 python3 -m kcoder profile $d/model.py $d/solution_cuda.py --json > "$out/lock_profile.json"
  for i in 1 2; do grep -o '"status": "[a-z]*"\|"reason": "[^"]*"' "$out/lock_eval$i.json" | head -2 | tr '\n' ' '; echo; done
  python3 tests/gpu/lock_check.py "$KCODER_DEVICE_TRACE" "$out/lock_profile.json"
}

# accept: issue 27's acceptance check in one short call: every pair in ACCEPT_PAIRS (a carried file:
#     "PROBLEM CANDIDATE" per line; hand solutions and the policy's candidates) built in parallel,
#     then judged by kcoder eval one at a time (--allow gemm,conv); a table of verdicts last.
accept() {
  PAIRS="$ACCEPT_PAIRS" EACH_S="${ACCEPT_EACH_S:-90}" measure
}

# fair: issue 36 in one call: the fair-timing test (an honest 4 GiB copy vs eager's clone), the outputs'
#       descriptor hand-off tests, then kcoder eval on KernelBench L1's 18 GB problems (KB carried; the
#       policy's candidates from FAIR_SOL, rendered here when absent) and a table of the judge's figures.
fair() {
  local sol="${FAIR_SOL:-.sol/l1}" probs="${FAIR_L1:-19_ReLU 34_InstanceNorm}"
  for p in $probs; do [ -f "$sol/$p.py" ] || python3 bench/policy.py --device cuda --no-examples --emit "$sol" "$KB/level1/$p.py" \
    >> "$out/fair_emit.log" 2>&1; done
  for p in $probs; do echo "$KB/level1/$p.py $sol/$p.py"; done > /tmp/fair_judged.txt
  { echo "tests/gpu/problems/big_copy.py tests/gpu/problems/big_copy_candidate.py"; cat /tmp/fair_judged.txt; } > /tmp/fair_pairs.txt
  PAIRS=/tmp/fair_judged.txt BUILD_PAIRS=/tmp/fair_pairs.txt BUILD_S=240 TESTS_S=240 EACH_S="${FAIR_EACH_S:-120}" \
    TESTS="tests/gpu/test_fair_timing_gpu.py tests/gpu/test_handoff_gpu.py" measure
}

# measure: one call for a session's figures: PAIRS (a file of "problem candidate" lines, carried) built in
#       parallel first, then the GPU tests named by TESTS (pytest node ids), then kcoder eval on each pair
#       (--allow gemm,conv; EACH_S seconds at most) with its JSON under $OUT, and the judge's table last.
measure() {
  export PATH="$PWD/.whl/bin:$PATH"
  prebuild_pairs "${BUILD_PAIRS:-$PAIRS}" measure_prebuild.log "${BUILD_S:-200}"
  [ -n "${TESTS:-}" ] && timeout "${TESTS_S:-200}" python3 -m pytest -m gpu -q -s $TESTS 2>&1 | tee "$out/measure_tests.log" \
    | grep -E "FAIR|RANGE|HANDOFF|passed|failed|Error|assert" | cut -c1-300 | head -20
  while read -r problem candidate; do
    name="$(basename "$(dirname "$candidate")")_$(basename "$candidate" .py)"
    timeout "${EACH_S:-90}" python3 -m kcoder eval "$problem" "$candidate" --device cuda --allow gemm,conv --json \
      > "$out/m_$name.json" 2> "$out/m_$name.err"; echo "$name rc=$? $(( $(date +%s) - start )) s"
  done < "$PAIRS"
  python3 tests/gpu/verdicts_table.py "$out"/m_*.json | tee "$out/measure_table.txt"
}

profile_tests() {
  timeout 330 python3 -m pytest -m gpu -q -s tests/gpu/test_profile_gpu.py 2>&1 | tee "$out/gpu_profile.log" \
    | grep -E "PROFILE|MEMORY|passed|failed|Error|assert" | head -30
}

# fair_judge: issue 36's fair judge: library overlap accepted, side streams refused, cancelling outputs
# accepted by the float64 rule (~5 min: three cold builds).
fair_judge() {
  timeout 560 python3 -m pytest -m gpu -q -s tests/gpu/test_fair_judge_gpu.py \
    tests/gpu/test_cuda.py::test_hidden_stream_work_rejected \
    tests/gpu/test_cuda_redteam.py::test_persisting_l2_window_is_reset_before_timed_calls 2>&1 \
    | tee "$out/gpu_fair.log" | grep -E "RANGE|CONV_TRANSPOSE|HIDDEN|CANCEL|GROUPNORM|passed|failed|Error|assert" | cut -c1-600
}

judgeclock() {
  export PATH="$PWD/.whl/bin:$PATH"
  for d in examples/*/; do
    python3 -m kcoder eval "$d/model.py" "$d/solution_cuda.py" --device cuda --stop-after build --json \
      > "$out/build_$(basename "$d").json" 2>&1 &
  done
  python3 tests/gpu/probe_gate.py 2>&1 | tee "$out/gate.log" | tail -2
  python3 tests/gpu/probe_markers.py > "$out/markers.log" 2>&1; grep -E "^FINDING|^PROFILE_TIMED" "$out/markers.log" | cut -c1-200
  wait
  for d in examples/*/; do
    timeout 120 python3 -m kcoder eval "$d/model.py" "$d/solution_cuda.py" --device cuda --json \
      > "$out/ex_$(basename "$d").json" 2> "$out/ex_$(basename "$d").err"
  done
  python3 tests/gpu/clock_table.py "$out"/ex_*.json | tee "$out/clock_table.txt"
  timeout "${CLOCK_TESTS_S:-300}" python3 -m pytest -m gpu -q -s tests/gpu/test_outer_clock_gpu.py \
    tests/gpu/test_fair_timing_gpu.py 2>&1 | tee "$out/clock_tests.log" | grep -E "OUTER|FAIR|passed|failed|Error" | cut -c1-300
}

"${1:-checks}"
echo "session seconds: $(( $(date +%s) - start ))"

# Issue 40's first GPU look, one call: the gate, the profiler's markers, and every example's
# CUDA solution judged (the judge's clock against the in-process events). Logs under $OUT.
source .whl/activate.sh
export KCODER_CACHE=/tmp/kc
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
for d in examples/*/; do n=$(basename $d)
  python3 -m kcoder eval $d/model.py $d/solution_cuda.py --device cuda --stop-after build --json > $OUT/build_$n.json 2>&1 &
done
python3 tests/gpu/probe_gate.py 2>&1 | tee $OUT/gate.log | tail -5
python3 tests/gpu/probe_markers.py > $OUT/probe.log 2>&1
wait
for d in examples/*/; do n=$(basename $d)
  timeout 150 python3 -m kcoder eval $d/model.py $d/solution_cuda.py --device cuda --json > $OUT/ex_$n.json 2> $OUT/ex_$n.err
done
python3 tests/gpu/clock_table.py $OUT/ex_*.json
grep -E "events$|RECORD|FINDING|PROFILE_TIMED|Error" $OUT/probe.log | cut -c1-220 | head -30

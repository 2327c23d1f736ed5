source .whl/activate.sh
export KCODER_CACHE=/tmp/kc
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
python3 tests/gpu/probe_markers.py > $OUT/probe.log 2>&1
for d in examples/*/; do n=$(basename $d)
  (timeout 280 python3 -m kcoder eval $d/model.py $d/solution_cuda.py --device cuda --json > $OUT/ex_$n.json 2> $OUT/ex_$n.err) &
  sleep 2
done
wait
python3 tests/gpu/clock_table.py $OUT/ex_*.json
grep -E "events$|RECORD|FINDING|PROFILE_TIMED|kcoder\.|spin|sleep|Error" $OUT/probe.log | cut -c1-220 | head -60

#!/bin/bash
# One device call that measures the corpus and runs GPU tests, for a session's scarce device time.
#
# Why: the device is lent by the minute and a fresh machine costs a minute to start, so the corpus suite
# runs as one shard per GPU side by side (corpus_suite.py --shard K/N, joined with --merge), then the GPU
# tests named in TESTS0 / TESTS1 run on GPU 0 / GPU 1. Logs go to $OUT/logs (tarred as logs.tgz).
# On the device, from the repository root, with the staged dependencies carried as .gpu:
#   S=60 B=32 CT=540 TESTS0="tests/test_rules_gpu.py" TESTS1="tests/test_gpu_engine.py" \
#     bash benchmarks/gpu_session.sh
# S/B: search seconds / candidates per case; CT: a shard's time limit; PT: the tests' time limit. A shard
# stopped by CT keeps the cases it finished (the report is rewritten after each one).
source .gpu/env.sh
L=$OUT/logs; mkdir -p $L
nvidia-smi -L > $L/gpus.txt; cat $L/gpus.txt
NG=$(nvidia-smi -L | wc -l)
S=${S:-60}; B=${B:-32}; CT=${CT:-540}
t0=$(date +%s)
for k in $(seq 0 $((NG-1))); do
  (CUDA_VISIBLE_DEVICES=$k timeout $CT python3 benchmarks/corpus_suite.py --seconds $S --budget $B --shard $k/$NG \
     --workspace /tmp/wfc$k --out $L/c$k.json > $L/c$k.log 2>&1; echo "shard $k rc=$?" >> $L/c$k.log) &
done
wait
echo "corpus: $(( $(date +%s) - t0 )) s"
python3 benchmarks/corpus_suite.py --merge $L/c*.json --out $L/corpus.json > $L/corpus.txt 2>&1
t1=$(date +%s)
for k in 0 1; do
  v=TESTS$k; T=${!v}
  dev=$(( k < NG ? k : 0 ))  # one GPU: both lists run on it, one after the other
  [ -n "$T" ] || continue
  if (( dev == k )); then
    (CUDA_VISIBLE_DEVICES=$dev timeout ${PT:-200} python3 -m pytest -m gpu -q -p no:cacheprovider $T > $L/gpu_tests$k.txt 2>&1) &
  else
    wait; CUDA_VISIBLE_DEVICES=$dev timeout ${PT:-200} python3 -m pytest -m gpu -q -p no:cacheprovider $T > $L/gpu_tests$k.txt 2>&1
  fi
done
wait
echo "tests: $(( $(date +%s) - t1 )) s"
cd $OUT && tar czf logs.tgz logs && cd - >/dev/null
tail -50 $L/corpus.txt; tail -8 $L/gpu_tests*.txt 2>/dev/null; for k in $(seq 0 $((NG-1))); do tail -2 $L/c$k.log; done

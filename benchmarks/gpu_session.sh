#!/bin/bash
# One device call that measures the corpus and runs GPU tests, for a session's scarce device time.
#
# Why: the device is lent by the minute, a fresh machine costs a minute to start, and one call may run at most
# 10 minutes. So the corpus suite runs as one shard per GPU side by side (corpus_suite.py --shard K/N, joined
# with --merge), and a whole corpus at 60 s per case is split over two calls on the same warm machine with
# NS (shards in all) and SO (the first shard this call runs). The GPU tests named in TESTS are then split by
# test id over all GPUs (test i runs on GPU i mod NG). Logs go to $OUT/logs (tarred as logs.tgz).
# On the device, from the repository root, with the staged dependencies carried as .gpu:
#   S=60 B=32 NS=8 SO=0 CT=540 bash benchmarks/gpu_session.sh            # corpus shards 0..NG-1 of 8
#   KSUITE=1 (KS=30): also the reference kernels (optimize_suite.py, kernels/ split over the GPUs)
#   NOCORPUS=1 TESTS="tests/test_rules_gpu.py tests/test_gpu_engine.py" PT=300 bash benchmarks/gpu_session.sh
#   PART=0/2 (then PART=1/2 in a second call): every other test id, for a suite longer than one call
#   SCALE=1 (SCALE_CASES=a,b SCALE_TIME=60 ST=240): scale_bench.py on GPU 0 first (time to a big baseline)
# S/B: search seconds / candidates per case; CT: a shard's time limit; PT: the tests' time limit. A shard
# stopped by CT keeps the cases it finished (the report is rewritten after each one).
source .gpu/env.sh
L=$OUT/logs; mkdir -p $L
nvidia-smi -L > $L/gpus.txt; cat $L/gpus.txt
NG=$(nvidia-smi -L | wc -l)
S=${S:-60}; B=${B:-32}; CT=${CT:-540}; NS=${NS:-$NG}; SO=${SO:-0}
t0=$(date +%s)
if [ -z "$NOCORPUS" ]; then
  for g in $(seq 0 $((NG-1))); do
    k=$((SO+g)); (( k < NS )) || continue
    (CUDA_VISIBLE_DEVICES=$g timeout $CT python3 benchmarks/corpus_suite.py --seconds $S --budget $B --shard $k/$NS \
       --workspace /tmp/wfc$k --out $L/c$k.json > $L/c$k.log 2>&1; echo "shard $k rc=$?" >> $L/c$k.log) &
  done
  wait
  echo "corpus: $(( $(date +%s) - t0 )) s"
  python3 benchmarks/corpus_suite.py --merge $L/c*.json --out $L/corpus.json > $L/corpus.txt 2>&1
fi
if [ -n "$KSUITE" ]; then  # the reference kernels (kernels/), split over the GPUs: the no-regression check
  t2=$(date +%s)
  ks=($(ls kernels/*.cu | xargs -n1 basename | sed 's/\.cu$//'))
  for g in $(seq 0 $((NG-1))); do
    mine=$(for i in "${!ks[@]}"; do (( i % NG == g )) && echo ${ks[$i]}; done)
    [ -n "$mine" ] || continue
    (CUDA_VISIBLE_DEVICES=$g timeout $CT python3 benchmarks/optimize_suite.py --seconds ${KS:-30} --budget 32 \
       --kernels $mine --workspace /tmp/wfk$g --out $L/k$g.json > $L/k$g.log 2>&1) &
  done
  wait
  echo "kernels: $(( $(date +%s) - t2 )) s"
fi
if [ -n "$SCALE" ]; then  # problem scale (scale_bench.py) on GPU 0 alone, before the tests share the GPUs
  t3=$(date +%s)
  CUDA_VISIBLE_DEVICES=0 timeout ${ST:-240} python3 benchmarks/scale_bench.py --time ${SCALE_TIME:-60} \
     ${SCALE_CASES:+--cases $SCALE_CASES} --out $L/scale > $L/scale.log 2>&1
  echo "scale: $(( $(date +%s) - t3 )) s"; tail -4 $L/scale.log
fi
t1=$(date +%s)
if [ -n "$TESTS" ]; then
  python3 -m pytest -m gpu -q -p no:cacheprovider --collect-only $TESTS 2>/dev/null | grep '::' > $L/ids_all.txt
  # PART=k/n: only every n-th id from the k-th (a suite longer than one call, split over calls on a warm machine)
  if [ -n "$PART" ]; then awk -v k=${PART%/*} -v n=${PART#*/} '(NR-1) % n == k' $L/ids_all.txt > $L/ids.txt
  else cp $L/ids_all.txt $L/ids.txt; fi
  echo "tests: $(wc -l < $L/ids.txt) of $(wc -l < $L/ids_all.txt)"
  for g in $(seq 0 $((NG-1))); do
    awk -v g=$g -v n=$NG '(NR-1) % n == g' $L/ids.txt > $L/ids$g.txt
    [ -s $L/ids$g.txt ] || continue
    # one id per line, read as an array: parametrized ids hold spaces ("int x"), which word splitting broke
    (mapfile -t ids < $L/ids$g.txt; CUDA_VISIBLE_DEVICES=$g timeout ${PT:-200} python3 -m pytest -m gpu -q \
       -p no:cacheprovider -rf "${ids[@]}" > $L/gpu_tests$g.txt 2>&1) &
  done
  wait
  echo "tests: $(( $(date +%s) - t1 )) s"
fi
cd $OUT && tar czf logs.tgz logs && cd - >/dev/null
[ -f $L/corpus.txt ] && tail -50 $L/corpus.txt
for f in $L/gpu_tests*.txt; do [ -f $f ] && { echo "== $f"; grep -E "FAILED|ERROR" $f | head -20; tail -1 $f; }; done
for f in $L/c[0-9]*.log; do [ -f $f ] && tail -1 $f; done
for f in $L/k[0-9]*.log; do [ -f $f ] && tail -14 $f; done
exit 0

#!/bin/bash
# `--time 20` against `--time 90` on a whole suite in one device call: the cases split over the GPUs.
#
# Why: anytime_bench.py runs cases one after another (two on one GPU would time each other); the self-written
# corpus at both budgets is ~44 x 40 s, more than one 10-minute call on one GPU. Case i runs on GPU i mod NG
# (CUDA_VISIBLE_DEVICES), each GPU writing its own JSON after every case, so a shard stopped by CT keeps what it
# finished; the parts are summarized together at the end (anytime_bench.py --summarize).
# On the device, from the repository root, with the staged dependencies carried as .gpu:
#   SUITE=corpus TIMES=20,90 BUDGETS=32,48 CT=540 bash benchmarks/anytime_session.sh
#   SUITE=kernels CASES="conv1d saxpy" TIMES=90 BUDGETS=48 bash benchmarks/anytime_session.sh
source .gpu/env.sh
R=$OUT/anytime; mkdir -p $R
nvidia-smi -L > $R/gpus.txt
NG=$(nvidia-smi -L | wc -l); CT=${CT:-540}
SUITE=${SUITE:-corpus}; TIMES=${TIMES:-20,90}; BUDGETS=${BUDGETS:-32,48}
folder=$([ "$SUITE" = kernels ] && echo kernels || echo benchmarks/corpus)
all=(${CASES:-$(ls $folder/*.cu | xargs -n1 basename | sed 's/\.cu$//')})
t0=$(date +%s)
for g in $(seq 0 $((NG-1))); do
  mine=$(for i in "${!all[@]}"; do (( i % NG == g )) && echo ${all[$i]}; done)
  [ -n "$mine" ] || continue
  (CUDA_VISIBLE_DEVICES=$g timeout $CT python3 benchmarks/anytime_bench.py --suite $SUITE --cases $mine \
     --times $TIMES --budgets $BUDGETS --store-dir /tmp/wfa$g --out $R/$SUITE-g$g.json > $R/$SUITE-g$g.log 2>&1) &
done
wait
echo "$SUITE: $(( $(date +%s) - t0 )) s"
python3 benchmarks/anytime_bench.py --summarize $R/$SUITE-g*.json --out $R/$SUITE.json | tee $R/$SUITE.txt

#!/bin/bash
# The wide sample against its peers, in one device call: Kernel Tuner on every sampled kernel, and the
# independent harness on every winner of a sample run (benchmarks/wide/retime.py), one shard per GPU.
#
# Why: a speedup on other people's kernels means something beside what an autotuner finds without rewriting
# code (issue 28 item 4) and once a harness sharing no timing code with WarpForge reproduces it (issue 28).
# On the device, from the repository root, with the staged dependencies (kernel_tuner among them) as .gpu:
#   KT=1 RETIME=.wt/retime bash benchmarks/wide/run_peers.sh .wt/widesample
# Results under $OUT/peers: kt-g<k>.json (kt_suite.py), retime.txt (the re-time table), logs.
SAMPLE=${1:?usage: run_peers.sh SAMPLE_DIR}
[ -f .gpu/env.sh ] && source .gpu/env.sh
export PYTHONPATH=$PWD/server:$PWD:$PYTHONPATH
export CPATH=$(cd $SAMPLE && pwd)/vendor${CPATH:+:$CPATH}
R=$OUT/peers; mkdir -p $R
NG=$(nvidia-smi -L | wc -l); nvidia-smi -L > $R/gpus.txt
t0=$(date +%s)
mapfile -t rows < <(grep -E ' (sample|pair) ' $SAMPLE/ids.txt)
for g in $(seq 0 $((NG-1))); do
  (
    export CUDA_VISIBLE_DEVICES=$g
    if [ -n "$RETIME" ]; then
      timeout ${RT:-300} python3 -m benchmarks.wide.retime run $RETIME --shard $g/$NG > $R/retime-g$g.log 2>&1
    fi
    if [ -n "$KT" ]; then
      mine=(); for i in "${!rows[@]}"; do (( i % NG == g )) || continue
        read -r id role kernel unit <<< "${rows[$i]}"; mine+=("$SAMPLE/$unit:$kernel"); done
      timeout ${KTT:-400} python3 benchmarks/kt_suite.py --timeout 120 --out $R/kt-g$g.json "${mine[@]}" > $R/kt-g$g.log 2>&1
    fi
  ) &
done
wait
echo "peers: $(( $(date +%s) - t0 )) s"
[ -n "$RETIME" ] && python3 -m benchmarks.wide.retime table $RETIME | tee $R/retime.txt
[ -n "$RETIME" ] && tar czf $R/retime.tgz -C $RETIME .
cd $OUT && tar czf peers.tgz peers && cd - > /dev/null
exit 0

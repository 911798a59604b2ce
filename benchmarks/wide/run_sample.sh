#!/bin/bash
# The wide yardstick's GPU sample: `warpforge optimize --json` on every sampled unit, one shard per GPU.
#
# Why: the CPU funnel says what the rules propose on other people's kernels; this says what it is worth. The
# sample folder (benchmarks/wide/sample.py prepare) is self-contained: units/<id>/<file>.cu with the spec above
# the kernel and the project headers it includes, vendor/ (cuBLAS/cuRAND headers, put on CPATH) and
# manifest.json. Copy it to /work/main/.wt/widesample (git-ignored) and run on the device from the repository
# root, with the staged dependencies carried as .gpu:
#   S=45 B=48 NS=4 SO=0 CT=540 bash benchmarks/wide/run_sample.sh .wt/widesample
# S/B: seconds / candidates per kernel (issue 27's settings: 45 s, 48); NS: shards in all (default: the GPUs);
# IDS: only the listed ids. SO: the first shard this call runs (a sample larger than one 10-minute call: NS=8 SO=0, then SO=4 on the same
# warm 4-GPU machine). Kernel i belongs to shard i mod NS. Each author's optimized version and its naive twin
# are timed with `warpforge bench` in the same shard. Results: $OUT/wide/<id>.json (+ <id>.bench.json), logs,
# and summary.md (python -m benchmarks.wide.sample aggregate), printed last.
SAMPLE=${1:?usage: run_sample.sh SAMPLE_DIR}
[ -f .gpu/env.sh ] && source .gpu/env.sh
export PYTHONPATH=$PWD/server:$PWD:$PYTHONPATH
export CPATH=$(cd $SAMPLE && pwd)/vendor${CPATH:+:$CPATH}
R=$OUT/wide; mkdir -p $R
NG=$(nvidia-smi -L | wc -l); nvidia-smi -L > $R/gpus.txt
S=${S:-45}; B=${B:-48}; CT=${CT:-540}; NS=${NS:-$NG}; SO=${SO:-0}
mapfile -t rows < <(grep -E ' (sample|pair) ' $SAMPLE/ids.txt)
# IDS="s003 s009 p002": only those kernels (a re-run of the ones a change can move; the aggregate covers them only)
if [ -n "$IDS" ]; then
  mapfile -t rows < <(printf '%s\n' "${rows[@]}" | awk -v ids=" $IDS " 'index(ids, " "$1" ") > 0')
fi
t0=$(date +%s)
for g in $(seq 0 $((NG-1))); do
  k=$((SO+g)); (( k < NS )) || continue
  (
    export CUDA_VISIBLE_DEVICES=$g; mkdir -p /tmp/wfw$k
    end=$(( $(date +%s) + CT ))
    for i in "${!rows[@]}"; do
      (( i % NS == k )) || continue
      read -r id role kernel unit <<< "${rows[$i]}"
      left=$(( end - $(date +%s) )); (( left > S + 20 )) || { echo "$id: out of time" >> $R/shard$k.log; continue; }
      dir=$SAMPLE/$(dirname $unit)
      timeout $(( S * 2 + 60 )) python3 -m warpforge optimize $SAMPLE/$unit --kernel $kernel --json --time $S \
        --budget $B --workspace $dir --store /tmp/wfw$k > $R/$id.json 2> $R/$id.log
      echo "$id $kernel rc=$?" >> $R/shard$k.log
      a=$(python3 -c "import json,sys; m=json.load(open('$SAMPLE/manifest.json')); print(next((e['author'] for e in m['entries'] if e['id']=='$id'), ''))")
      if [ -n "$a" ]; then
        au=$(awk -v a=$a '$1==a {print $4" "$3}' $SAMPLE/ids.txt)
        read -r aunit akernel <<< "$au"
        timeout 120 python3 -m warpforge bench $SAMPLE/$unit --kernel $kernel --json > $R/$id.bench.json 2>> $R/$id.log
        timeout 120 python3 -m warpforge bench $SAMPLE/$aunit --kernel $akernel --json > $R/$a.bench.json 2>> $R/$a.log
      fi
    done
    echo "shard $k done" >> $R/shard$k.log
  ) &
done
wait
echo "wide sample: $(( $(date +%s) - t0 )) s"
python3 -m benchmarks.wide.sample aggregate $SAMPLE $R
cd $OUT && tar czf wide.tgz wide && cd - > /dev/null
exit 0

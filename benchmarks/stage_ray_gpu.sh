#!/usr/bin/env bash
# Stage the project's Python dependencies *and Ray* for the GPU machine, under the 64 MiB a device run may
# carry (the plain ../shared/device/stage bundle plus a stock Ray wheel is ~110 MiB).
#
# Run from the project root:   benchmarks/stage_ray_gpu.sh
# It fills ./.ray-gpu/ (git-ignored through .git/info/exclude) with:
#   .ray-gpu/wheels/        the .gpu bundle's wheels minus Kernel Tuner and its optimizers (the scale-out
#                           bench and the GPU tests do not need them), plus pytest-lsp/pytest-asyncio
#   .ray-gpu/ray-site.tar.xz Ray 2.60 for cp312 and its dependencies, installed into a directory and slimmed:
#                           no Java jars, no dashboard web client, no rllib/data/serve/tune/train/llm
#   .ray-gpu/env.sh         source first in every GPU command (installs both into /tmp/site)
# Then: run(carry=[".ray-gpu"], command="source .ray-gpu/env.sh && python3 benchmarks/scaleout_bench.py ...").
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
grep -qxF '/.ray-gpu/' .git/info/exclude 2>/dev/null || echo '/.ray-gpu/' >> .git/info/exclude
[ -d .gpu/wheels ] || ../shared/device/stage pytest-lsp pytest-asyncio
rm -rf .ray-gpu && mkdir -p .ray-gpu/wheels
skip='kernel_tuner|python_constraint2|pymoo|cma|autograd|moocore|alive_progress|about_time|graphemeu|deprecated|xmltodict'
for w in .gpu/wheels/*.whl; do
  name=$(basename "$w" | cut -d- -f1)
  [[ "$name" =~ ^($skip)$ ]] || cp "$w" .ray-gpu/wheels/
done
# A stale duplicate of one package in the bundle makes pip refuse the whole install: keep the newest.
for name in $(ls .ray-gpu/wheels | cut -d- -f1 | sort | uniq -d); do
  ls .ray-gpu/wheels/"$name"-*.whl | sort -V | head -n -1 | xargs rm -f
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$tmp/wheels" 'ray==2.60.*' 2> >(grep -v "is ignored: it is neither" >&2)
# Whatever the project bundle or the GPU image already has is taken from there.
for w in "$tmp"/wheels/*.whl; do
  name=$(basename "$w" | cut -d- -f1)
  if ls .ray-gpu/wheels/"$name"-*.whl >/dev/null 2>&1 \
     || grep -qxF "$(echo "$name" | tr 'A-Z_' 'a-z-')" ../shared/device/on-device-image.txt; then
    rm -f "$w"
  fi
done
python3 -m pip install -q --no-deps --no-compile --target "$tmp/site" "$tmp"/wheels/*.whl \
  --python-version 3.12 --implementation cp --only-binary=:all: \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
ray_dir="$tmp/site/ray"
rm -rf "$ray_dir"/jars "$ray_dir"/rllib "$ray_dir"/data "$ray_dir"/serve "$ray_dir"/tune "$ray_dir"/train \
       "$ray_dir"/llm "$ray_dir"/dashboard/client "$ray_dir"/tests
find "$tmp/site" -name '__pycache__' -prune -exec rm -rf {} +
tar -C "$tmp/site" -cJf .ray-gpu/ray-site.tar.xz .
cat > .ray-gpu/env.sh <<'SH'
# Sourced on the GPU machine from the project root: the project's wheels plus Ray (slimmed) into /tmp/site.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .ray-gpu/wheels/*.whl >/tmp/gpu-pip.log 2>&1 \
  || { echo "wheel install failed:"; tail -20 /tmp/gpu-pip.log; return 1 2>/dev/null || exit 1; }
tar -xJf .ray-gpu/ray-site.tar.xz -C /tmp/site || { echo "ray unpack failed"; return 1 2>/dev/null || exit 1; }
export PYTHONPATH=/tmp/site:$PWD/server${PYTHONPATH:+:$PYTHONPATH}
export PATH=/tmp/site/bin:$PATH
export PYTHONUNBUFFERED=1
SH
size=$(du -sm .ray-gpu | cut -f1)
echo "staged .ray-gpu: ${size} MiB"
[ "$size" -lt 64 ] || { echo "too large to carry (limit 64 MiB): prune more of ray/ in this script" >&2; exit 1; }

#!/usr/bin/env bash
# The main job on a fresh machine: set up, run `om bench --profile quick`
# (a fresh local 3-node cluster per flow under the same load, plus the
# in-process ceiling), then the Spark report over its traces.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# A fresh setup leaves ~900 MB of dirty pages (the new .venv) that the kernel
# writes back over the next ~30 s: the durable journals' fsyncs would wait
# behind them during the first flow. Flush them before measuring.
sync
. .venv/bin/activate
out="bench-out/quick-$(date +%Y%m%d-%H%M%S)"
om bench --profile quick --out "$out"
python -m spark_analysis "$out"
echo
echo "benchmark: $out/summary.json"
echo "report:    $out/report/index.html (and report.md)"

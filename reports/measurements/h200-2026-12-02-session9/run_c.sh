#!/usr/bin/env bash
# H200 call C (session 9), tree .whl/lead.tar: graph_window.py for MXFP8 DSv3-decode and Hy4-TP8-16tok.
# bash reports/measurements/h200-2026-12-02-session9/run_c.sh   (carry: .whl)
set -u
rm -rf /tmp/new && mkdir -p /tmp/new && tar xf .whl/lead.tar -C /tmp/new
R=/tmp/cout && mkdir -p $R
sha256sum .whl/lead.tar > "$R/c_tree.txt"
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-c
cd /tmp/new
M=reports/measurements/h200-2026-12-02-session9
SECONDS=0
for shape in DSv3-decode Hy4-TP8-16tok; do
  PYTHONPATH=/tmp/new timeout 120 python3 $M/graph_window.py mxfp8 $shape >> "$R/c_graph_window.txt" 2>&1
  echo "graph_window $shape rc=$? ${SECONDS}s" | tee -a "$R/c_rc.txt"; SECONDS=0
done
cp $R/c_rc.txt $R/c_graph_window.txt "$OUT/"

#!/usr/bin/env bash
# H200 call D (session 5): the first search in a process (profile_search.py --first), once with CUDA's default
# lazy module loading and once with CUDA_MODULE_LOADING=EAGER, then the later-search profile for contrast.
# bash reports/measurements/h200-2026-12-01-session5/run_d.sh   (carry: .whl; .whl/head.tar = git archive HEAD)
set -u
rm -rf /tmp/head && mkdir -p /tmp/head && tar xf .whl/head.tar -C /tmp/head
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-d PYTHONPATH=/tmp/head
sha256sum .whl/head.tar > "$OUT/d_tree.txt"
cd /tmp/head
P=reports/measurements/h200-2026-12-01-session5/profile_search.py
S=moe_combine.prod.s0.7.search.exact
W=moe_combine.prod.s0.7.T33K8H127.exact
SECONDS=0
timeout 120 python3 $P $S --backend gpu --top 40 --first $W > "$OUT/d_first_lazy.txt" 2>&1; echo "lazy rc=$? ${SECONDS}s" | tee -a "$OUT/d_rc.txt"; SECONDS=0
CUDA_MODULE_LOADING=EAGER timeout 120 python3 $P $S --backend gpu --top 40 --first $W > "$OUT/d_first_eager.txt" 2>&1; echo "eager rc=$? ${SECONDS}s" | tee -a "$OUT/d_rc.txt"
grep -h "s, \|profiled\|exact:" "$OUT"/d_first_*.txt | tee -a "$OUT/d_rc.txt"

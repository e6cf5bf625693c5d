#!/usr/bin/env bash
# H200 call A (session 5): why warm `make verify` is slow. Cold once (builds), then warm with 8 workers twice,
# 4 and 6 workers, and 8 workers under CUDA MPS where the daemon exists; each run's times.csv carries the
# timeline (start, worker); one searched case alone (1 worker) for its uncontended time.
# bash reports/measurements/h200-2026-12-01-session5/run_a.sh   (carry: .whl; .whl/head.tar = git archive HEAD)
set -u
rm -rf /tmp/head && mkdir -p /tmp/head && tar xf .whl/head.tar -C /tmp/head
mkdir -p /tmp/rw && for w in .whl/real-world/*.whl; do python3 -m zipfile -e "$w" /tmp/rw; done
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-verify GRAPHSAFE_SEARCH_DB=/tmp/gs-search-a
nvidia-smi --query-gpu=name,compute_mode,driver_version --format=csv > "$OUT/a_gpu.txt" 2>&1
which nvidia-cuda-mps-control >> "$OUT/a_gpu.txt" 2>&1
nproc >> "$OUT/a_gpu.txt"
cd /tmp/head
git_like=$(sha256sum "$OLDPWD/.whl/head.tar"); echo "$git_like" >> "$OUT/a_gpu.txt"
SECONDS=0
verify() {  # name, jobs
  PYTHONPATH=/tmp/rw timeout 150 python3 -m harness verify --jobs "$2" --report-dir /tmp/a_$1 > /tmp/a_$1.log 2>&1
  echo "$1 jobs=$2 verify rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"; SECONDS=0
}
timeout 200 make verify ARGS="--report-dir /tmp/a_cold" > /tmp/a_cold.log 2>&1; echo "cold rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"; SECONDS=0
verify warm8 8
verify warm8b 8
verify warm4 4
verify warm6 6
if which nvidia-cuda-mps-control > /dev/null 2>&1; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
  nvidia-cuda-mps-control -d >> "$OUT/a_rc.txt" 2>&1 && echo "mps started" >> "$OUT/a_rc.txt"
  verify mps8 8
  echo quit | nvidia-cuda-mps-control >> "$OUT/a_rc.txt" 2>&1
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
fi
PYTHONPATH=/tmp/rw timeout 60 python3 -m harness verify --jobs 1 -k "moe_combine.prod.s0.7.search.exact" --report-dir /tmp/a_alone > /tmp/a_alone.log 2>&1
echo "alone rc=$? ${SECONDS}s" | tee -a "$OUT/a_rc.txt"
grep -h "graphsafe: time\|as expected" /tmp/a_*.log | tee "$OUT/a_time_lines.txt"
tar czf "$OUT/a_all.tgz" -C /tmp $(cd /tmp && ls -d a_*)

#!/usr/bin/env bash
# H200 call E (carry .whl): the committed tree (HEAD, exported to a clean worktree so that uncommitted edits do
# not travel into the results): cold builds per family, the whole built-in suite (H200 baseline), the harness
# throughput, the real-world suite. bash reports/measurements/h200-2026-12-01-session2/run_e.sh
set -u
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-e GRAPHSAFE_SEARCH_DB=/tmp/gs-search-e
W=/tmp/we; mkdir -p $W; SRC=$PWD
git worktree add --detach /tmp/clean HEAD > $W/e_tree.txt 2>&1 && cd /tmp/clean
echo "tree: $(git rev-parse HEAD) in $PWD; dirty files: $(git status --short | wc -l)" | tee -a $W/e_tree.txt
export PYTHONPATH=$PWD
D=reports/measurements/h200-2026-12-01-session2
SECONDS=0
timeout 120 python3 $D/prebuild_all.py > $W/e_prebuild.txt 2>&1; echo "cold builds rc=$? ${SECONDS}s" | tee $W/e_rc.txt
start=$SECONDS
timeout 330 python3 -m harness verify --backend gpu -k "not real_world" --report-dir $W/verify > $W/e_verify.log 2>&1; echo "verify (built-in, warm build cache) rc=$? $((SECONDS - start))s" | tee -a $W/e_rc.txt
timeout 45 python3 bench/harness_throughput.py --backend gpu --repeats 50 > $W/e_throughput.txt 2>&1; echo "throughput rc=$? ${SECONDS}s" | tee -a $W/e_rc.txt
python3 -c "import zipfile,glob; [zipfile.ZipFile(w).extractall('/tmp/rw') for w in glob.glob('$SRC/.whl/real-world/*.whl')]"
start=$SECONDS
PYTHONPATH="$PWD:/tmp/rw" timeout 100 python3 -m harness verify --backend gpu --case cases.real_world --report-dir $W/real_world > $W/e_real_world.log 2>&1; echo "real world rc=$? $((SECONDS - start))s" | tee -a $W/e_rc.txt
cp $W/e_rc.txt $W/e_tree.txt $W/e_prebuild.txt $W/e_throughput.txt "$OUT/"
tar czf "$OUT/e_verify.tgz" -C $W e_verify.log verify
tar czf "$OUT/e_real_world.tgz" -C $W e_real_world.log real_world

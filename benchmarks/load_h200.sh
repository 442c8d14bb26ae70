#!/usr/bin/env bash
# The load runs on the 16-core GPU host, which has neither PostgreSQL, Redis nor the service's
# packages: they travel as `.pgpack/pgpack.tar.xz` (`bash benchmarks/pack_services.sh pack`) and
# `.whl/` (Python 3.12 wheels; benchmarks/README.md lists them). Run from the repository root:
#   bash benchmarks/load_h200.sh [OUT_DIR [LABEL ...]]     (no label: every run below)
# Each run writes benchmarks/results/load_service.<label>.{md,json}; OUT_DIR gets them in one
# tarball (load_results.tar.gz) and each run's log.
set -euo pipefail
out=${1:-${OUT:-/tmp/load-results}}
shift || true
only=" $* "
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
bash benchmarks/pack_services.sh start .pgpack/pgpack.tar.xz
nproc; python3 -c "import uvloop, httptools; print('uvloop', uvloop.__version__, 'httptools', httptools.__version__)"
run() {
    local label=$1; shift
    [[ "$only" == "  " || "$only" == *" $label "* ]] || return 0
    timeout 150 python3 -m benchmarks.load_service --warmup 64 --label "$label" "$@" >"$out/$label.log" 2>&1 \
        || echo "$label: exit $?"
    grep -E "submission p(50|99)|event lag p99 \(|errors \||every watcher|transactions|per process" \
        "benchmarks/results/load_service.$label.md" 2>/dev/null | sed "s/^/$label /" || tail -5 "$out/$label.log"
}
run h200 --setup distributed --api-workers 8
run h200-keys20 --setup distributed --api-workers 8 --keys 20
run h200-api4 --setup distributed --api-workers 4
run h200-embedded --setup embedded
tar -czf "$out/load_results.tar.gz" benchmarks/results/load_service.h200*

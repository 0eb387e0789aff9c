#!/usr/bin/env bash
# Measures every serving-speed target of docs/PERFORMANCE.md on this machine:
# builds Headroom, starts a trainer (the brief's 40-bucket store unless
# SCHEME names another) and a predictor on free loopback ports in a
# temporary directory, fills the store,
# and runs `headroom loadgen` for each scenario, printing its summary. The
# load generator shares the machine with the servers, as the targets say.
#
#   scripts/perf.sh                 # every scenario, RUNS runs of DURATION each
#   RUNS=1 DURATION=10s scripts/perf.sh predict-10 ingest   # some of them
#   TRAINER_FLAGS="--train-idle=true" TRAINER_ENV="GOGC=200" scripts/perf.sh retrain-serving
#                                   # other trainer flags and environment
#   PREDICTOR_FLAGS="--sync-nice 0" scripts/perf.sh retrain-serving   # other predictor flags
#   LOADGEN_FLAGS="--ingest-concurrency 4" scripts/perf.sh ingest     # other load generator flags
#   SCHEME=kv10,prefix4,prompt9 scripts/perf.sh ingest ingest-serving
#                                   # the default scheme's store, filled (FILL, 24 s here)
#
# Scenarios: predict-10, predict-100, predict-10000, ingest, ingest-serving,
# retrain-serving, benchmarks. Nothing is left running or on disk afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

RUNS=${RUNS:-3}
DURATION=${DURATION:-30s}
SCHEME=${SCHEME:-kv10,prefix4}
if [ "$SCHEME" = kv10,prefix4 ]; then
	FILL=${FILL:-6s} # 300,000 samples: every bucket full
else
	FILL=${FILL:-24s} # the 360-bucket default needs 180,000 per target
fi
scenarios=("$@")
if [ ${#scenarios[@]} -eq 0 ]; then
	scenarios=(predict-10 predict-100 predict-10000 ingest ingest-serving retrain-serving benchmarks)
fi

go build -o bin/headroom ./cmd/headroom
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
tport=$(free_port)
pport=$(free_port)
trainer=http://127.0.0.1:$tport
predictor=http://127.0.0.1:$pport

# shellcheck disable=SC2086 # TRAINER_ENV and TRAINER_FLAGS are lists
env ${TRAINER_ENV:-} bin/headroom trainer --data-dir "$work/t" --trainer-listen "127.0.0.1:$tport" --bucket-scheme "$SCHEME" \
	${TRAINER_FLAGS:-} >"$work/trainer.log" 2>&1 &
pids+=($!)
wait_for() { for _ in $(seq 1 300); do curl -fs "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "no answer from $1" >&2; exit 1; }
wait_for "$trainer/healthz"

# shellcheck disable=SC2086 # LOADGEN_FLAGS is a list
loadgen() { bin/headroom loadgen --predictor-url "$predictor" --trainer-url "$trainer" --runs "$RUNS" ${LOADGEN_FLAGS:-} "$@"; }

echo "== filling the $SCHEME store ($FILL at 50,000 samples/s) and waiting for the first bundle"
bin/headroom loadgen --rate 0 --trainer-url "$trainer" --ingest-rate 50000 --ingest-batch 1000 --duration "$FILL" \
	--warmup 0s >/dev/null
# shellcheck disable=SC2086 # PREDICTOR_FLAGS is a list
bin/headroom predictor --data-dir "$work/p" --predictor-listen "127.0.0.1:$pport" --trainer-url "$trainer" \
	--sync-interval 5s ${PREDICTOR_FLAGS:-} >"$work/predictor.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 600); do
	curl -fs "$predictor/readyz" >/dev/null 2>&1 && break
	sleep 0.1
done
curl -fs "$predictor/readyz" >/dev/null || { echo "predictor never became ready" >&2; tail "$work/predictor.log" >&2; exit 1; }
# A fresh trainer publishes a linear model at once, the trees a moment later,
# and retrains on its cadence while the fill's samples keep changing the
# store (docs/COMPATIBILITY.md, "Cold start"). Measure the model the targets
# are about, not those first swaps: wait until the trainer's version has held
# for longer than a retrain interval and the predictor serves it.
version() { curl -fs "$1/model/info" | grep -Eo '"version":[0-9]+' | head -1; }
held=0 last=$(version "$trainer")
while [ "$held" -lt 120 ]; do
	sleep 0.1
	now=$(version "$trainer")
	if [ "$now" = "$last" ]; then held=$((held + 1)); else held=0 last=$now; fi
done
for _ in $(seq 1 600); do
	[ "$(version "$predictor")" = "$last" ] && break
	sleep 0.1
done

for s in "${scenarios[@]}"; do
	echo
	case $s in
	predict-10)
		echo "== /predict/bulk/strict, 10 rows, 5,000 req/s (target: p99 <= 5 ms, no errors)"
		loadgen --rate 5000 --rows 10 --duration "$DURATION"
		;;
	predict-100)
		echo "== 100 rows, 1,000 req/s (target: p99 <= 2 ms)"
		loadgen --rate 1000 --rows 100 --duration "$DURATION"
		;;
	predict-10000)
		echo "== one 10,000-row request at a time, 2 a second (target: <= 50 ms)"
		loadgen --rate 2 --rows 10000 --duration "$DURATION"
		;;
	ingest)
		echo "== ingestion alone, batches of 1,000 (target: >= 50,000 samples/s)"
		loadgen --rate 0 --ingest-rate 50000 --ingest-batch 1000 --duration "$DURATION"
		;;
	ingest-serving)
		echo "== ingestion while serving 5,000 req/s of 10 rows, retraining as samples change"
		loadgen --rate 5000 --rows 10 --ingest-rate 50000 --ingest-batch 1000 --duration "$DURATION"
		;;
	retrain-serving)
		echo "== 5,000 req/s of 10 rows while the trainer retrains every 10 s (target: p99 <= 2x predict-10)"
		loadgen --rate 5000 --rows 10 --ingest-rate 1000 --ingest-batch 1000 --duration "$DURATION"
		;;
	benchmarks)
		echo "== benchmarks: tree evaluation, the whole handler, a full-store retrain"
		go test ./predictor -run '^$' -bench 'PredictRow|TargetPredict' -count 3
		go test ./api -run '^$' -bench 'BulkStrictHandler' -benchtime 20x -count 3
		go test ./trainer -run '^$' -bench 'RetrainFullStore/(brief|default)/retrain' -benchtime 3x
		go test ./store -run '^$' -bench 'Add1000' -benchtime 3s
		;;
	*)
		echo "unknown scenario $s" >&2
		exit 2
		;;
	esac
done

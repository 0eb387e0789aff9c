#!/usr/bin/env bash
# Times a cold start as a router sees it (docs/COMPATIBILITY.md, "Cold
# start"): a trainer and a separate predictor, empty, with default flags,
# started together on free loopback ports; SAMPLES (10) training samples
# posted in one call; then /predict/bulk/strict asked every 10 ms until it
# answers 200. Prints the time from the post to that 200, once per run, and
# with SAMPLES of 100 or more (rows enough for trees) the time until the
# trainer's /model/info shows trees on both targets.
#
#   scripts/coldstart.sh                          # RUNS (3) runs of this tree's build
#   SAMPLES=1000 scripts/coldstart.sh             # and the first trees
#   HEADROOM_BIN=/tmp/headroom-old RUNS=1 scripts/coldstart.sh   # another build
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
if [ -n "${HEADROOM_BIN:-}" ]; then
	cp "$HEADROOM_BIN" "$work/headroom"
else
	go build -o "$work/headroom" ./cmd/headroom
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_for() { for _ in $(seq 1 300); do curl -fs "$1" >/dev/null 2>&1 && return 0; sleep 0.05; done; echo "no answer from $1" >&2; exit 1; }
row='"kv_cache_percentage":0.1,"num_request_waiting":0,"num_request_running":3,"num_tokens_generated":1,"prefix_cache_score":0'
samples=${SAMPLES:-10}
entries=
for i in $(seq 1 "$samples"); do
	entries+="{$row,\"input_token_length\":$((300 + 40 * (i % 50))),\"actual_ttft_ms\":$((50 + 4 * (i % 50) + i % 7)),\"actual_tpot_ms\":$((9 + i % 3))},"
done
echo "{\"entries\":[${entries%,}]}" >"$work/samples.json"
predict="{\"requests\":[{$row,\"input_token_length\":512}]}"

for run in $(seq 1 "${RUNS:-3}"); do
	tport=$(free_port)
	pport=$(free_port)
	"$work/headroom" trainer --data-dir "$work/t$run" --trainer-listen "127.0.0.1:$tport" --log-level error &
	pids+=($!)
	"$work/headroom" predictor --data-dir "$work/p$run" --predictor-listen "127.0.0.1:$pport" \
		--trainer-url "http://127.0.0.1:$tport" --log-level error &
	pids+=($!)
	wait_for "http://127.0.0.1:$tport/healthz"
	wait_for "http://127.0.0.1:$pport/healthz"
	t0=$(date +%s%N)
	curl -fs -XPOST "http://127.0.0.1:$tport/add_training_data_bulk" -H 'Content-Type: application/json' \
		-d @"$work/samples.json" >/dev/null
	until [ "$(curl -s -o /dev/null -w '%{http_code}' -XPOST "http://127.0.0.1:$pport/predict/bulk/strict" \
		-H 'Content-Type: application/json' -d "$predict")" = 200 ]; do
		if [ $((($(date +%s%N) - t0) / 1000000000)) -ge 120 ]; then
			echo "run $run: no prediction within 120 s" >&2
			exit 1
		fi
		sleep 0.01
	done
	echo "run $run: $samples samples posted -> first 200 from /predict/bulk/strict after $((($(date +%s%N) - t0) / 1000000)) ms"
	if [ "$samples" -ge 100 ]; then
		until [ "$(curl -fs "http://127.0.0.1:$tport/model/info" | grep -o '"kind":"linear+log-trees"' | wc -l)" -ge 2 ]; do
			if [ $((($(date +%s%N) - t0) / 1000000000)) -ge 120 ]; then
				echo "run $run: no trees within 120 s (is xgboost installed?)" >&2
				exit 1
			fi
			sleep 0.01
		done
		echo "run $run: trees on both targets after $((($(date +%s%N) - t0) / 1000000)) ms"
	fi
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	pids=()
done

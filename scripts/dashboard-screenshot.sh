#!/usr/bin/env bash
# Runs a trainer and a predictor on free loopback ports in a temporary
# directory, feeds them the recorded H200 trace in slices (so several
# retrains and live error show on the plots), and takes screenshots of both
# dashboard pages with headless Chromium (apt-get install -y chromium):
#   docs/dashboard-trainer.png, docs/dashboard-predictor.png
# Takes about a minute. Servers are stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
trace=${TRACE:-../shared/data/traces/sharegpt-h200.jsonl}
slices=${SLICES:-8}
out=${OUT:-docs}
command -v chromium >/dev/null || { echo "chromium not found: apt-get install -y chromium" >&2; exit 1; }
[ -r "$trace" ] || { echo "trace $trace not found (TRACE=...)" >&2; exit 1; }

go build -o bin/headroom ./cmd/headroom
tmp=$(mktemp -d)
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
tport=$(free_port)
pport=$(free_port)
trainer=http://127.0.0.1:$tport
predictor=http://127.0.0.1:$pport

bin/headroom trainer --data-dir "$tmp/trainer" --trainer-listen "127.0.0.1:$tport" --retrain-interval 3s \
	>"$tmp/trainer.log" 2>&1 &
pids+=($!)
bin/headroom predictor --data-dir "$tmp/predictor" --predictor-listen "127.0.0.1:$pport" --trainer-url "$trainer" \
	--sync-interval 2s >"$tmp/predictor.log" 2>&1 &
pids+=($!)

wait_for() { # url
	for _ in $(seq 100); do
		curl -fs -o /dev/null "$1" && return 0
		sleep 0.1
	done
	echo "$1 did not answer; logs in $tmp" >&2
	cat "$tmp"/*.log >&2
	return 1
}
wait_for "$trainer/healthz"
wait_for "$predictor/healthz"

# The trace in slices, one every retrain interval or so: each slice is
# compared with the model of the slices before it (live error) and then
# trained on.
python3 - "$trace" "$slices" "$tmp" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
n = int(sys.argv[2])
size = (len(rows) + n - 1) // n
for i in range(n):
    with open(f"{sys.argv[3]}/slice{i}.json", "w") as f:
        json.dump({"entries": rows[i*size:(i+1)*size]}, f)
PY
for i in $(seq 0 $((slices - 1))); do
	curl -fsS -o /dev/null -XPOST "$trainer/add_training_data_bulk" -H 'Content-Type: application/json' \
		--data-binary @"$tmp/slice$i.json"
	sleep 4
done
# The last slice's retrain, and the predictor's sync of its bundle.
sleep 4

shot() { # url file height
	chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
		--disable-component-update --disable-sync --user-data-dir="$tmp/chromium" --hide-scrollbars \
		--window-size=1400,"$3" --screenshot="$2" "$1" 2>/dev/null
	echo "wrote $2"
}
shot "$trainer/" "$out/dashboard-trainer.png" 3200
shot "$predictor/" "$out/dashboard-predictor.png" 1200

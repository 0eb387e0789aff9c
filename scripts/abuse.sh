#!/usr/bin/env bash
# Measures every hostile-client case of docs/RELIABILITY.md ("Hostile
# clients and bounded resources", issue 26) on this machine: builds
# Headroom, starts a trainer (with at most NOFILE descriptors, 3,000 as in
# the issue) and a predictor as processes on free loopback ports in a
# temporary directory, fresh for each scenario, seeds them with generated
# samples (KV transfers among them), and runs `headroom abuse` for each
# scenario, printing its figures beside their targets. The clients share the machine with the
# servers. Nothing is left running or on disk afterwards.
#
#   scripts/abuse.sh                       # every scenario, DURATION each
#   DURATION=10s scripts/abuse.sh pairs-flood held-polls
#   ABUSE_FLAGS="--k 4096" scripts/abuse.sh pairs-flood    # other abuse flags
#
# Scenarios: the names `headroom abuse --help` lists. The exit status is
# non-zero if any target was not met.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

DURATION=${DURATION:-0} # 0: each scenario's own
NOFILE=${NOFILE:-3000}
go build -o bin/headroom ./cmd/headroom
scenarios=("$@")
if [ ${#scenarios[@]} -eq 0 ]; then
	mapfile -t scenarios < <(bin/headroom abuse --help 2>&1 | awk '/^  [a-z]+-?[a-z-]* +[0-9A-Za-z]/ && !/^  -/ {print $1}')
fi

work=$(mktemp -d)
pids=()
stop_servers() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	pids=()
}
cleanup() {
	stop_servers
	rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_for() { for _ in $(seq 1 300); do curl -fs "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "no answer from $1" >&2; exit 1; }

# start_servers starts a trainer and a predictor on empty data directories
# of their own: every scenario meets fresh servers, so what one scenario
# sent (a burst of poisoned samples) does not change the next one's start.
start_servers() {
	rm -rf "$work/t" "$work/p"
	tport=$(free_port)
	pport=$(free_port)
	trainer=http://127.0.0.1:$tport
	predictor=http://127.0.0.1:$pport
	(ulimit -n "$NOFILE" && exec bin/headroom trainer --data-dir "$work/t" --trainer-listen "127.0.0.1:$tport" \
		--retrain-interval 2s >"$work/trainer.log" 2>&1) &
	pids+=($!)
	wait_for "$trainer/healthz"
	bin/headroom predictor --data-dir "$work/p" --predictor-listen "127.0.0.1:$pport" --trainer-url "$trainer" \
		>"$work/predictor.log" 2>&1 &
	pids+=($!)
	wait_for "$predictor/healthz"
	echo "trainer $trainer (at most $NOFILE descriptors), predictor $predictor; the scenario runs for ${DURATION/#0/its own duration}" >&2
}

status=0
for s in "${scenarios[@]}"; do
	start_servers
	# shellcheck disable=SC2086 # ABUSE_FLAGS is a list
	nice -n 5 bin/headroom abuse --scenario "$s" --trainer-url "$trainer" --predictor-url "$predictor" \
		--duration "$DURATION" --seed-samples 4000 ${ABUSE_FLAGS:-} || status=1
	stop_servers
done
exit $status

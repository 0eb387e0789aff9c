#!/usr/bin/env bash
# Runs llm-d-router's own predictor client against freshly started Headroom
# servers (docs/COMPATIBILITY.md, "The router's own tests"):
#   1. TestLatencyPredictorIntegration against a fresh `headroom serve`;
#   2. the same against fresh split roles (a trainer and two predictors, so
#      its load-balancing subtest runs too);
#   3. its load program (tests/main.go) at TEST_QPS (default 5000) for
#      TEST_DURATION_SECONDS (default 30) against a fresh `headroom serve`,
#      counting, on the predictor, the prediction calls that failed after
#      the first second (before the first model they get 503, as they must).
# Every server starts empty, with default flags, on free loopback ports.
#
#   scripts/llmd-router.sh /path/to/llm-d-router     # or LLMD_ROUTER_DIR=...
#   TEST_QPS=1000 TEST_DURATION_SECONDS=10 scripts/llmd-router.sh ../llmd-router
#   LOAD_ONLY=1 scripts/llmd-router.sh ../llmd-router   # step 3 only
#   HEADROOM_BIN=/tmp/headroom-old scripts/llmd-router.sh ../llmd-router   # another build
#
# Without a router checkout it says so and exits 0: the router's module
# (Kubernetes' dependency tree) is not this repository's to fetch. Building
# its test binary and load program takes minutes on two cores; set
# GOFLAGS=-p=1 to spare a shared machine. Exits 1 if any step fails.
set -euo pipefail
cd "$(dirname "$0")/.."

router=${1:-${LLMD_ROUTER_DIR:-}}
pkg=pkg/epp/framework/plugins/requestcontrol/dataproducer/predictedlatency/latencypredictorclient
if [ -z "$router" ] || [ ! -d "$router/$pkg" ]; then
	echo "llmd-router: SKIPPED: no llm-d-router checkout given (argument or LLMD_ROUTER_DIR); expected $pkg inside it" >&2
	exit 0
fi
router=$(cd "$router" && pwd)
qps=${TEST_QPS:-5000}
duration=${TEST_DURATION_SECONDS:-30}

work=$(mktemp -d)
pids=()
stop_servers() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
cleanup() {
	stop_servers
	rm -rf "$work"
}
trap cleanup EXIT

echo "== building headroom and the router's client test and load program ($(cd "$router" && git rev-parse --short HEAD 2>/dev/null || echo unversioned))"
if [ -n "${HEADROOM_BIN:-}" ]; then
	cp "$HEADROOM_BIN" "$work/headroom"
else
	go build -o "$work/headroom" ./cmd/headroom
fi
(cd "$router/$pkg" && go test -c -o "$work/client.test" .)
(cd "$router/$pkg/tests" && go build -o "$work/client-load" .)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_for() { for _ in $(seq 1 300); do curl -fs "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "no answer from $1" >&2; exit 1; }
start() { # name args...
	local name=$1
	shift
	"$work/headroom" "$@" --data-dir "$work/data-$name" >"$work/$name.log" 2>&1 &
	pids+=($!)
}
serve() { # sets trainer, predictors
	local t p
	t=$(free_port)
	p=$(free_port)
	start "serve-$1" serve --trainer-listen "127.0.0.1:$t" --predictor-listen "127.0.0.1:$p"
	trainer=http://127.0.0.1:$t
	predictors=http://127.0.0.1:$p
	wait_for "$trainer/healthz"
	wait_for "$predictors/healthz"
}
split() { # sets trainer, predictors
	local t p1 p2
	t=$(free_port)
	p1=$(free_port)
	p2=$(free_port)
	trainer=http://127.0.0.1:$t
	start trainer trainer --trainer-listen "127.0.0.1:$t"
	start predictor1 predictor --predictor-listen "127.0.0.1:$p1" --trainer-url "$trainer"
	start predictor2 predictor --predictor-listen "127.0.0.1:$p2" --trainer-url "$trainer"
	predictors=http://127.0.0.1:$p1,http://127.0.0.1:$p2
	wait_for "$trainer/healthz"
	wait_for "http://127.0.0.1:$p1/healthz"
	wait_for "http://127.0.0.1:$p2/healthz"
}

failed=0
integration() { # label
	echo "== TestLatencyPredictorIntegration against $1"
	if PREDICTION_SERVER_URL=$predictors TRAINING_SERVER_URL=$trainer \
		"$work/client.test" -test.run '^TestLatencyPredictorIntegration$' -test.v >"$work/integration.log" 2>&1; then
		echo "PASS"
	else
		echo "FAIL"
		failed=1
	fi
	grep -E '^ +--- (PASS|FAIL|SKIP)' "$work/integration.log" || cat "$work/integration.log"
}

if [ -z "${LOAD_ONLY:-}" ]; then
	serve integration
	integration "a fresh headroom serve"
	stop_servers
	split
	integration "fresh split roles (a trainer, two predictors)"
	stop_servers
fi

# Prediction calls the predictor answered 200, and those it did not.
calls() {
	curl -fs "$1/metrics" | awk '/^headroom_http_requests_total\{/ && /route="\/predict/ { if (/code="200"/) ok += $NF; else bad += $NF }
		END { printf "%d %d\n", ok, bad }'
}
# Training uploads the trainer accepted.
ingests() {
	curl -fs "$1/metrics" | awk '/^headroom_http_requests_total\{/ && /route="\/add_training_data_bulk"/ && /code="202"/ { n += $NF } END { printf "%d\n", n }'
}
echo "== load program: $qps QPS for ${duration}s against a fresh headroom serve"
serve load
PREDICTION_SERVERS=$predictors TRAINING_SERVER_URL=$trainer TEST_QPS=$qps TEST_DURATION_SECONDS=$duration \
	"$work/client-load" >"$work/load.log" 2>&1 &
load=$!
t0=$(date +%s%N)
first_ok= bad_at_first_ok= bad_at_1s= first_ingest=
while kill -0 "$load" 2>/dev/null && { [ -z "$first_ok" ] || [ -z "$bad_at_1s" ]; }; do
	elapsed=$((($(date +%s%N) - t0) / 1000000))
	if [ -z "$first_ingest" ] && [ "$(ingests "$trainer")" -gt 0 ]; then first_ingest=$elapsed; fi
	read -r ok bad < <(calls "$predictors")
	if [ -z "$bad_at_1s" ] && [ "$elapsed" -ge 1000 ]; then bad_at_1s=$bad; fi
	if [ -z "$first_ok" ] && [ "$ok" -gt 0 ]; then first_ok=$elapsed bad_at_first_ok=$bad; fi
	sleep 0.02
done
wait "$load" || true # it exits 1 when any call failed, the 503s before the first model included
read -r ok bad < <(calls "$predictors")
grep -E 'TEST RESULTS' "$work/load.log" || tail -n 30 "$work/load.log"
echo "trainer: the first training samples were stored ${first_ingest:-?} ms after the load program started"
echo "predictor: $ok prediction calls answered 200, $bad refused; the first 200 came ${first_ok:-never} ms after the load program started"
echo "predictor: refused before the first 200 (no model yet: 503): ${bad_at_first_ok:-$bad}; after it: $((bad - ${bad_at_first_ok:-0}))"
echo "predictor: refused in the first second: ${bad_at_1s:-$bad}; after it: $((bad - ${bad_at_1s:-$bad}))"
if [ -z "$first_ok" ] || [ "$((bad - bad_at_first_ok))" -ne 0 ]; then
	echo "FAIL: prediction calls failed once a model was in service"
	failed=1
fi
exit "$failed"

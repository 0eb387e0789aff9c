#!/usr/bin/env bash
# The P/D demo with llm-d's own scheduler in the loop (docs/DEMO.md,
# "llm-d's scheduler in the loop"): the simulated P/D fleet routed per
# request by llm-d's scheduler under llm-d's stock P/D config with topology
# affinity ("llm-d"), under the same config with Headroom's plugins in place
# of topology affinity ("headroom", learning from its own entries), and by
# the oracle over pairs ("oracle").
#
#   scripts/llmd-pd-demo.sh --layout zones|racks|one-node|equal-links|one-rack --seed S [--no-transfer-timing] [--json]
#
# Any other argument goes to `headroom demo` (e.g. --duration 30s, --quiet).
# It builds headroom and the llmd module's sim-scheduler (llm-d's scheduler,
# served on loopback; llm-d-router's tree must be at ../shared/upstream, as
# CI lays it out), starts the sim-scheduler on a free loopback port and runs
# `headroom demo --pd LAYOUT --seed S --llmd URL`. With --json stdout is
# exactly {"layout", "seed", "configs": {"llm-d", "headroom", "oracle"}};
# --no-transfer-timing leaves actual_kv_transfer_ms out of every entry the
# trainer receives, as llm-d reports today. Set HEADROOM_BIN and
# SIM_SCHEDULER_BIN to use binaries already built.
set -euo pipefail
cd "$(dirname "$0")/.."

layout=zones
seed=1
args=()
while [ $# -gt 0 ]; do
	case $1 in
	--layout) layout=$2; shift 2 ;;
	--layout=*) layout=${1#*=}; shift ;;
	--seed) seed=$2; shift 2 ;;
	--seed=*) seed=${1#*=}; shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed -e 's/^# \{0,1\}//' -e '/^set -e/d'; exit 0 ;;
	*) args+=("$1"); shift ;;
	esac
done

if [ ! -d ../shared/upstream/llm-d-router ]; then
	echo "llmd-pd-demo: llm-d's scheduler builds from ../shared/upstream/llm-d-router, which is missing" >&2
	exit 1
fi
work=$(mktemp -d)
sched_pid=
cleanup() {
	if [ -n "$sched_pid" ]; then
		kill "$sched_pid" 2>/dev/null || true
		wait "$sched_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

headroom=${HEADROOM_BIN:-}
if [ -z "$headroom" ]; then
	headroom=$work/headroom
	go build -o "$headroom" ./cmd/headroom
fi
scheduler=${SIM_SCHEDULER_BIN:-}
if [ -z "$scheduler" ]; then
	scheduler=$work/sim-scheduler
	(cd llmd && go build -o "$scheduler" ./cmd/sim-scheduler)
fi

"$scheduler" --listen 127.0.0.1:0 >"$work/scheduler.out" 2>"$work/scheduler.err" &
sched_pid=$!
url=
for _ in $(seq 1 300); do
	url=$(sed -n 's/^listening on \(http:[^ ]*\)$/\1/p' "$work/scheduler.out")
	[ -n "$url" ] && break
	if ! kill -0 "$sched_pid" 2>/dev/null; then
		echo "llmd-pd-demo: sim-scheduler exited:" >&2
		cat "$work/scheduler.err" >&2
		exit 1
	fi
	sleep 0.1
done
if [ -z "$url" ]; then
	echo "llmd-pd-demo: sim-scheduler did not start within 30 s" >&2
	exit 1
fi

status=0
"$headroom" demo --pd "$layout" --seed "$seed" --llmd "$url" "${args[@]}" || status=$?
if [ "$status" -ne 0 ] && [ -s "$work/scheduler.err" ]; then
	echo "llmd-pd-demo: sim-scheduler's log:" >&2
	tail -n 20 "$work/scheduler.err" >&2
fi
exit "$status"

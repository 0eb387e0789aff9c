#!/usr/bin/env bash
# Sets up what the tests need and runs them: gofmt, vet (also for macOS and
# Windows), a tidy go.mod, staticcheck, no dead code, then every package's tests
# under the race detector (integration tests start their own servers and
# processes on free loopback ports), then short fuzz runs. Set
# HEADROOM_LONG_TESTS=1 for the long soak, kill and fuzz runs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
install_check_tools
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt needed on:" $unformatted >&2
	exit 1
fi
go vet ./...
# Linux is where Headroom is measured, but it builds elsewhere too (README,
# "Platforms"); these keep it so, in seconds.
GOOS=darwin go vet ./...
GOOS=windows go build ./...

# go.mod and go.sum say exactly what the code imports.
go mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy" >&2; exit 1; }
staticcheck ./...

# Dead code: functions no main program (cmd/headroom) reaches. deadcode runs
# without -test, so a function that only tests call counts as dead: tests of
# code the product never runs prove nothing about the product. Helpers for
# one package's tests belong in its _test.go files, which deadcode does not
# report on; helpers shared by several packages' tests live in test-support
# packages, which are exempt and say what they are: a name ending in "test"
# (model/modeltest, like net/http/httptest) or "testing" imported outside
# _test.go files (internal/tmpfs). scripts/deadcode.allow lists the few
# functions accepted for now, each with its reason.
support=$(go list -f '{{.ImportPath}} {{.Name}} {{join .Imports " "}}' ./... |
	awk '$2 ~ /test$/ || / testing( |$)/ { print $1 }')
allowed=$(grep -v -e '^#' -e '^$' scripts/deadcode.allow || true)
report=$(deadcode -f '{{range .Funcs}}{{$.Path}} {{$.Path}}.{{.Name}} {{.Position}}{{"\n"}}{{end}}' ./... |
	awk -v support="$support" 'BEGIN { n = split(support, s); for (i = 1; i <= n; i++) skip[s[i]] = 1 }
		!($1 in skip) { print $2, $3 }')
dead=$(awk 'NR == FNR { ok[$1] = 1; next } $1 != "" && !($1 in ok) { print $2 ": unreachable func " $1 }' \
	<(echo "$allowed") <(echo "$report"))
if [ -n "$dead" ]; then
	echo "dead code (reached by no main program; delete it, or move a test helper as above):" >&2
	echo "$dead" >&2
	exit 1
fi
stale=$(awk 'NR == FNR { if ($1 != "") live[$1] = 1; next } $1 != "" && !($1 in live)' \
	<(echo "$report") <(echo "$allowed"))
if [ -n "$stale" ]; then
	echo "note: now reached by a program, so delete from scripts/deadcode.allow:" $stale >&2
fi

# Every test runs under the race detector, and all of them: not -short,
# which skips the soak and the slow xgboost-heavy tests for quick runs while
# developing. The whole suite takes a few minutes on two cores. Each fuzz
# target's seeds and committed corpus (testdata/fuzz) run here as ordinary
# tests.
go test -race -count=1 -timeout 20m ./...
# Two modules of their own, which ./... of the main module does not reach:
# pairs/guard, the rule for extrapolated options that the llm-d plugins
# share (without dependencies), and deploy/kubernetes, the manifests' test,
# whose Kubernetes API types stay out of the main module's requirements
# (the llm-d plugins' module requires the main one, and would otherwise be
# lifted to Kubernetes versions llm-d's client does not build with).
for module in pairs/guard deploy/kubernetes; do
	(cd "$module" && go mod tidy -diff && go vet ./... && staticcheck ./... && go test -race -count=1 ./...) ||
		{ echo "module $module: not tidy, or vet, staticcheck or its tests failed" >&2; exit 1; }
done

# The llm-d plugins and the custom EPP: llmd/ is a module of its own, built
# against llm-d-router's source tree beside the repository
# (../shared/upstream/llm-d-router, as CI lays it out), so the main module
# keeps its dependencies. Its tests load the shipped EndpointPickerConfig
# into llm-d's scheduler and run a Headroom built from this repository. They
# run without the race detector: it would compile the router's whole
# dependency tree a second time (docs/PERFORMANCE.md, "CI").
llmd() {
	local unformatted
	if [ ! -d ../shared/upstream/llm-d-router ]; then
		echo "llmd/ builds against ../shared/upstream/llm-d-router, which is missing: clone the repository with shared/ beside it" >&2
		exit 1
	fi
	unformatted=$(cd llmd && gofmt -l .)
	if [ -n "$unformatted" ]; then
		echo "gofmt needed in llmd/ on:" $unformatted >&2
		exit 1
	fi
	(cd llmd && go mod tidy -diff) || { echo "llmd/go.mod is not tidy: run go mod tidy in llmd/" >&2; exit 1; }
	(cd llmd && go vet ./... && staticcheck ./...)
	go build -o "$bin/headroom" ./cmd/headroom
	(cd llmd && go build -o "$bin/headroom-epp" ./cmd/headroom-epp)
	(cd llmd && HEADROOM_BIN="$bin/headroom" go test -count=1 -timeout 20m ./...)
}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
llmd

# Fuzzing proper. The bundle reader's targets start fuzzing within a second,
# so a few seconds each find something; the request decoders' corpora take
# longer than that just to replay under coverage instrumentation, so they
# fuzz only in the long run. A failure leaves its input in testdata/fuzz.
# The quick runs are bounded by a count of inputs, not a time: Go 1.26's
# fuzz coordinator can report its own -fuzztime deadline as a failure
# ("context deadline exceeded", no input written; go.dev/issue/75804, fixed
# in Go 1.27) when workers are starved at that moment, as they are on a
# loaded machine. A count has no deadline to race; a loaded machine only
# takes longer over it.
long=${HEADROOM_LONG_TESTS:-0}
fuzz() { # package target time or count (2m, 50000x)
	go test -run='^$' -fuzz="^$2\$" -fuzztime="$3" -fuzzminimizetime=5s "./$1"
}
if [ "$long" = 1 ]; then
	for target in FuzzDecodeSamples FuzzDecodeBulkPredict FuzzDecodePredict FuzzDecodeFlush FuzzDecodePairsRequest; do
		fuzz wire "$target" 2m
	done
	fuzz internal/jsonscan FuzzScan 2m
	fuzz bundle FuzzDecodeBundle 2m
	fuzz bundle FuzzDecodeBundlePayload 2m
	fuzz trainer FuzzIngestThenGate 2m
else
	fuzz bundle FuzzDecodeBundle 100000x
	fuzz bundle FuzzDecodeBundlePayload 50000x
fi

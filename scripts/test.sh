#!/usr/bin/env bash
# Sets up what the tests need and runs them: gofmt, vet, a tidy go.mod,
# staticcheck, then every package's tests
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

# Every test runs under the race detector; the whole suite takes a few
# minutes on two cores. Each fuzz target's seeds and committed corpus
# (testdata/fuzz) run here as ordinary tests.
go test -race -count=1 -timeout 20m ./...

# Fuzzing proper. The bundle reader's targets start fuzzing within a second,
# so a few seconds each find something; the request decoders' corpora take
# longer than that just to replay under coverage instrumentation, so they
# fuzz only in the long run. A failure leaves its input in testdata/fuzz.
long=${HEADROOM_LONG_TESTS:-0}
fuzz() { # package target time
	go test -run='^$' -fuzz="^$2\$" -fuzztime="$3" -fuzzminimizetime=5s "./$1"
}
if [ "$long" = 1 ]; then
	for target in FuzzDecodeSamples FuzzDecodeBulkPredict FuzzDecodePredict FuzzDecodeFlush; do
		fuzz wire "$target" 2m
	done
	fuzz internal/jsonscan FuzzScan 2m
	fuzz model FuzzDecodeBundle 2m
	fuzz model FuzzDecodeBundlePayload 2m
else
	fuzz model FuzzDecodeBundle 5s
	fuzz model FuzzDecodeBundlePayload 5s
fi

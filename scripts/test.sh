#!/usr/bin/env bash
# Sets up what the tests need and runs them: vet, then every package's tests
# (integration tests start their own servers on free loopback ports). Set
# HEADROOM_LONG_TESTS=1 for the long soak and fuzz runs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt needed on:" $unformatted >&2
	exit 1
fi
go vet ./...
go test -count=1 -timeout 15m ./...

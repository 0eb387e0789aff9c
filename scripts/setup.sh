#!/usr/bin/env bash
# Installs what Headroom needs on a Debian machine, only where it is missing:
# the xgboost CLI (Debian package) and the Go modules; run directly, also the
# pinned checkers CI runs (staticcheck, deadcode), which scripts/test.sh
# installs through install_check_tools. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
if ! command -v go >/dev/null 2>&1; then
	echo "setup: Go is not installed. Install Go 1.26 or newer (https://go.dev/doc/install) and run again." >&2
	exit 1
fi

if ! command -v xgboost >/dev/null 2>&1; then
	echo "setup: installing the xgboost CLI (Debian package xgboost)" >&2
	if command -v apt-get >/dev/null 2>&1; then
		as_root apt-get update -qq
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq xgboost >/dev/null
	else
		echo "setup: no apt-get here; install xgboost yourself, or Headroom runs on linear models only" >&2
	fi
fi

go mod download

# The checkers scripts/test.sh runs, at pinned versions so that a new
# release's new findings arrive in a commit that says so, not in an unrelated
# CI run. They live in their own directory (not GOPATH/bin) so another
# version installed by hand is neither used nor overwritten; a binary of
# another version is replaced.
check_tools=(
	honnef.co/go/tools/cmd/staticcheck@v0.8.2
	golang.org/x/tools/cmd/deadcode@v0.52.0
)
install_check_tools() {
	local dir=${HEADROOM_TOOLS:-$(go env GOPATH)/headroom-tools}
	local tool pkg version bin
	for tool in "${check_tools[@]}"; do
		pkg=${tool%@*} version=${tool#*@} bin=$dir/${pkg##*/}
		if [ "$(go version -m "$bin" 2>/dev/null | awk '$1 == "mod" { print $3 }')" != "$version" ]; then
			echo "setup: installing $tool" >&2
			GOBIN=$dir go install "$tool"
		fi
	done
	export PATH="$dir:$PATH"
}
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	install_check_tools
fi

#!/usr/bin/env bash
# Installs what Headroom needs on a Debian machine, only where it is missing:
# the xgboost CLI (Debian package) and the Go modules. Safe to run again.
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

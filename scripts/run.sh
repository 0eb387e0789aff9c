#!/usr/bin/env bash
# Sets up (xgboost, Go modules), builds, and runs trainer and predictor in one
# process: trainer on 127.0.0.1:8000, predictor on 127.0.0.1:8001. Extra
# arguments go to `headroom serve` (see `bin/headroom serve -h`).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
go build -o bin/headroom ./cmd/headroom
exec bin/headroom serve "$@"

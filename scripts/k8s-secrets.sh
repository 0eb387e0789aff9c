#!/usr/bin/env bash
# Writes the two files the Kubernetes overlay turns into the Secret
# headroom-secrets: a bundle signing key (predictors refuse bundles not
# signed with it) and a bearer-token file. Existing files are kept, so a
# rerun never rotates a key by accident; delete them to rotate.
#
#   scripts/k8s-secrets.sh [--tokens] [DIR]
#
# DIR defaults to deploy/kubernetes/overlays/standalone/secrets. Without
# --tokens the token file is empty and the servers ask for no token: llm-d's
# router sends none, so its traffic is guarded by the network policies
# instead. With --tokens, clients must send "Authorization: Bearer TOKEN":
# the read token for predictions and model downloads, the write token for
# ingest, flush and reload.
set -euo pipefail
tokens=0
if [ "${1:-}" = --tokens ]; then
	tokens=1
	shift
fi
dir=${1:-"$(dirname "$0")/../deploy/kubernetes/overlays/standalone/secrets"}
mkdir -p "$dir"
umask 077

random() { # bytes -> URL-safe text
	head -c "$1" /dev/urandom | base64 | tr -d '\n=' | tr '+/' '-_'
}

if [ ! -s "$dir/signing-key" ]; then
	random 32 >"$dir/signing-key"
	echo "wrote $dir/signing-key"
fi
if [ ! -e "$dir/tokens" ]; then
	if [ "$tokens" = 1 ]; then
		printf 'read=%s\nwrite=%s\n' "$(random 24)" "$(random 24)" >"$dir/tokens"
	else
		printf '# No tokens: llm-d'"'"'s router sends none. Add read=TOKEN / write=TOKEN lines\n# to require them.\n' >"$dir/tokens"
	fi
	echo "wrote $dir/tokens"
fi

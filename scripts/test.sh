#!/usr/bin/env bash
# The whole test suite: static checks, every Go test with the race detector,
# and short fuzz runs. Needs Go, python3 with the AWS CLI and botocore, and
# Docker (from the agent issue on). Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
echo "== go vet"
go vet ./...

echo "== go test -race"
go test -race -count=1 -timeout 30m ./...

echo "== fuzz (brief)"
fuzz() { go test -run '^$' -fuzz "^$1\$" -fuzztime "${FUZZTIME:-15s}" "$2"; }
fuzz FuzzOperations ./internal/control
fuzz FuzzVerify ./internal/auth
fuzz FuzzCheckTask ./internal/taskdef
fuzz FuzzCheckDaemon ./internal/taskdef
echo "== all tests passed"

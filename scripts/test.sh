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
# As JSON through a filter that prints what go test would, then which tests
# skipped and why (pipefail keeps go test's status).
go test -race -count=1 -timeout 50m -json ./... | python3 scripts/gotest_summary.py

echo "== fuzz (brief)"
# Budgets are counts of inputs (about 15 s each here), not durations: with a
# duration, Go 1.26's fuzz coordinator can fail a target that found nothing
# with "context deadline exceeded" as the time runs out (go.dev/issue/75804,
# fixed in Go 1.27). FUZZTIME overrides every budget (e.g. 2m, or 10000x).
fuzz() { go test -run '^$' -fuzz "^$1\$" -fuzztime "${FUZZTIME:-$3}" "$2"; }
fuzz FuzzOperations ./internal/ops 90000x
fuzz FuzzVerify ./internal/auth 120000x
fuzz FuzzCheckTask ./internal/taskdef 1000000x
fuzz FuzzCheckDaemon ./internal/taskdef 1000000x
fuzz FuzzParse ./internal/iam/policy 200000x
fuzz FuzzPresize ./internal/codec 100000x
echo "== all tests passed"

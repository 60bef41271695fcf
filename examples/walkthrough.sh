#!/usr/bin/env bash
# Managed daemons walk-through with the stock AWS CLI against Capstan:
# register a daemon task definition, create a cluster and a managed-instances
# capacity provider, create a daemon, roll out a new revision, delete it.
#
#   CAPSTAN_ENDPOINT=http://127.0.0.1:8080 examples/walkthrough.sh
#
# Credentials come from the usual AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
# (the Capstan admin credential). Run it against a fresh server: it checks
# revision numbers 1 and 2 of the task definition family it registers.
set -euo pipefail

: "${CAPSTAN_ENDPOINT:?set CAPSTAN_ENDPOINT to the Capstan API URL, e.g. http://127.0.0.1:8080}"
export AWS_PAGER=""

# Input files are referenced relative to the repository root, as in the docs.
cd "$(dirname "$0")/.."

CLUSTER=walkthrough
CAPACITY_PROVIDER=walkthrough-mi
FAMILY=cloudwatch-agent
DAEMON=cloudwatch-agent

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'echo "walkthrough: FAILED: command at line $LINENO exited non-zero" >&2' ERR

step=0
step() {
	step=$((step + 1))
	printf '\n==> %d. %s\n' "$step" "$*"
}

die() {
	echo "walkthrough: FAILED: $*" >&2
	exit 1
}

# expect NAME GOT WANT
expect() {
	if [[ "$2" != "$3" ]]; then
		die "$1 is '$2', want '$3'"
	fi
	echo "    ok: $1 = $2"
}

# ecs runs one AWS CLI call against the endpoint and echoes it to stderr.
ecs() {
	echo "    \$ aws ecs $*" >&2
	aws ecs "$@" --endpoint-url "$CAPSTAN_ENDPOINT" --region us-east-1
}

# render TEMPLATE OUT KEY=VALUE... replaces {{KEY}} placeholders.
render() {
	python3 - "$@" <<'PY'
import sys
src, dst, *pairs = sys.argv[1:]
text = open(src).read()
for pair in pairs:
    key, value = pair.split("=", 1)
    text = text.replace("{{" + key + "}}", value)
if "{{" in text:
    sys.exit(f"{src}: placeholder left unfilled")
open(dst, "w").write(text)
PY
}

step "Check the server is fresh"
existing=$(ecs list-daemon-task-definitions --family "$FAMILY" --status ALL \
	--query 'length(daemonTaskDefinitions)' --output text)
if [[ "$existing" != 0 ]]; then
	die "family $FAMILY already has revisions on $CAPSTAN_ENDPOINT; run the walk-through against a fresh server"
fi
echo "    ok: no $FAMILY revisions yet"

step "Register the daemon task definition (revision 1)"
td1=$(ecs register-daemon-task-definition --cli-input-json file://examples/cloudwatch-agent-daemon.json \
	--query daemonTaskDefinitionArn --output text)
echo "    daemon task definition: $td1"
out=$(ecs describe-daemon-task-definition --daemon-task-definition "$td1" \
	--query 'daemonTaskDefinition.[revision, status, containerDefinitions[0].privileged]' --output text)
read -r rev status privileged <<<"$out"
expect revision "$rev" 1
expect status "$status" ACTIVE
expect privileged "$privileged" True
expect "arn suffix" "${td1##*:}" 1

step "Create the cluster"
out=$(ecs create-cluster --cluster-name "$CLUSTER" \
	--query 'cluster.[clusterArn, status]' --output text)
read -r cluster_arn status <<<"$out"
echo "    cluster: $cluster_arn"
expect status "$status" ACTIVE

step "Create the managed-instances capacity provider"
out=$(ecs create-capacity-provider --cli-input-json file://examples/capacity-provider.json \
	--query 'capacityProvider.[capacityProviderArn, type]' --output text)
read -r cp_arn cp_type <<<"$out"
echo "    capacity provider: $cp_arn"
expect type "$cp_type" MANAGED_INSTANCES

step "Associate the capacity provider with the cluster"
providers=$(ecs put-cluster-capacity-providers --cluster "$CLUSTER" \
	--capacity-providers "$CAPACITY_PROVIDER" --default-capacity-provider-strategy '[]' \
	--query 'cluster.capacityProviders' --output text)
expect "cluster capacity providers" "$providers" "$CAPACITY_PROVIDER"

step "Create the daemon"
render examples/daemon.json "$work/daemon.json" \
	CLUSTER_ARN="$cluster_arn" DAEMON_TASK_DEFINITION_ARN="$td1" CAPACITY_PROVIDER_ARN="$cp_arn"
out=$(ecs create-daemon --cli-input-json "file://$work/daemon.json" \
	--query '[daemonArn, status, deploymentArn]' --output text)
read -r daemon_arn status create_dep <<<"$out"
echo "    daemon: $daemon_arn"
echo "    deployment: $create_dep"
expect status "$status" ACTIVE

step "Wait for the initial deployment"
ecs wait daemon-deployment-successful --daemon-deployment-arns "$create_dep"
echo "    ok: deployment SUCCESSFUL"

step "List daemons in the cluster"
listed=$(ecs list-daemons --cluster-arn "$cluster_arn" \
	--query "daemonSummariesList[?daemonArn=='$daemon_arn'].status | [0]" --output text)
expect "listed status" "$listed" ACTIVE

step "Describe the daemon"
out=$(ecs describe-daemon --daemon-arn "$daemon_arn" \
	--query 'daemon.[status, deploymentArn, clusterArn]' --output text)
read -r status dep cl <<<"$out"
expect status "$status" ACTIVE
expect deploymentArn "$dep" "$create_dep"
expect clusterArn "$cl" "$cluster_arn"

step "Register revision 2 of the daemon task definition (new image)"
python3 - examples/cloudwatch-agent-daemon.json "$work/cloudwatch-agent-daemon-2.json" <<'PY'
import json, sys
td = json.load(open(sys.argv[1]))
td["containerDefinitions"][0]["image"] = "capstan/cloudwatch-agent:2"
json.dump(td, open(sys.argv[2], "w"), indent=4)
PY
td2=$(ecs register-daemon-task-definition --cli-input-json "file://$work/cloudwatch-agent-daemon-2.json" \
	--query daemonTaskDefinitionArn --output text)
echo "    daemon task definition: $td2"
rev=$(ecs describe-daemon-task-definition --daemon-task-definition "$td2" \
	--query daemonTaskDefinition.revision --output text)
expect revision "$rev" 2

step "Update the daemon to revision 2"
out=$(ecs update-daemon --daemon-arn "$daemon_arn" \
	--daemon-task-definition-arn "$td2" --capacity-provider-arns "$cp_arn" \
	--query '[status, deploymentArn]' --output text)
read -r status update_dep <<<"$out"
echo "    deployment: $update_dep"
expect status "$status" ACTIVE
[[ "$update_dep" != "$create_dep" ]] || die "update-daemon returned the create deployment $create_dep"

step "Describe the update deployment"
out=$(ecs describe-daemon-deployments --daemon-deployment-arns "$update_dep" \
	--query 'daemonDeployments[0].[deploymentConfiguration.drainPercent, deploymentConfiguration.bakeTimeInMinutes, length(sourceDaemonRevisions), targetDaemonRevision.arn]' \
	--output text)
read -r drain bake sources target_rev <<<"$out"
expect drainPercent "$(printf '%.1f' "$drain")" 25.0
expect bakeTimeInMinutes "$bake" 0
expect "source revisions" "$sources" 1

step "Wait for the update deployment"
ecs wait daemon-deployment-successful --daemon-deployment-arns "$update_dep"
status=$(ecs describe-daemon-deployments --daemon-deployment-arns "$update_dep" \
	--query 'daemonDeployments[0].status' --output text)
expect status "$status" SUCCESSFUL

step "Check the daemon now runs revision 2"
out=$(ecs describe-daemon-revisions --daemon-revision-arns "$target_rev" \
	--query 'daemonRevisions[0].[daemonTaskDefinitionArn, containerImages[0].image]' --output text)
read -r rev_td image <<<"$out"
expect daemonTaskDefinitionArn "$rev_td" "$td2"
expect image "$image" capstan/cloudwatch-agent:2
dep=$(ecs describe-daemon --daemon-arn "$daemon_arn" --query daemon.deploymentArn --output text)
expect "daemon deploymentArn" "$dep" "$update_dep"

step "Delete the daemon"
out=$(ecs delete-daemon --daemon-arn "$daemon_arn" \
	--query '[status, deploymentArn]' --output text)
read -r status delete_dep <<<"$out"
echo "    deployment: $delete_dep"
expect status "$status" DELETE_IN_PROGRESS

step "Wait for the delete deployment"
ecs wait daemon-deployment-successful --daemon-deployment-arns "$delete_dep"
echo "    ok: deployment SUCCESSFUL"

step "Check the daemon is gone"
if out=$(ecs describe-daemon --daemon-arn "$daemon_arn" 2>&1); then
	die "describe-daemon still succeeds after delete: $out"
fi
if [[ "$out" != *DaemonNotFoundException* ]]; then
	die "describe-daemon failed without DaemonNotFoundException: $out"
fi
echo "    ok: DaemonNotFoundException"

printf '\nwalkthrough: all steps passed\n'

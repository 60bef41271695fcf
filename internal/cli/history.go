package cli

// A daemon's history: its revisions (from its deployments' targets and
// sources) with the deployments that went to each, and the names a person
// gives a revision (short ID, family:revision, history number).

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// historyEntry is one revision of a daemon.
type historyEntry struct {
	// Number counts revisions from 1, the oldest.
	Number            int                 `json:"number"`
	DaemonRevisionArn string              `json:"daemonRevisionArn"`
	TaskDefinition    string              `json:"taskDefinition"` // family:revision
	TaskDefinitionArn string              `json:"daemonTaskDefinitionArn"`
	CreatedAt         time.Time           `json:"createdAt"`
	Current           bool                `json:"current"`
	Deployments       []historyDeployment `json:"deployments"` // newest first
}

type historyDeployment struct {
	DaemonDeploymentArn string    `json:"daemonDeploymentArn"`
	Status              string    `json:"status"`
	StatusReason        string    `json:"statusReason,omitempty"`
	CreatedAt           time.Time `json:"createdAt"`
	FinishedAt          time.Time `json:"finishedAt,omitzero"`
}

// daemonDeploymentsAll lists and describes every deployment of a daemon,
// newest first.
func daemonDeploymentsAll(ctx context.Context, c *ecs.Client, daemonArn string) ([]types.DaemonDeployment, error) {
	in := &ecs.ListDaemonDeploymentsInput{DaemonArn: aws.String(daemonArn)}
	var arns []string
	for {
		page, err := c.ListDaemonDeployments(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, d := range page.DaemonDeployments {
			arns = append(arns, str(d.DaemonDeploymentArn))
		}
		if aws.ToString(page.NextToken) == "" {
			break
		}
		in.NextToken = page.NextToken
	}
	var deps []types.DaemonDeployment
	for i := 0; i < len(arns); i += 20 {
		out, err := c.DescribeDaemonDeployments(ctx, &ecs.DescribeDaemonDeploymentsInput{DaemonDeploymentArns: arns[i:min(i+20, len(arns))]})
		if err != nil {
			return nil, err
		}
		deps = append(deps, out.DaemonDeployments...)
	}
	order := make(map[string]int, len(arns))
	for i, a := range arns {
		order[a] = i
	}
	slices.SortStableFunc(deps, func(a, b types.DaemonDeployment) int {
		return order[str(a.DaemonDeploymentArn)] - order[str(b.DaemonDeploymentArn)]
	})
	return deps, nil
}

// describeRevisions describes daemon revisions 20 at a time; ones that
// are gone are left out.
func describeRevisions(ctx context.Context, c *ecs.Client, arns []string) ([]types.DaemonRevision, error) {
	var out []types.DaemonRevision
	for i := 0; i < len(arns); i += 20 {
		d, err := c.DescribeDaemonRevisions(ctx, &ecs.DescribeDaemonRevisionsInput{DaemonRevisionArns: arns[i:min(i+20, len(arns))]})
		if err != nil {
			return nil, err
		}
		out = append(out, d.DaemonRevisions...)
	}
	return out, nil
}

// revisionLabels maps revision ARNs to the family:revision of their
// daemon task definitions, adding to known the ones it lacks.
func revisionLabels(ctx context.Context, c *ecs.Client, known map[string]string, arns ...string) error {
	var missing []string
	for _, a := range arns {
		if _, ok := known[a]; !ok && a != "" && !slices.Contains(missing, a) {
			missing = append(missing, a)
		}
	}
	revs, err := describeRevisions(ctx, c, missing)
	if err != nil {
		return err
	}
	for _, r := range revs {
		known[str(r.DaemonRevisionArn)] = taskDefName(str(r.DaemonTaskDefinitionArn))
	}
	return nil
}

// revText is a revision's short ID with its task definition beside it.
func revText(arn string, labels map[string]string) string {
	if arn == "" {
		return ""
	}
	if l := labels[arn]; l != "" {
		return lastSegment(arn) + " (" + l + ")"
	}
	return lastSegment(arn)
}

// daemonHistory builds a daemon's history, newest revision first.
func daemonHistory(ctx context.Context, c *ecs.Client, daemonArn string) ([]historyEntry, error) {
	d, err := c.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(daemonArn)})
	if err != nil {
		return nil, err
	}
	deps, err := daemonDeploymentsAll(ctx, c, daemonArn)
	if err != nil {
		return nil, err
	}
	byRev := map[string][]historyDeployment{}
	var arns []string
	note := func(arn string) {
		if arn != "" && !slices.Contains(arns, arn) {
			arns = append(arns, arn)
		}
	}
	for _, dep := range deps {
		for _, src := range dep.SourceDaemonRevisions {
			note(str(src.Arn))
		}
		if dep.TargetDaemonRevision == nil {
			continue
		}
		target := str(dep.TargetDaemonRevision.Arn)
		note(target)
		hd := historyDeployment{DaemonDeploymentArn: str(dep.DaemonDeploymentArn), Status: string(dep.Status), StatusReason: str(dep.StatusReason),
			CreatedAt: aws.ToTime(dep.CreatedAt), FinishedAt: aws.ToTime(dep.FinishedAt)}
		byRev[target] = append(byRev[target], hd)
	}
	// The daemon's current revisions may predate every listed deployment.
	for _, r := range d.Daemon.CurrentRevisions {
		note(str(r.Arn))
	}
	revs, err := describeRevisions(ctx, c, arns)
	if err != nil {
		return nil, err
	}
	// Revision IDs sort by creation time.
	slices.SortFunc(revs, func(a, b types.DaemonRevision) int {
		if n := aws.ToTime(a.CreatedAt).Compare(aws.ToTime(b.CreatedAt)); n != 0 {
			return n
		}
		return strings.Compare(str(a.DaemonRevisionArn), str(b.DaemonRevisionArn))
	})
	current := ""
	if len(deps) > 0 && deps[0].TargetDaemonRevision != nil {
		current = str(deps[0].TargetDaemonRevision.Arn)
	}
	out := make([]historyEntry, 0, len(revs))
	for i, r := range revs {
		arn := str(r.DaemonRevisionArn)
		ds := byRev[arn]
		if ds == nil {
			ds = []historyDeployment{}
		}
		out = append(out, historyEntry{Number: i + 1, DaemonRevisionArn: arn, TaskDefinitionArn: str(r.DaemonTaskDefinitionArn),
			TaskDefinition: taskDefName(str(r.DaemonTaskDefinitionArn)), CreatedAt: aws.ToTime(r.CreatedAt), Current: arn == current, Deployments: ds})
	}
	slices.Reverse(out)
	return out, nil
}

// findRevision resolves what a person calls a revision: its ARN, its short
// ID, family:revision of its task definition (the newest such revision,
// not the current one) or its history number.
func findRevision(hist []historyEntry, ref string) (historyEntry, error) {
	for _, h := range hist {
		if h.DaemonRevisionArn == ref || lastSegment(h.DaemonRevisionArn) == ref {
			return h, nil
		}
	}
	// Short IDs are digits too, but far longer than a history.
	if n, err := strconv.Atoi(ref); err == nil {
		for _, h := range hist {
			if h.Number == n {
				return h, nil
			}
		}
		return historyEntry{}, usageErrorf("--to-revision %s: the history numbers revisions 1 to %d", ref, len(hist))
	}
	if strings.HasPrefix(ref, "arn:") {
		return historyEntry{DaemonRevisionArn: ref}, nil // the server judges it
	}
	var found []historyEntry
	for _, h := range hist {
		if h.TaskDefinition == ref || h.TaskDefinitionArn == ref {
			found = append(found, h)
		}
	}
	for _, h := range found { // newest first
		if !h.Current {
			return h, nil
		}
	}
	if len(found) > 0 {
		return historyEntry{}, usageErrorf("--to-revision %s: that is the task definition of the current revision (#%d); name an earlier one", ref, found[0].Number)
	}
	return historyEntry{}, usageErrorf("--to-revision %q: no revision in the daemon's history has that ID, task definition or number (see capstan daemon history)", ref)
}

func daemonHistoryVerb(fs *flag.FlagSet) action {
	return daemonRefAction(fs, func(ctx context.Context, s *session, c *ecs.Client, arn string) error {
		hist, err := daemonHistory(ctx, c, arn)
		if err != nil {
			return err
		}
		if s.json() {
			b, err := json.MarshalIndent(map[string]any{"daemonArn": arn, "revisions": hist}, "", "  ")
			if err != nil {
				return err
			}
			_, err = s.stdout.Write(append(b, '\n'))
			return err
		}
		printHistory(s.stdout, hist)
		return nil
	})
}

func printHistory(w io.Writer, hist []historyEntry) {
	tw := newTable(w, "#", "REVISION", "TASK DEFINITION", "CREATED", "DEPLOYMENTS")
	for _, h := range hist {
		num := strconv.Itoa(h.Number)
		if h.Current {
			num += "*"
		}
		var deps []string
		for _, d := range h.Deployments {
			deps = append(deps, lastSegment(d.DaemonDeploymentArn)+" "+d.Status)
		}
		row(tw, num, lastSegment(h.DaemonRevisionArn), h.TaskDefinition, ts(&h.CreatedAt), strings.Join(deps, ", "))
	}
	tw.Flush()
	fmt.Fprintln(w, "\n* the latest deployment's target. Roll back with: capstan daemon rollback NAME --to-revision NUMBER|ID|FAMILY:REVISION")
}

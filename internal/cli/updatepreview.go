package cli

// An update's dry run (--dry-run): the server's preview, shown as a diff
// and the batches it would replace.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/smithy-go"
)

// wireJSON is the request body the SDK would send for v: members it
// leaves out stay out, so the server sees exactly what UpdateDaemon would.
func wireJSON(v smithy.Serializable) ([]byte, error) {
	w := &shapeWriter{}
	v.Serialize(w)
	if w.root == nil {
		return []byte("{}"), nil
	}
	return json.Marshal(w.root)
}

// preview is CapstanV1.PreviewDaemonUpdate's answer.
type preview struct {
	DaemonArn          string          `json:"daemonArn"`
	CurrentRevisionArn string          `json:"currentRevisionArn"`
	IfRevisionArn      string          `json:"ifRevisionArn"`
	Resets             []settingChange `json:"resets"`
	Changes            []settingChange `json:"changes"`
	// TaskDefinitionChanges: the task definition's fields that change.
	TaskDefinitionChanges []fieldChange `json:"taskDefinitionChanges"`
	InstancesInScope      int           `json:"instancesInScope"`
	InstancesToReplace    int           `json:"instancesToReplace"`
	DrainPercent          float64       `json:"drainPercent"`
	BatchSize             int           `json:"batchSize"`
	Batches               []struct {
		Instances []struct {
			ContainerInstanceArn string `json:"containerInstanceArn"`
			CapacityProviderName string `json:"capacityProviderName"`
			InPlace              bool   `json:"inPlace"`
		} `json:"instances"`
		ExtraCPU    int64 `json:"extraCpu"`
		ExtraMemory int64 `json:"extraMemory"`
	} `json:"batches"`
}

type fieldChange struct {
	Field   string `json:"field"`
	Change  string `json:"change"`
	Current any    `json:"current"`
	New     any    `json:"new"`
}

type settingChange struct {
	Setting string   `json:"setting"`
	Current any      `json:"current"`
	New     any      `json:"new"`
	Added   []string `json:"added"`
	Removed []string `json:"removed"`
}

func (s *session) previewUpdate(ctx context.Context, in *ecs.UpdateDaemonInput) error {
	body, err := wireJSON(in)
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if err := s.callExtension(ctx, "PreviewDaemonUpdate", json.RawMessage(body), &raw); err != nil {
		return err
	}
	if s.json() {
		return s.printRaw(raw)
	}
	var p preview
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("PreviewDaemonUpdate: %w", err)
	}
	renderPreview(s.stdout, &p)
	return nil
}

// renderPreview prints a dry run: the silent resets first, then the diff
// and the batches.
func renderPreview(w io.Writer, p *preview) {
	cluster, name := daemonClusterName(p.DaemonArn)
	fmt.Fprintf(w, "Dry run: nothing was changed. UpdateDaemon on %s/%s would start a deployment\nfrom revision %s.\n",
		cluster, name, lastSegment(p.CurrentRevisionArn))
	if p.IfRevisionArn != "" {
		fmt.Fprintf(w, "To apply exactly this, run the same command without --dry-run, with --if-unchanged %s.\n", lastSegment(p.IfRevisionArn))
	}
	fmt.Fprintln(w)
	if len(p.Resets) > 0 {
		fmt.Fprintf(w, "WARNING: %d setting(s) would silently return to their defaults (omitted from the request;\nUpdateDaemon replaces the whole configuration):\n", len(p.Resets))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, c := range p.Resets {
			fmt.Fprintf(tw, "  !\t%s\t%s -> %s\n", c.Setting, valueText(c.Setting, c.Current), valueText(c.Setting, c.New))
		}
		tw.Flush()
		fmt.Fprintln(w, "Give them explicitly, or add --keep-unspecified to keep the current values.")
		fmt.Fprintln(w)
	}
	if len(p.Changes) == 0 {
		fmt.Fprintln(w, "Changes: none; the deployment still replaces every instance in scope.")
	} else {
		fmt.Fprintln(w, "Changes against the current revision:")
		tw := newTable(w, "  SETTING", "CURRENT", "NEW")
		for _, c := range p.Changes {
			nw := valueText(c.Setting, c.New)
			var notes []string
			if len(c.Added) > 0 {
				notes = append(notes, "added "+valueText(setCapacity, toAny(c.Added)))
			}
			if len(c.Removed) > 0 {
				notes = append(notes, "removed "+valueText(setCapacity, toAny(c.Removed)))
			}
			if len(notes) > 0 {
				nw += " (" + strings.Join(notes, "; ") + ")"
			}
			if isReset(p, c.Setting) {
				nw += " (default)"
			}
			row(tw, "  "+c.Setting, valueText(c.Setting, c.Current), nw)
		}
		tw.Flush()
	}
	if len(p.TaskDefinitionChanges) > 0 {
		fmt.Fprintln(w, "\nTask definition, field by field (+ added, - removed, ~ changed):")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, c := range p.TaskDefinitionChanges {
			switch c.Change {
			case "added":
				fmt.Fprintf(tw, "  +\t%s\t%s\n", c.Field, fieldText(c.New))
			case "removed":
				fmt.Fprintf(tw, "  -\t%s\t%s\n", c.Field, fieldText(c.Current))
			default:
				fmt.Fprintf(tw, "  ~\t%s\t%s -> %s%s\n", c.Field, fieldText(c.Current), fieldText(c.New), direction(c.Current, c.New))
			}
		}
		tw.Flush()
	}
	fmt.Fprintln(w)
	if p.InstancesInScope == 0 {
		fmt.Fprintln(w, "Rollout: no instances in scope; the deployment would complete at once.")
		return
	}
	fmt.Fprintf(w, "Rollout: %d instance(s) in scope, %d to replace, %d per batch (drainPercent %s), %d batch(es).\n",
		p.InstancesInScope, p.InstancesToReplace, p.BatchSize, strconv.FormatFloat(p.DrainPercent, 'f', -1, 64), len(p.Batches))
	fmt.Fprintln(w, "Instances Capstan provisioned get a same-size replacement before their tasks move; instances")
	fmt.Fprintln(w, "started by hand are updated in place. Extra capacity per batch, in replacement order:")
	tw := newTable(w, "  BATCH", "EXTRA CPU", "EXTRA MEMORY (MiB)", "INSTANCES")
	for i, b := range p.Batches {
		var ids []string
		for _, in := range b.Instances {
			how := in.CapacityProviderName
			if in.InPlace {
				how += ", in place"
			}
			ids = append(ids, lastSegment(in.ContainerInstanceArn)+" ("+how+")")
		}
		row(tw, "  "+strconv.Itoa(i+1), strconv.FormatInt(b.ExtraCPU, 10), strconv.FormatInt(b.ExtraMemory, 10), strings.Join(ids, ", "))
	}
	tw.Flush()
}

func isReset(p *preview, setting string) bool {
	return slices.ContainsFunc(p.Resets, func(c settingChange) bool { return c.Setting == setting })
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// valueText shows a setting's value from the preview JSON compactly: names
// instead of ARNs.
func valueText(setting string, v any) string {
	switch x := v.(type) {
	case nil:
		if setting == setAlarms {
			return "off"
		}
		return "none"
	case string:
		switch setting {
		case setTaskDef:
			fam, rev := familyRevision(x)
			return fam + ":" + rev
		case setCapacity:
			return lastSegment(x)
		}
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			parts = append(parts, valueText(setting, e))
		}
		return strings.Join(parts, ", ")
	case map[string]any:
		if setting == setAlarms {
			state := "off"
			if on, _ := x["enable"].(bool); on {
				state = "on"
			}
			names, _ := x["alarmNames"].([]any)
			return state + ": " + valueText("", names)
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// fieldText shows a task definition value: NAME=VALUE for a variable,
// plain text for a string, JSON otherwise.
func fieldText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case map[string]any:
		n, nok := x["name"].(string)
		val, vok := x["value"].(string)
		if nok && vok && len(x) == 2 {
			return n + "=" + val
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// direction says whether a number (memory, CPU; the API gives task sizes
// as strings) went up or down.
func direction(a, b any) string {
	num := func(v any) (float64, bool) {
		switch x := v.(type) {
		case float64:
			return x, true
		case string:
			f, err := strconv.ParseFloat(x, 64)
			return f, err == nil
		}
		return 0, false
	}
	x, ok1 := num(a)
	y, ok2 := num(b)
	switch {
	case !ok1 || !ok2 || x == y:
		return ""
	case y > x:
		return " (raised)"
	}
	return " (lowered)"
}

// updateIfUnchanged sends the update through CapstanV1.UpdateDaemonIfUnchanged:
// the server applies it only if the daemon's latest revision is still rev.
func (s *session) updateIfUnchanged(ctx context.Context, in *ecs.UpdateDaemonInput, rev string) (*ecs.UpdateDaemonOutput, error) {
	if !strings.HasPrefix(rev, "arn:") {
		// A short ID: the revision ARN is the daemon's, one level down.
		rev = strings.Replace(aws.ToString(in.DaemonArn), ":daemon/", ":daemon-revision/", 1) + "/" + rev
	}
	body, err := wireJSON(in)
	if err != nil {
		return nil, err
	}
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	req["ifRevisionArn"], _ = json.Marshal(rev)
	var out struct {
		DaemonArn     string `json:"daemonArn"`
		Status        string `json:"status"`
		CreatedAt     epoch  `json:"createdAt"`
		UpdatedAt     epoch  `json:"updatedAt"`
		DeploymentArn string `json:"deploymentArn"`
	}
	if err := s.callExtension(ctx, "UpdateDaemonIfUnchanged", req, &out); err != nil {
		return nil, err
	}
	return &ecs.UpdateDaemonOutput{DaemonArn: aws.String(out.DaemonArn), Status: types.DaemonStatus(out.Status),
		CreatedAt: aws.Time(out.CreatedAt.Time), UpdatedAt: aws.Time(out.UpdatedAt.Time), DeploymentArn: aws.String(out.DeploymentArn)}, nil
}

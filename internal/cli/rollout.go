package cli

// Seeing a daemon rollout: preview an update before it starts (--dry-run),
// repeat the settings an update does not change (--keep-unspecified),
// follow a deployment to its end (--wait, rollout status) and roll back.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/smithy-go"
)

// Exit codes of commands that follow a deployment. 1 and 2 keep their
// meaning (request failed, bad command line), so CI can tell them apart.
const (
	exitRolledBack     = 3 // ROLLBACK_SUCCESSFUL
	exitRollbackFailed = 4 // ROLLBACK_FAILED
	exitStopped        = 5 // STOPPED
	exitTimeout        = 6 // --timeout passed first
)

const followHelp = `
Following a deployment (--wait, rollout status) shows, per capacity
provider, the instances on the target revision, draining and launching; the
circuit breaker's failures against its threshold; the alarms; the bake time
left; and, when the rollout does not progress, why. On a terminal the block
is redrawn in place; otherwise one line is printed per change (with -o json,
one JSON object per change). It exits with:
  0  SUCCESSFUL
  1  a request failed
  2  the command line is wrong
  3  ROLLBACK_SUCCESSFUL: the deployment failed and was rolled back
  4  ROLLBACK_FAILED: the deployment failed and so did its rollback
  5  STOPPED: superseded by a newer deployment, or stopped at its progress deadline
  6  --timeout passed before the deployment ended (it goes on)`

// exitStatus ends a command with a code of its own; msg goes to stderr.
type exitStatus struct {
	code int
	msg  string
}

func (e *exitStatus) Error() string { return e.msg }

// rolloutPoll is how often a followed deployment is read.
var rolloutPoll = time.Second

// Settings of an update, named as the UpdateDaemon request members (the
// server's preview uses the same names).
const (
	setTaskDef     = "daemonTaskDefinitionArn"
	setCapacity    = "capacityProviderArns"
	setDrain       = "deploymentConfiguration.drainPercent"
	setBake        = "deploymentConfiguration.bakeTimeInMinutes"
	setAlarms      = "deploymentConfiguration.alarms"
	setCritical    = "critical"
	setPropagate   = "propagateTags"
	setManagedTags = "enableECSManagedTags"
	setExecute     = "enableExecuteCommand"
)

// settingFlags maps daemon flags to the settings they give.
var settingFlags = map[string]string{
	"task-definition": setTaskDef, "capacity-provider": setCapacity, "drain-percent": setDrain, "bake-time": setBake,
	"critical": setCritical, "no-critical": setCritical, "propagate-tags": setPropagate,
	"enable-ecs-managed-tags": setManagedTags, "enable-execute-command": setExecute,
}

// readUpdateFile decodes an UpdateDaemon request file and names the
// settings it gives: members present and not null, in any case (as
// decodeInput matches them).
func readUpdateFile(path string, stdin io.Reader, in *ecs.UpdateDaemonInput) (map[string]bool, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	if err := decodeInput(data, in); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var doc map[string]any
	json.Unmarshal(data, &doc) // decodeInput accepted it
	given := map[string]bool{}
	for k, v := range doc {
		if v == nil {
			continue
		}
		switch strings.ToLower(k) {
		case "daemontaskdefinitionarn":
			given[setTaskDef] = true
		case "capacityproviderarns":
			given[setCapacity] = true
		case "critical":
			given[setCritical] = true
		case "propagatetags":
			given[setPropagate] = true
		case "enableecsmanagedtags":
			given[setManagedTags] = true
		case "enableexecutecommand":
			given[setExecute] = true
		case "deploymentconfiguration":
			m, _ := v.(map[string]any)
			for k, v := range m {
				if v == nil {
					continue
				}
				switch strings.ToLower(k) {
				case "drainpercent":
					given[setDrain] = true
				case "baketimeinminutes":
					given[setBake] = true
				case "alarms":
					given[setAlarms] = true
				}
			}
		}
	}
	return given, nil
}

// keepUnspecified copies into in every setting not given from cur, the
// current configuration, and returns the settings it copied.
func keepUnspecified(in, cur *ecs.UpdateDaemonInput, given map[string]bool) map[string]bool {
	kept := map[string]bool{}
	keep := func(name string, copy func()) {
		if !given[name] {
			copy()
			kept[name] = true
		}
	}
	cdc := cur.DeploymentConfiguration
	if cdc == nil {
		cdc = &types.DaemonDeploymentConfiguration{}
	}
	dc := func() *types.DaemonDeploymentConfiguration {
		if in.DeploymentConfiguration == nil {
			in.DeploymentConfiguration = &types.DaemonDeploymentConfiguration{}
		}
		return in.DeploymentConfiguration
	}
	keep(setTaskDef, func() { in.DaemonTaskDefinitionArn = cur.DaemonTaskDefinitionArn })
	keep(setCapacity, func() { in.CapacityProviderArns = slices.Clone(cur.CapacityProviderArns) })
	keep(setDrain, func() { dc().DrainPercent = cdc.DrainPercent })
	keep(setBake, func() { dc().BakeTimeInMinutes = cdc.BakeTimeInMinutes })
	keep(setAlarms, func() { dc().Alarms = cdc.Alarms })
	keep(setCritical, func() { in.Critical = cur.Critical })
	keep(setPropagate, func() { in.PropagateTags = cur.PropagateTags })
	keep(setManagedTags, func() { in.EnableECSManagedTags = cur.EnableECSManagedTags })
	keep(setExecute, func() { in.EnableExecuteCommand = cur.EnableExecuteCommand })
	return kept
}

// currentConfiguration reads the daemon's current revision as an update
// request (CapstanV1.DescribeDaemonConfiguration).
func (s *session) currentConfiguration(ctx context.Context, daemonArn string) (*ecs.UpdateDaemonInput, error) {
	var out struct {
		CurrentConfiguration json.RawMessage `json:"currentConfiguration"`
	}
	if err := s.callExtension(ctx, "DescribeDaemonConfiguration", map[string]string{"daemonArn": daemonArn}, &out); err != nil {
		return nil, err
	}
	cur := &ecs.UpdateDaemonInput{}
	if err := decodeInput(out.CurrentConfiguration, cur); err != nil {
		return nil, fmt.Errorf("current configuration of %s: %w", daemonArn, err)
	}
	return cur, nil
}

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
	Resets             []settingChange `json:"resets"`
	Changes            []settingChange `json:"changes"`
	InstancesInScope   int             `json:"instancesInScope"`
	InstancesToReplace int             `json:"instancesToReplace"`
	DrainPercent       float64         `json:"drainPercent"`
	BatchSize          int             `json:"batchSize"`
	Batches            []struct {
		Instances []struct {
			ContainerInstanceArn string `json:"containerInstanceArn"`
			CapacityProviderName string `json:"capacityProviderName"`
			InPlace              bool   `json:"inPlace"`
		} `json:"instances"`
		ExtraCPU    int64 `json:"extraCpu"`
		ExtraMemory int64 `json:"extraMemory"`
	} `json:"batches"`
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
		var b bytes.Buffer
		if err := json.Indent(&b, raw, "", "  "); err != nil {
			return err
		}
		b.WriteByte('\n')
		_, err := s.stdout.Write(b.Bytes())
		return err
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
	fmt.Fprintf(w, "Dry run: nothing was changed. UpdateDaemon on %s/%s would start a deployment\nfrom revision %s.\n\n",
		cluster, name, lastSegment(p.CurrentRevisionArn))
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

// epoch is a timestamp sent as epoch seconds; zero when absent.
type epoch struct{ time.Time }

func (e *epoch) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*e = epoch{}
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("timestamp %s: want epoch seconds", b)
	}
	sec, frac := math.Modf(f)
	e.Time = time.Unix(int64(sec), int64(math.Round(frac*1e3))*1e6)
	return nil
}

func (e epoch) MarshalJSON() ([]byte, error) {
	if e.IsZero() {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, float64(e.UnixMilli())/1000, 'f', -1, 64), nil
}

// rollout is CapstanV1.DescribeDaemonRollout's answer, or as much of it
// as DescribeDaemonDeployments gives (legacy).
type rollout struct {
	DaemonArn                       string       `json:"daemonArn"`
	DaemonDeploymentArn             string       `json:"daemonDeploymentArn"`
	Status                          string       `json:"status"`
	StatusReason                    string       `json:"statusReason,omitempty"`
	TargetDaemonRevisionArn         string       `json:"targetDaemonRevisionArn,omitempty"`
	RollbackTargetDaemonRevisionArn string       `json:"rollbackTargetDaemonRevisionArn,omitempty"`
	BatchSize                       int          `json:"batchSize,omitempty"`
	Replaced                        int          `json:"replaced,omitempty"`
	CapacityProviders               []rolloutCP  `json:"capacityProviders"`
	CircuitBreaker                  *breakerView `json:"circuitBreaker,omitempty"`
	Alarms                          *alarmsView  `json:"alarms,omitempty"`
	BakeTimeInMinutes               int          `json:"bakeTimeInMinutes,omitempty"`
	BakeEndsAt                      epoch        `json:"bakeEndsAt,omitzero"`
	Stalled                         *stallView   `json:"stalled,omitempty"`
	StopReasons                     []string     `json:"stopReasons,omitempty"`
	ProgressDeadlineSeconds         int          `json:"progressDeadlineSeconds,omitempty"`
	LastProgressAt                  epoch        `json:"lastProgressAt,omitzero"`
	CreatedAt                       epoch        `json:"createdAt,omitzero"`
	StartedAt                       epoch        `json:"startedAt,omitzero"`
	FinishedAt                      epoch        `json:"finishedAt,omitzero"`
	StoppedAt                       epoch        `json:"stoppedAt,omitzero"`
	// legacy marks a rollout read from DescribeDaemonDeployments: no
	// launching/remaining split, batch, stall or bake end.
	legacy bool
}

type rolloutCP struct {
	Arn       string `json:"arn"`
	Name      string `json:"name"`
	Instances int    `json:"instances"`
	OnTarget  int    `json:"onTarget"`
	Draining  int    `json:"draining"`
	Remaining int    `json:"remaining"`
	Launching int    `json:"launching"`
}

type breakerView struct {
	FailureCount int    `json:"failureCount"`
	Threshold    int    `json:"threshold"`
	Status       string `json:"status"`
}

type alarmsView struct {
	Status              string   `json:"status"`
	AlarmNames          []string `json:"alarmNames"`
	TriggeredAlarmNames []string `json:"triggeredAlarmNames"`
	IgnoredAlarmNames   []string `json:"ignoredAlarmNames"`
	Error               string   `json:"error,omitempty"`
}

type stallView struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Since   epoch  `json:"since,omitzero"`
}

// ended reports whether a deployment status is final.
func ended(status string) bool {
	switch status {
	case "SUCCESSFUL", "STOPPED", "ROLLBACK_SUCCESSFUL", "ROLLBACK_FAILED":
		return true
	}
	return false
}

// stallWords says what a stall kind means for the operator.
func stallWords(kind string) string {
	switch kind {
	case "REVISION_FAILING":
		return "the new revision fails (bad release)"
	case "PROVISIONING":
		return "replacement instances cannot be provisioned"
	case "INSTANCES_UNHEALTHY":
		return "instances are unhealthy or lost (bad machines)"
	}
	return strings.ToLower(strings.ReplaceAll(kind, "_", " "))
}

func cpName(c rolloutCP) string {
	if c.Name != "" {
		return c.Name
	}
	return lastSegment(c.Arn)
}

// rolloutLine is one plain line for a log: only what changes when the
// rollout moves (no clocks), so equal lines mean nothing happened.
func rolloutLine(r *rollout) string {
	parts := []string{r.Status}
	for _, c := range r.CapacityProviders {
		p := fmt.Sprintf("%s %d/%d on target", cpName(c), c.OnTarget, c.Instances)
		if c.Draining > 0 {
			p += fmt.Sprintf(", %d draining", c.Draining)
		}
		if c.Launching > 0 {
			p += fmt.Sprintf(", %d launching", c.Launching)
		}
		parts = append(parts, p)
	}
	if b := r.CircuitBreaker; b != nil {
		parts = append(parts, fmt.Sprintf("breaker %d/%d", b.FailureCount, b.Threshold))
	}
	if a := r.Alarms; a != nil && a.Status != "" && a.Status != "DISABLED" {
		p := "alarms " + a.Status
		if len(a.TriggeredAlarmNames) > 0 {
			p += " (triggered: " + strings.Join(a.TriggeredAlarmNames, ", ") + ")"
		}
		if a.Error != "" {
			p += " (error: " + a.Error + ")"
		}
		parts = append(parts, p)
	}
	if !r.BakeEndsAt.IsZero() && !ended(r.Status) {
		parts = append(parts, "baking until "+r.BakeEndsAt.UTC().Format("15:04:05Z"))
	}
	if st := r.Stalled; st != nil {
		parts = append(parts, "STALLED: "+stallWords(st.Kind)+": "+st.Message)
	}
	if n := len(r.StopReasons); n > 0 {
		parts = append(parts, "last stop reason: "+r.StopReasons[n-1])
	}
	if ended(r.Status) && r.StatusReason != "" {
		parts = append(parts, r.StatusReason)
	}
	return strings.Join(parts, " | ")
}

func roundDur(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String()
}

// rolloutBlock is the compact view redrawn on a terminal.
func rolloutBlock(r *rollout, now time.Time) []string {
	var b bytes.Buffer
	head := fmt.Sprintf("Deployment %s  %s", lastSegment(r.DaemonDeploymentArn), r.Status)
	switch {
	case !r.StartedAt.IsZero() && !ended(r.Status):
		head += "  " + roundDur(now.Sub(r.StartedAt.Time))
	case !r.CreatedAt.IsZero() && !ended(r.Status):
		head += "  created " + roundDur(now.Sub(r.CreatedAt.Time)) + " ago"
	}
	fmt.Fprintln(&b, head)
	if r.StatusReason != "" {
		fmt.Fprintf(&b, "  %s\n", r.StatusReason)
	}
	if len(r.CapacityProviders) > 0 {
		hdr := []string{"  CAPACITY PROVIDER", "ON TARGET", "DRAINING"}
		if !r.legacy {
			hdr = append(hdr, "LAUNCHING", "REMAINING")
		}
		tw := newTable(&b, hdr...)
		for _, c := range r.CapacityProviders {
			cells := []string{"  " + cpName(c), fmt.Sprintf("%d/%d", c.OnTarget, c.Instances), strconv.Itoa(c.Draining)}
			if !r.legacy {
				cells = append(cells, strconv.Itoa(c.Launching), strconv.Itoa(c.Remaining))
			}
			row(tw, cells...)
		}
		tw.Flush()
	}
	f := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	if r.TargetDaemonRevisionArn != "" {
		fmt.Fprintf(f, "  Target revision:\t%s\n", lastSegment(r.TargetDaemonRevisionArn))
	}
	if r.RollbackTargetDaemonRevisionArn != "" {
		fmt.Fprintf(f, "  Rolling back to:\t%s\n", lastSegment(r.RollbackTargetDaemonRevisionArn))
	}
	if r.BatchSize > 0 {
		fmt.Fprintf(f, "  Batch size:\t%d (%d replaced)\n", r.BatchSize, r.Replaced)
	}
	if c := r.CircuitBreaker; c != nil {
		fmt.Fprintf(f, "  Circuit breaker:\t%d/%d failures (%s)\n", c.FailureCount, c.Threshold, c.Status)
	}
	if a := r.Alarms; a != nil && a.Status != "" {
		line := a.Status
		if len(a.AlarmNames) > 0 {
			line += ": " + strings.Join(a.AlarmNames, ", ")
		}
		if len(a.TriggeredAlarmNames) > 0 {
			line += "; triggered: " + strings.Join(a.TriggeredAlarmNames, ", ")
		}
		if len(a.IgnoredAlarmNames) > 0 {
			line += "; ignored (firing at start): " + strings.Join(a.IgnoredAlarmNames, ", ")
		}
		if a.Error != "" {
			line += "; error: " + a.Error
		}
		fmt.Fprintf(f, "  Alarms:\t%s\n", line)
	}
	switch {
	case !r.BakeEndsAt.IsZero() && !ended(r.Status):
		fmt.Fprintf(f, "  Bake:\t%s left\n", roundDur(r.BakeEndsAt.Sub(now)))
	case r.BakeTimeInMinutes > 0 && !ended(r.Status):
		fmt.Fprintf(f, "  Bake:\t%dm after the last batch\n", r.BakeTimeInMinutes)
	}
	if st := r.Stalled; st != nil {
		since := ""
		if !st.Since.IsZero() {
			since = " for " + roundDur(now.Sub(st.Since.Time))
		}
		fmt.Fprintf(f, "  STALLED%s:\t%s\n", since, stallWords(st.Kind))
		if st.Message != "" {
			fmt.Fprintf(f, "  \t%s\n", st.Message)
		}
	}
	for i, reason := range r.StopReasons {
		label := ""
		if i == 0 {
			label = "Stop reasons:"
		}
		fmt.Fprintf(f, "  %s\t%s\n", label, reason)
	}
	if r.ProgressDeadlineSeconds > 0 && !r.LastProgressAt.IsZero() && !ended(r.Status) {
		left := r.LastProgressAt.Add(time.Duration(r.ProgressDeadlineSeconds) * time.Second).Sub(now)
		fmt.Fprintf(f, "  Progress deadline:\t%s left (last progress %s ago)\n", roundDur(left), roundDur(now.Sub(r.LastProgressAt.Time)))
	}
	f.Flush()
	return strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
}

// rolloutFromDeployment reads a rollout from the ECS deployment record,
// for servers without CapstanV1.DescribeDaemonRollout.
func rolloutFromDeployment(daemonArn string, d types.DaemonDeployment) rollout {
	r := rollout{DaemonArn: daemonArn, DaemonDeploymentArn: str(d.DaemonDeploymentArn), Status: string(d.Status),
		StatusReason: str(d.StatusReason), CapacityProviders: []rolloutCP{}, legacy: true}
	n := func(p *int32) int { return int(aws.ToInt32(p)) }
	cp := func(arn string) *rolloutCP {
		for i := range r.CapacityProviders {
			if r.CapacityProviders[i].Arn == arn {
				return &r.CapacityProviders[i]
			}
		}
		r.CapacityProviders = append(r.CapacityProviders, rolloutCP{Arn: arn, Name: lastSegment(arn)})
		return &r.CapacityProviders[len(r.CapacityProviders)-1]
	}
	if t := d.TargetDaemonRevision; t != nil {
		r.TargetDaemonRevisionArn = str(t.Arn)
		for _, c := range t.CapacityProviders {
			p := cp(str(c.Arn))
			p.OnTarget += n(c.RunningInstanceCount)
			p.Draining += n(c.DrainingInstanceCount)
			p.Instances += n(c.RunningInstanceCount) + n(c.DrainingInstanceCount) + n(c.WithoutDaemonInstanceCount)
		}
	}
	for _, src := range d.SourceDaemonRevisions {
		for _, c := range src.CapacityProviders {
			p := cp(str(c.Arn))
			p.Draining += n(c.DrainingInstanceCount)
			p.Instances += n(c.RunningInstanceCount) + n(c.DrainingInstanceCount)
		}
	}
	for i := range r.CapacityProviders {
		c := &r.CapacityProviders[i]
		c.Remaining = max(c.Instances-c.OnTarget, 0)
	}
	if b := d.CircuitBreaker; b != nil {
		r.CircuitBreaker = &breakerView{FailureCount: int(b.FailureCount), Threshold: int(b.Threshold), Status: string(b.Status)}
	}
	if a := d.Alarms; a != nil {
		r.Alarms = &alarmsView{Status: string(a.Status), AlarmNames: a.AlarmNames, TriggeredAlarmNames: a.TriggeredAlarmNames, IgnoredAlarmNames: []string{}}
	}
	if rb := d.Rollback; rb != nil {
		r.RollbackTargetDaemonRevisionArn = str(rb.RollbackTargetDaemonRevisionArn)
	}
	if dc := d.DeploymentConfiguration; dc != nil {
		r.BakeTimeInMinutes = int(dc.BakeTimeInMinutes)
	}
	at := func(t *time.Time) epoch {
		if t == nil {
			return epoch{}
		}
		return epoch{*t}
	}
	r.CreatedAt, r.StartedAt, r.FinishedAt, r.StoppedAt = at(d.CreatedAt), at(d.StartedAt), at(d.FinishedAt), at(d.StoppedAt)
	return r
}

// follower polls one deployment and shows its progress.
type follower struct {
	s *session
	// legacy: the server has no DescribeDaemonRollout (an older server).
	legacy bool
	tty    bool
	drawn  int    // lines of the block on screen
	last   string // last line printed (plain and JSON)
}

// state reads the deployment: DescribeDaemonRollout, else the ECS record.
func (f *follower) state(ctx context.Context, daemonArn, depArn string) (rollout, []byte, error) {
	if !f.legacy {
		req := map[string]string{"daemonArn": daemonArn}
		if depArn != "" {
			req["daemonDeploymentArn"] = depArn
		}
		var raw json.RawMessage
		err := f.s.callExtension(ctx, "DescribeDaemonRollout", req, &raw)
		var ae *apiError
		switch {
		case errors.As(err, &ae) && ae.code == "UnknownOperationException":
			f.legacy = true
		case err != nil:
			return rollout{}, nil, err
		default:
			var r rollout
			if err := json.Unmarshal(raw, &r); err != nil {
				return rollout{}, nil, fmt.Errorf("DescribeDaemonRollout: %w", err)
			}
			return r, raw, nil
		}
	}
	c := f.s.ecs
	if depArn == "" {
		d, err := c.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(daemonArn)})
		if err != nil {
			return rollout{}, nil, err
		}
		depArn = str(d.Daemon.DeploymentArn)
	}
	out, err := c.DescribeDaemonDeployments(ctx, &ecs.DescribeDaemonDeploymentsInput{DaemonDeploymentArns: []string{depArn}})
	if err != nil {
		return rollout{}, nil, err
	}
	if len(out.DaemonDeployments) == 0 {
		return rollout{}, nil, failuresError("daemon deployment", out.Failures)
	}
	r := rolloutFromDeployment(daemonArn, out.DaemonDeployments[0])
	raw, err := json.Marshal(r)
	return r, raw, err
}

// show prints one observation: a redrawn block on a terminal, else a line
// (or a JSON object) when something changed.
func (f *follower) show(r *rollout, raw []byte, now time.Time) {
	w := f.s.stdout
	line := rolloutLine(r)
	switch {
	case f.s.json():
		if line == f.last {
			return
		}
		var b bytes.Buffer
		if json.Compact(&b, raw) != nil {
			b.Reset()
			b.Write(raw)
		}
		b.WriteByte('\n')
		w.Write(b.Bytes())
	case f.tty:
		lines := rolloutBlock(r, now)
		var b strings.Builder
		if f.drawn > 0 {
			fmt.Fprintf(&b, "\x1b[%dA\x1b[J", f.drawn) // up to the block's top, clear below
		}
		for _, l := range lines {
			b.WriteString(l + "\n")
		}
		io.WriteString(w, b.String())
		f.drawn = len(lines)
	default:
		if line == f.last {
			return
		}
		fmt.Fprintf(w, "%s %s %s\n", now.UTC().Format(time.RFC3339), lastSegment(r.DaemonDeploymentArn), line)
	}
	f.last = line
}

// isTerminal reports whether w is a character device (a terminal), where
// the progress block can be redrawn.
func isTerminal(w io.Writer, getenv func(string) string) bool {
	f, ok := w.(*os.File)
	if !ok || getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// followRollout shows a deployment's progress until it ends, and turns its
// outcome into the exit status. depArn empty means the daemon's latest.
func (s *session) followRollout(ctx context.Context, daemonArn, depArn string, timeout time.Duration) error {
	if _, err := s.client(ctx); err != nil {
		return err
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	f := &follower{s: s, tty: !s.json() && isTerminal(s.stdout, s.getenv)}
	var r rollout
	failures := 0
	for {
		next, raw, err := f.state(ctx, daemonArn, depArn)
		switch {
		case err != nil && ctx.Err() != nil:
			return timedOut(ctx, timeout, depArn, r.Status)
		case err != nil && unreachable(err) && failures < 30:
			// Ride out a server restart.
			if failures == 0 {
				s.warn("%v; retrying", err)
			}
			failures++
		case err != nil:
			return err
		default:
			failures = 0
			r = next
			depArn = r.DaemonDeploymentArn // follow this one even if a newer one starts
			f.show(&r, raw, time.Now())
			if ended(r.Status) {
				return outcome(s, &r)
			}
		}
		select {
		case <-ctx.Done():
			return timedOut(ctx, timeout, depArn, r.Status)
		case <-time.After(rolloutPoll):
		}
	}
}

func unreachable(err error) bool {
	var ue *url.Error
	return errors.As(err, &ue) || strings.Contains(err.Error(), "cannot reach")
}

func timedOut(ctx context.Context, timeout time.Duration, depArn, status string) error {
	if timeout == 0 {
		return ctx.Err() // interrupted, not timed out
	}
	if status == "" {
		status = "unknown"
	}
	return &exitStatus{code: exitTimeout, msg: fmt.Sprintf("timed out after %s; deployment %s is still %s", timeout, lastSegment(depArn), status)}
}

// outcome reports how a deployment ended and picks the exit status.
func outcome(s *session, r *rollout) error {
	id := lastSegment(r.DaemonDeploymentArn)
	msg := fmt.Sprintf("deployment %s %s", id, r.Status)
	if r.StatusReason != "" {
		msg += ": " + r.StatusReason
	}
	if r.Status == "SUCCESSFUL" {
		if !s.json() {
			fmt.Fprintln(s.stdout, strings.ToUpper(msg[:1])+msg[1:])
		}
		return nil
	}
	if n := len(r.StopReasons); n > 0 {
		msg += " (last stop reason: " + r.StopReasons[n-1] + ")"
	}
	code := exitStopped
	switch r.Status {
	case "ROLLBACK_SUCCESSFUL":
		code = exitRolledBack
	case "ROLLBACK_FAILED":
		code = exitRollbackFailed
	}
	return &exitStatus{code: code, msg: msg}
}

func daemonRollout(fs *flag.FlagSet) action {
	var cluster, deployment string
	var timeout time.Duration
	fs.StringVar(&cluster, "cluster", "", "`cluster` of a daemon given by name")
	fs.StringVar(&deployment, "deployment", "", "deployment `ARN` to follow (default: the daemon's latest)")
	fs.DurationVar(&timeout, "timeout", 0, "give up after `duration` (e.g. 15m; default: no limit), exit 6")
	return func(ctx context.Context, s *session, args []string) error {
		if len(args) == 0 || args[0] != "status" {
			return usageErrorf("want: rollout status NAME|ARN")
		}
		if err := wantArgs(args[1:], 1, 1, "daemon NAME or ARN"); err != nil {
			return err
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		arn, err := resolveDaemon(ctx, c, args[1], cluster)
		if err != nil {
			return err
		}
		return s.followRollout(ctx, arn, deployment, timeout)
	}
}

func daemonRollback(fs *flag.FlagSet) action {
	var cluster, to string
	var wait bool
	var timeout time.Duration
	fs.StringVar(&cluster, "cluster", "", "`cluster` of a daemon given by name")
	fs.StringVar(&to, "to-revision", "", "daemon revision `ARN` to go back to (default: the one before the current)")
	fs.BoolVar(&wait, "wait", false, "follow the deployment until it ends (see exit codes)")
	fs.DurationVar(&timeout, "timeout", 0, "with --wait, give up after `duration`, exit 6")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, 1, "daemon NAME or ARN"); err != nil {
			return err
		}
		if timeout != 0 && !wait {
			return usageErrorf("--timeout needs --wait")
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		arn, err := resolveDaemon(ctx, c, args[0], cluster)
		if err != nil {
			return err
		}
		req := map[string]string{"daemonArn": arn}
		if to != "" {
			req["toRevisionArn"] = to
		}
		var raw json.RawMessage
		if err := s.callExtension(ctx, "RollbackDaemon", req, &raw); err != nil {
			return err
		}
		var out struct {
			DaemonArn     string `json:"daemonArn"`
			Status        string `json:"status"`
			UpdatedAt     epoch  `json:"updatedAt"`
			DeploymentArn string `json:"deploymentArn"`
		}
		if err := json.Unmarshal(raw, &out); err != nil {
			return fmt.Errorf("RollbackDaemon: %w", err)
		}
		if s.json() {
			var b bytes.Buffer
			json.Indent(&b, raw, "", "  ")
			b.WriteByte('\n')
			s.stdout.Write(b.Bytes())
		} else {
			f := newFields(s.stdout)
			f.add("Daemon", out.DaemonArn)
			f.add("Status", out.Status)
			f.add("Updated", ts(&out.UpdatedAt.Time))
			f.add("Deployment", out.DeploymentArn)
			if to != "" {
				f.add("Settings of", to)
			}
			f.flush()
		}
		if wait {
			return s.followRollout(ctx, arn, out.DeploymentArn, timeout)
		}
		return nil
	}
}

package cli

// A followed deployment as the CLI sees it, and its renderings: a log
// line per change, or a block redrawn on a terminal.

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

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
	// labels maps revision ARNs to family:revision, for the block.
	labels map[string]string
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
		fmt.Fprintf(f, "  Target revision:\t%s\n", revText(r.TargetDaemonRevisionArn, r.labels))
	}
	if r.RollbackTargetDaemonRevisionArn != "" {
		fmt.Fprintf(f, "  Rolling back to:\t%s\n", revText(r.RollbackTargetDaemonRevisionArn, r.labels))
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

package cli

// Following a daemon deployment to its end (--wait, rollout status) and
// rolling back. Previews are in updatepreview.go, --keep-unspecified in
// updatesettings.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
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

// follower polls one deployment and shows its progress.
type follower struct {
	s *session
	// legacy: the server has no DescribeDaemonRollout (an older server).
	legacy bool
	tty    bool
	drawn  int    // lines of the block on screen
	last   string // last line printed (plain and JSON)
	labels map[string]string
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
			if f.labels == nil {
				f.labels = map[string]string{}
			}
			// Best effort: the block shows IDs alone without them.
			if err := revisionLabels(ctx, s.ecs, f.labels, r.TargetDaemonRevisionArn, r.RollbackTargetDaemonRevisionArn); err == nil {
				r.labels = f.labels
			}
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
	var to string
	var w waitFlags
	fs.StringVar(&to, "to-revision", "", "revision to go back to: `ARN`, short ID, FAMILY:REVISION or history number (default: the one before the current)")
	w.register(fs, "the deployment until it ends (see exit codes)")
	return daemonRefActionChecked(fs, w.check, func(ctx context.Context, s *session, c *ecs.Client, arn string) error {
		req := map[string]string{"daemonArn": arn}
		// Say what it goes back to before starting: the revision named,
		// or the one before the current (the server's default, named
		// explicitly so that what is said is what is done).
		hist, err := daemonHistory(ctx, c, arn)
		if err != nil {
			return err
		}
		var target historyEntry
		switch {
		case to != "":
			if target, err = findRevision(hist, to); err != nil {
				return err
			}
		default:
			for i, h := range hist {
				if h.Current && i+1 < len(hist) {
					target = hist[i+1]
				}
			}
		}
		if target.DaemonRevisionArn != "" {
			req["toRevisionArn"] = target.DaemonRevisionArn
			say := s.stdout
			if s.json() {
				say = s.stderr
			}
			if target.Number == 0 {
				fmt.Fprintf(say, "Rolling back %s to revision %s\n", lastSegment(arn), lastSegment(target.DaemonRevisionArn))
			} else {
				fmt.Fprintf(say, "Rolling back %s to revision #%d %s (%s, created %s)\n", lastSegment(arn), target.Number,
					lastSegment(target.DaemonRevisionArn), target.TaskDefinition, ts(&target.CreatedAt))
			}
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
			if err := s.printRaw(raw); err != nil {
				return err
			}
		} else {
			f := newFields(s.stdout)
			f.add("Daemon", out.DaemonArn)
			f.add("Status", out.Status)
			f.add("Updated", ts(&out.UpdatedAt.Time))
			f.add("Deployment", out.DeploymentArn)
			if target.DaemonRevisionArn != "" {
				f.add("Settings of", revText(target.DaemonRevisionArn, map[string]string{target.DaemonRevisionArn: target.TaskDefinition})) // "" label: ID alone
			}
			f.flush()
		}
		if w.wait {
			return s.followRollout(ctx, arn, out.DeploymentArn, w.timeout)
		}
		return nil
	})
}

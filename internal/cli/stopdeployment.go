package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"time"
)

// daemonStopDeployment asks CapstanV1.StopDaemonDeployment to stop the
// daemon's latest (or the named) deployment and roll it back.
func daemonStopDeployment(fs *flag.FlagSet) action {
	var cluster, deployment string
	var wait bool
	var timeout time.Duration
	fs.StringVar(&cluster, "cluster", "", "`cluster` of a daemon given by name")
	fs.StringVar(&deployment, "deployment", "", "deployment `ARN` to stop (default: the daemon's latest; it must be that one)")
	fs.BoolVar(&wait, "wait", false, "follow the rollback until it ends (see exit codes)")
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
		if deployment != "" {
			req["daemonDeploymentArn"] = deployment
		}
		var raw json.RawMessage
		if err := s.callExtension(ctx, "StopDaemonDeployment", req, &raw); err != nil {
			return err
		}
		var out struct {
			DaemonDeploymentArn             string `json:"daemonDeploymentArn"`
			Status                          string `json:"status"`
			StatusReason                    string `json:"statusReason"`
			RollbackTargetDaemonRevisionArn string `json:"rollbackTargetDaemonRevisionArn"`
		}
		if err := json.Unmarshal(raw, &out); err != nil {
			return fmt.Errorf("StopDaemonDeployment: %w", err)
		}
		if s.json() {
			var b bytes.Buffer
			json.Indent(&b, raw, "", "  ")
			b.WriteByte('\n')
			s.stdout.Write(b.Bytes())
		} else {
			f := newFields(s.stdout)
			f.add("Deployment", out.DaemonDeploymentArn)
			f.add("Status", out.Status)
			back := "nothing (a first deployment: the daemon is taken off its instances)"
			if out.RollbackTargetDaemonRevisionArn != "" {
				back = "revision " + lastSegment(out.RollbackTargetDaemonRevisionArn)
			}
			f.add("Rolling back to", back)
			f.flush()
		}
		if wait {
			return s.followRollout(ctx, arn, out.DaemonDeploymentArn, timeout)
		}
		return nil
	}
}

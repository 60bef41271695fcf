package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/ecs"
)

// daemonStopDeployment asks CapstanV1.StopDaemonDeployment to stop the
// daemon's latest (or the named) deployment and roll it back.
func daemonStopDeployment(fs *flag.FlagSet) action {
	var deployment string
	var w waitFlags
	fs.StringVar(&deployment, "deployment", "", "deployment `ARN` to stop (default: the daemon's latest; it must be that one)")
	w.register(fs, "the rollback until it ends (see exit codes)")
	return daemonRefActionChecked(fs, w.check, func(ctx context.Context, s *session, c *ecs.Client, arn string) error {
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
			if err := s.printRaw(raw); err != nil {
				return err
			}
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
		if w.wait {
			return s.followRollout(ctx, arn, out.DaemonDeploymentArn, w.timeout)
		}
		return nil
	})
}

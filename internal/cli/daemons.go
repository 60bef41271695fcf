package cli

import (
	"context"
	"errors"
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

const daemonRefDetails = `

A daemon is named by its ARN or by its name; a name is looked up with
ListDaemons, in --cluster when given, else in every cluster (it must then be
unique).`

func daemonNoun() *noun {
	return &noun{
		name:    "daemon",
		summary: "Daemons run one task on every instance of their capacity providers.",
		verbs: []*verb{
			{name: "create", args: "[NAME] --task-definition TD --capacity-provider CP... [flags] | -f FILE", summary: "Create a daemon and start its first deployment.", details: `
TD is a daemon task definition ARN, FAMILY:REVISION or FAMILY. Settings not
given take the server's defaults (drain 25%, bake time 0, critical true).
-f FILE takes the CreateDaemon request JSON; flags given alongside override it.`, bind: daemonCreate},
			{name: "update", args: "NAME|ARN --task-definition TD --capacity-provider CP... [flags] | -f FILE", summary: "Replace a daemon's configuration and start a deployment.", details: `
Like ECS UpdateDaemon, an update replaces the whole configuration: every
setting not given returns to its default (drain 25%, bake time 0, alarms off,
critical true, propagate tags NONE, managed tags and execute command off), not
to its current value. Give all the settings you want to keep, or:

--keep-unspecified fills every setting not given by a flag or in -f FILE
(task definition and capacity providers included) from the daemon's current
revision, so only what you name changes.

--dry-run previews the update and changes nothing: the settings that would
silently return to their defaults, the diff against the current revision,
and the rollout's batches with the extra capacity each needs. Exit 0.

--if-unchanged REV applies the update only if the daemon's latest revision is
still REV (the ID a dry run prints), so no other update or rollback came in
since the preview; otherwise the server refuses it with ConflictException.

--wait follows the deployment the update starts until it ends.
-f FILE takes the UpdateDaemon request JSON; flags given alongside override it.` + daemonRefDetails + "\n" + followHelp, bind: daemonUpdate},
			{name: "describe", args: "NAME|ARN [--cluster C]", summary: "Show a daemon and its current revisions.", details: daemonRefDetails, bind: daemonDescribe},
			{name: "list", args: "[--cluster C] [--capacity-provider CP]...", summary: "List daemons.", bind: daemonList},
			{name: "delete", args: "NAME|ARN [--cluster C]", summary: "Delete a daemon: a deployment drains its tasks.", details: daemonRefDetails, bind: daemonDelete},
			{name: "revisions", args: "NAME|ARN [--cluster C]", summary: "Show the daemon's current revisions.", details: daemonRefDetails, bind: daemonRevisions},
			{name: "deployments", args: "NAME|ARN [--cluster C] [--status S]...", summary: "Show the daemon's deployments, newest first.", details: daemonRefDetails, bind: daemonDeployments},
			{name: "rollout", args: "status NAME|ARN [--deployment ARN] [--timeout D]", summary: "Follow a deployment until it ends.", details: `
Shows the daemon's latest deployment (or --deployment) live until it ends.` + daemonRefDetails + "\n" + followHelp, bind: daemonRollout},
			{name: "rollback", args: "NAME|ARN [--to-revision REV] [--wait]", summary: "Deploy an earlier revision's settings again.", details: `
Starts a normal deployment (by instance replacement) to a new revision that
has the settings of --to-revision, by default the revision before the
current one: its task definition, capacity providers, deployment
configuration, critical, tag propagation, managed tags and execute command.
REV is a revision ARN, its short ID, FAMILY:REVISION of its task definition
(the newest such revision that is not the current one) or its number in
'capstan daemon history'. The command says which revision it goes back to
before it starts. Revisions are immutable, so the history keeps the one
rolled back from, and rolling back twice returns to it.` + daemonRefDetails + "\n" + followHelp, bind: daemonRollback},
			{name: "stop-deployment", args: "NAME|ARN [--deployment ARN] [--wait]", summary: "Stop a deployment and roll it back.", details: `
Stops the daemon's latest deployment (--deployment names it; it must be the
latest) while it is PENDING or IN_PROGRESS, baking included, through
CapstanV1.StopDaemonDeployment: it turns STOP_REQUESTED and rolls back to the
revision before, as when the circuit breaker trips (a first deployment takes
the daemon off its instances again). Other states are refused.` + daemonRefDetails + "\n" + followHelp, bind: daemonStopDeployment},
			{name: "history", args: "NAME|ARN [--cluster C]", summary: "List the daemon's revisions, newest first, with their deployments and outcomes.", details: `
Revisions are numbered from 1, the oldest; * marks the latest deployment's
target. The numbers, short IDs and FAMILY:REVISION names are what
'rollback --to-revision' takes.` + daemonRefDetails, bind: daemonHistoryVerb},
		},
	}
}

// daemonFlags are the settings CreateDaemon and UpdateDaemon share.
type daemonFlags struct {
	taskDef, propagate       string
	capacityProviders        listFlag
	drainPercent             float64
	bakeTime                 int
	critical, noCritical     bool
	managedTags, execCommand bool
}

func (f *daemonFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.taskDef, "task-definition", "", "daemon task definition `ARN|FAMILY[:REVISION]`")
	fs.Var(&f.capacityProviders, "capacity-provider", "capacity provider `NAME|ARN` to run on (repeatable)")
	fs.Float64Var(&f.drainPercent, "drain-percent", 0, "`percent` of instances drained per deployment batch (default 25)")
	fs.IntVar(&f.bakeTime, "bake-time", 0, "`minutes` to watch a finished deployment before it succeeds (default 0)")
	fs.BoolVar(&f.critical, "critical", false, "instances are ACTIVE only once this daemon runs (the server default)")
	fs.BoolVar(&f.noCritical, "no-critical", false, "instances may take tasks before this daemon runs")
	fs.StringVar(&f.propagate, "propagate-tags", "", "copy the daemon's tags to its tasks: `DAEMON|NONE`")
	fs.BoolVar(&f.managedTags, "enable-ecs-managed-tags", false, "tag tasks with cluster and daemon names")
	fs.BoolVar(&f.execCommand, "enable-execute-command", false, "allow execute-command into daemon tasks")
}

// daemonSpec points into a create or update request.
type daemonSpec struct {
	taskDef     **string
	cps         *[]string
	critical    **bool
	deploy      **types.DaemonDeploymentConfiguration
	propagate   *types.DaemonPropagateTags
	managedTags *bool
	execCommand *bool
}

func (f *daemonFlags) apply(s *session, d daemonSpec) error {
	if s.set("task-definition") {
		*d.taskDef = aws.String(f.taskDef)
	}
	if s.set("capacity-provider") {
		*d.cps = f.capacityProviders
	}
	if s.set("drain-percent") || s.set("bake-time") {
		if *d.deploy == nil {
			*d.deploy = &types.DaemonDeploymentConfiguration{}
		}
		if s.set("drain-percent") {
			(*d.deploy).DrainPercent = aws.Float64(f.drainPercent)
		}
		if s.set("bake-time") {
			(*d.deploy).BakeTimeInMinutes = int32(f.bakeTime)
		}
	}
	switch {
	case f.critical && f.noCritical:
		return usageErrorf("--critical and --no-critical contradict each other")
	case s.set("critical"):
		*d.critical = aws.Bool(f.critical)
	case s.set("no-critical"):
		*d.critical = aws.Bool(!f.noCritical)
	}
	if s.set("propagate-tags") {
		v, err := upperEnum("propagate-tags", f.propagate, "DAEMON", "NONE")
		if err != nil {
			return err
		}
		*d.propagate = types.DaemonPropagateTags(v)
	}
	if s.set("enable-ecs-managed-tags") {
		*d.managedTags = f.managedTags
	}
	if s.set("enable-execute-command") {
		*d.execCommand = f.execCommand
	}
	return nil
}

// require checks the settings every create and update must name.
func (d daemonSpec) require() error {
	if aws.ToString(*d.taskDef) == "" {
		return usageErrorf("missing --task-definition")
	}
	if len(*d.cps) == 0 {
		return usageErrorf("missing --capacity-provider")
	}
	return nil
}

func daemonCreate(fs *flag.FlagSet) action {
	var name, cluster, token, file string
	var tags tagFlag
	var df daemonFlags
	fs.StringVar(&name, "name", "", "daemon `name` (or give it as the argument)")
	fs.StringVar(&cluster, "cluster", "", "`cluster` (default: the default cluster)")
	fs.StringVar(&token, "client-token", "", "idempotency `token`: repeating the create with it returns the same daemon")
	fs.StringVar(&file, "f", "", "CreateDaemon request `file` (JSON)")
	fs.Var(&tags, "tag", "resource tag `KEY=VALUE` (repeatable)")
	df.register(fs)
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 1, ""); err != nil {
			return err
		}
		in := &ecs.CreateDaemonInput{}
		if file != "" {
			if err := readInputFile(file, s.stdin, in); err != nil {
				return err
			}
		}
		if len(args) == 1 {
			if name != "" && name != args[0] {
				return usageErrorf("name given twice: %q and --name %q", args[0], name)
			}
			name = args[0]
		}
		if name != "" {
			in.DaemonName = aws.String(name)
		}
		if aws.ToString(in.DaemonName) == "" {
			return usageErrorf("missing daemon name")
		}
		if cluster != "" {
			in.ClusterArn = aws.String(cluster)
		}
		if token != "" {
			in.ClientToken = aws.String(token)
		}
		in.Tags = append(in.Tags, tags...)
		spec := daemonSpec{&in.DaemonTaskDefinitionArn, &in.CapacityProviderArns, &in.Critical,
			&in.DeploymentConfiguration, &in.PropagateTags, &in.EnableECSManagedTags, &in.EnableExecuteCommand}
		if err := df.apply(s, spec); err != nil {
			return err
		}
		if err := spec.require(); err != nil {
			return err
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		out, err := c.CreateDaemon(ctx, in)
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) {
			f := newFields(w)
			f.add("Daemon", str(out.DaemonArn))
			f.add("Status", string(out.Status))
			f.add("Created", ts(out.CreatedAt))
			f.add("Deployment", str(out.DeploymentArn))
			f.flush()
		})
	}
}

func daemonUpdate(fs *flag.FlagSet) action {
	var cluster, file string
	var df daemonFlags
	var keep, dryRun bool
	var wf waitFlags
	var ifUnchanged string
	fs.StringVar(&ifUnchanged, "if-unchanged", "", "apply only if the daemon's latest revision is still `REV` (ID or ARN, as the dry run printed)")
	fs.StringVar(&cluster, "cluster", "", "`cluster` of a daemon given by name")
	fs.StringVar(&file, "f", "", "UpdateDaemon request `file` (JSON)")
	fs.BoolVar(&keep, "keep-unspecified", false, "take every setting not given from the current revision")
	fs.BoolVar(&dryRun, "dry-run", false, "preview the update (resets, diff, batches) and change nothing")
	wf.register(fs, "the deployment until it ends (see exit codes)")
	df.register(fs)
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 1, ""); err != nil {
			return err
		}
		if dryRun && ifUnchanged != "" {
			return usageErrorf("--if-unchanged applies a previewed update; leave out --dry-run")
		}
		if dryRun && wf.wait {
			return usageErrorf("--dry-run changes nothing, so there is nothing to --wait for")
		}
		if err := wf.check(); err != nil {
			return err
		}
		in := &ecs.UpdateDaemonInput{}
		given := map[string]bool{}
		if file != "" {
			var err error
			if given, err = readUpdateFile(file, s.stdin, in); err != nil {
				return err
			}
		}
		for name, setting := range settingFlags {
			if s.set(name) {
				given[setting] = true
			}
		}
		if len(args) == 0 && in.DaemonArn == nil {
			return usageErrorf("missing daemon NAME or ARN")
		}
		spec := daemonSpec{&in.DaemonTaskDefinitionArn, &in.CapacityProviderArns, &in.Critical,
			&in.DeploymentConfiguration, &in.PropagateTags, &in.EnableECSManagedTags, &in.EnableExecuteCommand}
		if err := df.apply(s, spec); err != nil {
			return err
		}
		if !keep {
			if err := spec.require(); err != nil {
				return err
			}
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		if len(args) == 1 {
			arn, err := resolveDaemon(ctx, c, args[0], cluster)
			if err != nil {
				return err
			}
			in.DaemonArn = aws.String(arn)
		}
		// Settings given or kept were chosen, not defaulted.
		chosen := given
		if keep {
			cur, err := s.currentConfiguration(ctx, aws.ToString(in.DaemonArn))
			if err != nil {
				return err
			}
			for k := range keepUnspecified(in, cur, given) {
				chosen[k] = true
			}
		}
		if dryRun {
			return s.previewUpdate(ctx, in)
		}
		if d := defaultedSettings(in, chosen); len(d) > 0 {
			s.warn("update replaces the whole daemon configuration; not given, so set to defaults: %s (see --keep-unspecified, --dry-run)", strings.Join(d, ", "))
		}
		var out *ecs.UpdateDaemonOutput
		if ifUnchanged != "" {
			out, err = s.updateIfUnchanged(ctx, in, ifUnchanged)
		} else {
			out, err = c.UpdateDaemon(ctx, in)
		}
		if err != nil {
			return err
		}
		err = s.show(out, func(w io.Writer) {
			f := newFields(w)
			f.add("Daemon", str(out.DaemonArn))
			f.add("Status", string(out.Status))
			f.add("Updated", ts(out.UpdatedAt))
			f.add("Deployment", str(out.DeploymentArn))
			f.flush()
		})
		if err != nil || !wf.wait {
			return err
		}
		return s.followRollout(ctx, aws.ToString(in.DaemonArn), str(out.DeploymentArn), wf.timeout)
	}
}

// defaultedSettings names the settings an update leaves at their defaults,
// except those in chosen (given explicitly, or kept). The SDK cannot tell
// an omitted boolean from false, nor can the server, so those are listed
// when false and not chosen.
func defaultedSettings(in *ecs.UpdateDaemonInput, chosen map[string]bool) []string {
	var out []string
	dc := in.DeploymentConfiguration
	if dc == nil {
		dc = &types.DaemonDeploymentConfiguration{}
	}
	add := func(setting string, defaulted bool, text string) {
		if defaulted && !chosen[setting] {
			out = append(out, text)
		}
	}
	add(setDrain, dc.DrainPercent == nil, "drain percent 25")
	add(setBake, dc.BakeTimeInMinutes == 0, "bake time 0")
	add(setAlarms, dc.Alarms == nil, "alarms off")
	add(setCritical, in.Critical == nil, "critical true")
	add(setPropagate, in.PropagateTags == "", "propagate tags NONE")
	add(setManagedTags, !in.EnableECSManagedTags, "ECS managed tags off")
	add(setExecute, !in.EnableExecuteCommand, "execute command off")
	return out
}

// resolveDaemon turns a daemon name into its ARN by listing daemons (of the
// cluster, when given); ARNs pass through.
func resolveDaemon(ctx context.Context, c *ecs.Client, ref, cluster string) (string, error) {
	if strings.HasPrefix(ref, "arn:") {
		return ref, nil
	}
	in := &ecs.ListDaemonsInput{}
	suffix := "/" + ref
	if cluster != "" {
		in.ClusterArn = aws.String(cluster)
		suffix = "/" + lastSegment(cluster) + suffix // a cluster ARN ends in cluster/NAME
	}
	var found []string
	for {
		page, err := c.ListDaemons(ctx, in)
		if err != nil {
			return "", err
		}
		for _, d := range page.DaemonSummariesList {
			if arn := str(d.DaemonArn); strings.HasSuffix(arn, suffix) && !slices.Contains(found, arn) {
				found = append(found, arn)
			}
		}
		if aws.ToString(page.NextToken) == "" {
			break
		}
		in.NextToken = page.NextToken
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		where := ""
		if cluster != "" {
			where = fmt.Sprintf(" in cluster %q", lastSegment(cluster))
		}
		return "", &apiError{code: "DaemonNotFoundException", msg: fmt.Sprintf("no daemon named %q%s", ref, where)}
	}
	var clusters []string
	for _, a := range found {
		cl, _ := daemonClusterName(a)
		clusters = append(clusters, cl)
	}
	return "", usageErrorf("daemon %q exists in clusters %s; say which with --cluster", ref, strings.Join(clusters, ", "))
}

func daemonRefAction(fs *flag.FlagSet, run func(ctx context.Context, s *session, c *ecs.Client, arn string) error) action {
	return daemonRefActionChecked(fs, nil, run)
}

// daemonRefActionChecked is daemonRefAction with flag checks that run
// before any call, so a usage error needs no server.
func daemonRefActionChecked(fs *flag.FlagSet, check func() error, run func(ctx context.Context, s *session, c *ecs.Client, arn string) error) action {
	var cluster string
	fs.StringVar(&cluster, "cluster", "", "`cluster` of a daemon given by name")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, 1, "daemon NAME or ARN"); err != nil {
			return err
		}
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		arn, err := resolveDaemon(ctx, c, args[0], cluster)
		if err != nil {
			return err
		}
		return run(ctx, s, c, arn)
	}
}

func daemonDescribe(fs *flag.FlagSet) action {
	return daemonRefAction(fs, func(ctx context.Context, s *session, c *ecs.Client, arn string) error {
		out, err := c.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(arn)})
		if err != nil {
			return err
		}
		labels := map[string]string{}
		if !s.json() {
			for _, r := range out.Daemon.CurrentRevisions {
				if err := revisionLabels(ctx, c, labels, str(r.Arn)); err != nil {
					return err
				}
			}
		}
		return s.show(out, func(w io.Writer) {
			d := out.Daemon
			cluster, name := daemonClusterName(str(d.DaemonArn))
			f := newFields(w)
			f.add("Name", name)
			f.add("Cluster", cluster)
			f.add("ARN", str(d.DaemonArn))
			f.add("Status", string(d.Status))
			f.add("Created", ts(d.CreatedAt))
			f.add("Updated", ts(d.UpdatedAt))
			f.add("Deployment", str(d.DeploymentArn))
			f.flush()
			fmt.Fprintln(w)
			tw := newTable(w, "REVISION", "CAPACITY PROVIDER", "RUNNING", "WITHOUT DAEMON")
			for _, r := range d.CurrentRevisions {
				if len(r.CapacityProviders) == 0 {
					row(tw, revText(str(r.Arn), labels), "", strconv.Itoa(int(r.TotalRunningCount)), strconv.Itoa(int(r.TotalWithoutDaemonCount)))
				}
				for _, cp := range r.CapacityProviders {
					row(tw, revText(str(r.Arn), labels), lastSegment(str(cp.Arn)), strconv.Itoa(int(cp.RunningCount)), strconv.Itoa(int(cp.WithoutDaemonCount)))
				}
			}
			tw.Flush()
		})
	})
}

func daemonList(fs *flag.FlagSet) action {
	var cluster string
	var cps listFlag
	fs.StringVar(&cluster, "cluster", "", "only daemons of `cluster`")
	fs.Var(&cps, "capacity-provider", "only daemons on capacity provider `NAME|ARN` (repeatable)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 0, ""); err != nil {
			return err
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		in := &ecs.ListDaemonsInput{CapacityProviderArns: cps}
		if cluster != "" {
			in.ClusterArn = aws.String(cluster)
		}
		all := &ecs.ListDaemonsOutput{DaemonSummariesList: []types.DaemonSummary{}}
		for {
			page, err := c.ListDaemons(ctx, in)
			if err != nil {
				return err
			}
			all.DaemonSummariesList = append(all.DaemonSummariesList, page.DaemonSummariesList...)
			if aws.ToString(page.NextToken) == "" {
				break
			}
			in.NextToken = page.NextToken
		}
		return s.show(all, func(w io.Writer) {
			tw := newTable(w, "NAME", "CLUSTER", "STATUS", "CREATED", "UPDATED")
			for _, d := range all.DaemonSummariesList {
				cluster, name := daemonClusterName(str(d.DaemonArn))
				row(tw, name, cluster, string(d.Status), ts(d.CreatedAt), ts(d.UpdatedAt))
			}
			tw.Flush()
		})
	}
}

func daemonDelete(fs *flag.FlagSet) action {
	return daemonRefAction(fs, func(ctx context.Context, s *session, c *ecs.Client, arn string) error {
		out, err := c.DeleteDaemon(ctx, &ecs.DeleteDaemonInput{DaemonArn: aws.String(arn)})
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) {
			f := newFields(w)
			f.add("Daemon", str(out.DaemonArn))
			f.add("Status", string(out.Status))
			f.add("Deployment", str(out.DeploymentArn))
			f.flush()
		})
	})
}

func daemonRevisions(fs *flag.FlagSet) action {
	return daemonRefAction(fs, func(ctx context.Context, s *session, c *ecs.Client, arn string) error {
		d, err := c.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(arn)})
		if err != nil {
			return err
		}
		running := map[string]types.DaemonRevisionDetail{}
		var arns []string
		for _, r := range d.Daemon.CurrentRevisions {
			arns = append(arns, str(r.Arn))
			running[str(r.Arn)] = r
		}
		all := &ecs.DescribeDaemonRevisionsOutput{DaemonRevisions: []types.DaemonRevision{}}
		for i := 0; i < len(arns); i += 20 {
			out, err := c.DescribeDaemonRevisions(ctx, &ecs.DescribeDaemonRevisionsInput{DaemonRevisionArns: arns[i:min(i+20, len(arns))]})
			if err != nil {
				return err
			}
			all.DaemonRevisions = append(all.DaemonRevisions, out.DaemonRevisions...)
			all.Failures = append(all.Failures, out.Failures...)
		}
		err = s.show(all, func(w io.Writer) {
			tw := newTable(w, "REVISION", "TASK DEFINITION", "CRITICAL", "PROPAGATE TAGS", "RUNNING", "WITHOUT DAEMON", "CREATED")
			for _, r := range all.DaemonRevisions {
				det := running[str(r.DaemonRevisionArn)]
				fam, rev := familyRevision(str(r.DaemonTaskDefinitionArn))
				row(tw, lastSegment(str(r.DaemonRevisionArn)), fam+":"+rev, boolText(r.Critical), string(r.PropagateTags),
					strconv.Itoa(int(det.TotalRunningCount)), strconv.Itoa(int(det.TotalWithoutDaemonCount)), ts(r.CreatedAt))
			}
			tw.Flush()
		})
		return errors.Join(err, failuresError("daemon revision", all.Failures))
	})
}

func daemonDeployments(fs *flag.FlagSet) action {
	var status listFlag
	fs.Var(&status, "status", "only deployments in `status` (repeatable): PENDING, IN_PROGRESS, SUCCESSFUL, STOPPED, ...")
	return daemonRefAction(fs, func(ctx context.Context, s *session, c *ecs.Client, arn string) error {
		in := &ecs.ListDaemonDeploymentsInput{DaemonArn: aws.String(arn)}
		for _, st := range status {
			in.Status = append(in.Status, types.DaemonDeploymentStatus(strings.ToUpper(st)))
		}
		var arns []string
		for {
			page, err := c.ListDaemonDeployments(ctx, in)
			if err != nil {
				return err
			}
			for _, d := range page.DaemonDeployments {
				arns = append(arns, str(d.DaemonDeploymentArn))
			}
			if aws.ToString(page.NextToken) == "" {
				break
			}
			in.NextToken = page.NextToken
		}
		all := &ecs.DescribeDaemonDeploymentsOutput{DaemonDeployments: []types.DaemonDeployment{}}
		for i := 0; i < len(arns); i += 20 {
			out, err := c.DescribeDaemonDeployments(ctx, &ecs.DescribeDaemonDeploymentsInput{DaemonDeploymentArns: arns[i:min(i+20, len(arns))]})
			if err != nil {
				return err
			}
			all.DaemonDeployments = append(all.DaemonDeployments, out.DaemonDeployments...)
			all.Failures = append(all.Failures, out.Failures...)
		}
		// Keep the list order (newest first), whatever order describe used.
		order := make(map[string]int, len(arns))
		for i, a := range arns {
			order[a] = i
		}
		slices.SortStableFunc(all.DaemonDeployments, func(a, b types.DaemonDeployment) int {
			return order[str(a.DaemonDeploymentArn)] - order[str(b.DaemonDeploymentArn)]
		})
		labels := map[string]string{}
		if !s.json() {
			var targets []string
			for _, d := range all.DaemonDeployments {
				if t := d.TargetDaemonRevision; t != nil {
					targets = append(targets, str(t.Arn))
				}
			}
			if err := revisionLabels(ctx, c, labels, targets...); err != nil {
				return err
			}
		}
		err := s.show(all, func(w io.Writer) {
			tw := newTable(w, "DEPLOYMENT", "STATUS", "TARGET REVISION", "RUNNING", "DRAINING", "CREATED", "FINISHED", "REASON")
			for _, d := range all.DaemonDeployments {
				var target, run, drain string
				if t := d.TargetDaemonRevision; t != nil {
					target, run, drain = revText(str(t.Arn), labels), i32(t.TotalRunningInstanceCount), i32(t.TotalDrainingInstanceCount)
				}
				row(tw, lastSegment(str(d.DaemonDeploymentArn)), string(d.Status), target, run, drain,
					ts(d.CreatedAt), ts(d.FinishedAt), str(d.StatusReason))
			}
			tw.Flush()
		})
		return errors.Join(err, failuresError("daemon deployment", all.Failures))
	})
}

// daemonClusterName splits arn:...:daemon/CLUSTER/NAME.
func daemonClusterName(arn string) (cluster, name string) {
	_, path, _ := strings.Cut(arn, ":daemon/")
	cluster, name, ok := strings.Cut(path, "/")
	if !ok {
		return "", lastSegment(arn)
	}
	return cluster, name
}

// waitFlags are --wait and --timeout of the commands that can follow what
// they started.
type waitFlags struct {
	wait    bool
	timeout time.Duration
}

func (w *waitFlags) register(fs *flag.FlagSet, follows string) {
	fs.BoolVar(&w.wait, "wait", false, "follow "+follows)
	fs.DurationVar(&w.timeout, "timeout", 0, "with --wait, give up after `duration`, exit 6")
}

func (w *waitFlags) check() error {
	if w.timeout != 0 && !w.wait {
		return usageErrorf("--timeout needs --wait")
	}
	return nil
}

package main

// -compare-user: what authorizing a call against an IAM user's policy costs,
// measured against the root (whose calls skip policy evaluation) on the same
// server, the same fixture and the same workloads.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/iam"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
	"github.com/capstanhq/capstan/internal/iam/policy"
)

const (
	principalRoot = "root"
	principalUser = "user"
)

// Comparison is the report's -compare-user part.
type Comparison struct {
	UserARN    string `json:"userArn"`
	PolicyARN  string `json:"policyArn"`
	Statements int    `json:"policyStatements"`
	PolicySize int    `json:"policySize"` // characters other than whitespace
	Policy     string `json:"policy"`
	Mode       string `json:"mode"` // mixed or phases
	Rounds     int    `json:"rounds"`
	// Order is the phases of every scenario, in the order they ran.
	Order  []string   `json:"order"`
	Ratios []Ratio    `json:"ratios"`
	Phases []PhaseRow `json:"phases"`
}

// Ratio is the user's numbers over the root's for one operation and
// client count; above 1 the user is slower (or, for throughput, faster).
type Ratio struct {
	Operation      string  `json:"operation"`
	Clients        int     `json:"clients"`
	RootP50        float64 `json:"rootP50Ms"`
	UserP50        float64 `json:"userP50Ms"`
	P50Ratio       float64 `json:"p50Ratio"`
	RootP99        float64 `json:"rootP99Ms"`
	UserP99        float64 `json:"userP99Ms"`
	P99Ratio       float64 `json:"p99Ratio"`
	RootThroughput float64 `json:"rootThroughputPerSec"`
	UserThroughput float64 `json:"userThroughputPerSec"`
	// CPU per request is this process's CPU (clients and, in-process, the
	// server) over the requests: less disturbed by other work on the
	// machine than latency is. For churn it is per pair.
	RootCPUPerReq float64 `json:"rootCpuMicrosPerRequest,omitempty"`
	UserCPUPerReq float64 `json:"userCpuMicrosPerRequest,omitempty"`
	CPURatio      float64 `json:"cpuRatio,omitempty"`
	// ...ByRound compare each round's user phase with its root phase, so
	// the spread shows how much of the ratio is the machine's drift.
	P50RatioByRound []float64 `json:"p50RatioByRound"`
	P99RatioByRound []float64 `json:"p99RatioByRound"`
}

// PhaseRow is one operation in one phase.
type PhaseRow struct {
	Operation string  `json:"operation"`
	Clients   int     `json:"clients"`
	Principal string  `json:"principal"`
	Round     int     `json:"round"`
	Requests  int     `json:"requests"`
	Errors    int     `json:"errors"`
	P50       float64 `json:"p50Ms"`
	P99       float64 `json:"p99Ms"`
}

// benchPolicy is the user's policy: ten statements, with wildcard actions,
// wildcard resource ARNs, policy variables and conditions, one a Deny the
// benchmark's calls reach but do not meet. Statements 1-3 allow every call
// the scenarios make; the others are there to be evaluated.
func benchPolicy(f *fixture) string {
	account := strings.Split(f.cluster, ":")[4]
	r := strings.NewReplacer("ACCOUNT", account, "CLUSTER", f.cluster)
	return r.Replace(`{"Version": "2012-10-17", "Statement": [
  {"Sid": "ReadDaemons", "Effect": "Allow", "Action": ["ecs:Describe*", "ecs:List*"],
   "Resource": "arn:aws:ecs:*:ACCOUNT:daemon/bench-*/*",
   "Condition": {"ArnEquals": {"ecs:cluster": "CLUSTER"}}},
  {"Sid": "ListInCluster", "Effect": "Allow", "Action": "ecs:List*", "Resource": "*",
   "Condition": {"ArnEquals": {"ecs:cluster": "CLUSTER"}}},
  {"Sid": "Churn", "Effect": "Allow", "Action": ["ecs:CreateDaemon", "ecs:DeleteDaemon"],
   "Resource": "arn:aws:ecs:*:ACCOUNT:daemon/bench-*/churn-*",
   "Condition": {"ArnEquals": {"ecs:cluster": "CLUSTER"},
                 "ForAllValues:ArnLike": {"ecs:capacity-provider": "arn:aws:ecs:*:ACCOUNT:capacity-provider/bench-mi-*"},
                 "ArnLikeIfExists": {"ecs:daemon-task-definition": "arn:aws:ecs:*:ACCOUNT:daemon-task-definition/bench-agent-*:*"}}},
  {"Sid": "PlatformDaemons", "Effect": "Allow", "Action": "ecs:*Daemon*",
   "Resource": "arn:aws:ecs:*:ACCOUNT:daemon/platform-*/*",
   "Condition": {"StringEquals": {"aws:RequestTag/team": "platform"}}},
  {"Sid": "TagAtCreation", "Effect": "Allow", "Action": "ecs:TagResource", "Resource": "*",
   "Condition": {"StringEquals": {"ecs:CreateAction": ["CreateDaemon", "CreateService"]},
                 "ForAllValues:StringEquals": {"aws:TagKeys": ["team", "env"]}}},
  {"Sid": "AppServices", "Effect": "Allow", "Action": ["ecs:*Service*", "ecs:RunTask", "ecs:StopTask"], "Resource": "*",
   "Condition": {"ArnLike": {"ecs:cluster": "arn:aws:ecs:*:ACCOUNT:cluster/apps-*"}, "Bool": {"capstan:HostAccess": "false"}}},
  {"Sid": "TaskDefinitions", "Effect": "Allow",
   "Action": ["ecs:RegisterTaskDefinition", "ecs:DescribeTaskDefinition", "ecs:ListTaskDefinition*"], "Resource": "*"},
  {"Sid": "OwnKeys", "Effect": "Allow", "Action": ["iam:*AccessKey*", "iam:GetUser"],
   "Resource": "arn:aws:iam::ACCOUNT:user/${aws:username}"},
  {"Sid": "UpdateLater", "Effect": "Allow", "Action": "ecs:UpdateDaemon", "Resource": "arn:aws:ecs:*:ACCOUNT:daemon/bench-*/*",
   "Condition": {"DateGreaterThan": {"aws:CurrentTime": "2020-01-01T00:00:00Z"}, "StringEqualsIfExists": {"aws:RequestTag/env": "bench"}}},
  {"Sid": "NoProduction", "Effect": "Deny", "Action": ["ecs:Create*", "ecs:Delete*", "ecs:Update*"], "Resource": "*",
   "Condition": {"ArnLike": {"ecs:cluster": "arn:aws:ecs:*:*:cluster/prod*"}}}
]}`)
}

// benchUser is the IAM user the comparison signs as.
type benchUser struct {
	name, policyARN, keyID, secret string
	ic                             *iam.Client
}

// createUser makes the user, its policy and an access key through the IAM
// API, signed as the root.
func createUser(ctx context.Context, t *target, f *fixture, doc string) (*benchUser, error) {
	ic := iam.New(iam.Options{
		Region:       t.region,
		BaseEndpoint: aws.String(t.url),
		Credentials:  credentials.NewStaticCredentialsProvider(t.keyID, t.secret, ""),
	})
	u := &benchUser{name: "bench-" + f.runID, ic: ic}
	if _, err := ic.CreateUser(ctx, &iam.CreateUserInput{UserName: aws.String(u.name)}); err != nil {
		return nil, fmt.Errorf("create user: %w", err)
	}
	p, err := ic.CreatePolicy(ctx, &iam.CreatePolicyInput{PolicyName: aws.String(u.name), PolicyDocument: aws.String(doc)})
	if err != nil {
		return u, fmt.Errorf("create policy: %w", err)
	}
	u.policyARN = aws.ToString(p.Policy.Arn)
	if _, err := ic.AttachUserPolicy(ctx, &iam.AttachUserPolicyInput{UserName: aws.String(u.name), PolicyArn: p.Policy.Arn}); err != nil {
		return u, fmt.Errorf("attach policy: %w", err)
	}
	k, err := ic.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: aws.String(u.name)})
	if err != nil {
		return u, fmt.Errorf("create access key: %w", err)
	}
	u.keyID, u.secret = aws.ToString(k.AccessKey.AccessKeyId), aws.ToString(k.AccessKey.SecretAccessKey)
	return u, nil
}

// delete removes what createUser made (on a server the run does not own).
func (u *benchUser) delete(ctx context.Context, stdout io.Writer) {
	name := aws.String(u.name)
	var errs []error
	if u.keyID != "" {
		_, err := u.ic.DeleteAccessKey(ctx, &iam.DeleteAccessKeyInput{UserName: name, AccessKeyId: aws.String(u.keyID)})
		errs = append(errs, err)
	}
	if u.policyARN != "" {
		_, err := u.ic.DetachUserPolicy(ctx, &iam.DetachUserPolicyInput{UserName: name, PolicyArn: aws.String(u.policyARN)})
		errs = append(errs, err)
		_, err = u.ic.DeletePolicy(ctx, &iam.DeletePolicyInput{PolicyArn: aws.String(u.policyARN)})
		errs = append(errs, err)
	}
	_, err := u.ic.DeleteUser(ctx, &iam.DeleteUserInput{UserName: name})
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(stdout, "cleanup: user %s: %v\n", u.name, err)
	}
}

// checkUser makes one call of each kind as the user, so a policy that does
// not allow the workload fails the run before it is measured. A new key
// may take a moment to reach other servers sharing the etcd.
func checkUser(ctx context.Context, c *ecs.Client, f *fixture, ops []string) error {
	calls := map[string]func() error{
		"describe": func() error {
			_, err := c.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(f.daemons[0])})
			return err
		},
		"list": func() error {
			_, err := c.ListDaemons(ctx, &ecs.ListDaemonsInput{ClusterArn: aws.String(f.cluster), MaxResults: aws.Int32(100)})
			return err
		},
		"churn": func() error {
			out, err := c.CreateDaemon(ctx, f.createInput("churn-"+f.runID+"-check"))
			if err != nil {
				return err
			}
			_, err = c.DeleteDaemon(ctx, &ecs.DeleteDaemonInput{DaemonArn: out.DaemonArn})
			return err
		},
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, op := range ops {
		for {
			err := calls[op]()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("-compare-user: the user may not run scenario %s: %w", op, err)
			}
			if err := benchkit.Sleep(ctx, 250*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// runCompare runs every scenario and client count -compare-rounds times
// as root and as user. In mixed mode (the default) every client alternates
// between the two request by request, so both see the same machine at the
// same moment and its drift cancels; a row's cpu is then the whole run's.
// In phases mode all clients are the root, then all the user, in pairs
// whose order alternates (root first in even rounds), which also shows
// throughput and CPU per request but leaves the phases to the machine's
// drift. Each principal's measurements are merged into one row per
// operation.
func runCompare(ctx context.Context, o options, t *target, f *fixture, admin *ecs.Client, root []*ecs.Client, rep *Report, stdout io.Writer) error {
	doc := benchPolicy(f)
	parsed, err := policy.Parse([]byte(doc))
	if err != nil {
		return fmt.Errorf("the benchmark's policy: %w", err)
	}
	u, err := createUser(ctx, t, f, doc)
	if u != nil && !t.inProcess {
		defer u.delete(context.WithoutCancel(ctx), stdout)
	}
	if err != nil {
		return err
	}
	maxClients := len(root)
	user := t.newClientsAs(maxClients, maxClients, o.rawBody, u.keyID, u.secret)
	if err := checkUser(ctx, user[0], f, o.ops); err != nil {
		return err
	}
	cmp := &Comparison{UserARN: "arn:aws:iam::" + strings.Split(f.cluster, ":")[4] + ":user/" + u.name, PolicyARN: u.policyARN,
		Statements: len(parsed.Statements), PolicySize: policy.Size([]byte(doc)), Policy: doc, Mode: o.compareMode, Rounds: o.rounds}
	for r := range o.rounds {
		switch {
		case o.compareMode == "mixed":
			cmp.Order = append(cmp.Order, "mixed")
		case r%2 == 0:
			cmp.Order = append(cmp.Order, principalRoot, principalUser)
		default:
			cmp.Order = append(cmp.Order, principalUser, principalRoot)
		}
	}
	fmt.Fprintf(stdout, "user %s, policy of %d statements (%d characters); %d %s rounds\n",
		u.name, cmp.Statements, cmp.PolicySize, o.rounds, o.compareMode)
	for _, op := range o.ops {
		for _, n := range o.clients {
			phases := map[string][]*phase{}
			for i, who := range cmp.Order {
				round := i
				if o.compareMode == "phases" {
					round = i / 2
				}
				var name string
				var w workload
				switch op {
				case "describe":
					name, w = opDescribe, describeWorkload(f)
				case "list":
					name, w = opList, listWorkload(f)
				case "churn":
					name, w = opPair, churnWorkload(f, fmt.Sprintf("%s-c%d-%s%d", f.runID, n, who[:1], round))
				}
				cs := root
				switch who {
				case principalUser:
					cs = user
				case "mixed":
					w = mixedWorkload(w, user)
				}
				fmt.Fprintf(stdout, "%-26s clients=%-4d %-5s round %d ", name, n, who, round)
				ph, err := measure(ctx, cs[:n], o.warmup, o.duration, w)
				if err != nil {
					return err
				}
				if op == "churn" {
					if _, err := settle(ctx, admin, f, o.settle); err != nil {
						return err
					}
				}
				byWho := map[string]*phase{who: ph}
				if who == "mixed" {
					byWho = ph.split(userPrefix)
				}
				for _, p := range []string{principalRoot, principalUser} {
					if byWho[p] == nil {
						continue
					}
					phases[p] = append(phases[p], byWho[p])
					for _, r := range summarize(n, byWho[p]) {
						cmp.Phases = append(cmp.Phases, PhaseRow{Operation: r.Operation, Clients: n, Principal: p, Round: round,
							Requests: r.Requests, Errors: r.Errors, P50: r.P50, P99: r.P99})
						fmt.Fprintf(stdout, "[%s %s %d req p50 %.2fms p99 %.1fms err %d] ", p, r.Operation, r.Requests, r.P50, r.P99, r.Errors)
					}
				}
				fmt.Fprintln(stdout)
			}
			var rootRows, userRows []Row
			for _, who := range []string{principalRoot, principalUser} {
				rows := summarize(n, phases[who]...)
				for i := range rows {
					rows[i].Principal = who
				}
				rep.Rows = append(rep.Rows, rows...)
				if who == principalRoot {
					rootRows = rows
				} else {
					userRows = rows
				}
			}
			cmp.Ratios = append(cmp.Ratios, ratios(rootRows, userRows, cmp.Phases, o.compareMode == "phases")...)
		}
	}
	rep.Compare = cmp
	return nil
}

// userPrefix marks the user's operations in a mixed phase.
const userPrefix = "user:"

// mixedWorkload runs w as the root and as the user by turns: even
// iterations of even workers and odd ones of odd workers as the root.
func mixedWorkload(w workload, user []*ecs.Client) workload {
	return func(ctx context.Context, worker, iter int, c *ecs.Client, r *recorder) {
		if (worker+iter)%2 == 0 {
			w(ctx, worker, iter, c, r)
			return
		}
		w(ctx, worker, iter, user[worker], &recorder{measureFrom: r.measureFrom, ops: r.ops, prefix: userPrefix})
	}
}

// split divides a mixed phase into the root's operations and the user's
// (those named with prefix), each with the whole phase's time and CPU.
func (ph *phase) split(prefix string) map[string]*phase {
	out := map[string]*phase{}
	for _, who := range []string{principalRoot, principalUser} {
		out[who] = &phase{ops: map[string]*series{}, elapsed: ph.elapsed, newConns: ph.newConns, cpu: ph.cpu, other: ph.other}
	}
	for _, op := range ph.order {
		who, name := principalRoot, op
		if n, ok := strings.CutPrefix(op, prefix); ok {
			who, name = principalUser, n
		}
		out[who].ops[name] = ph.ops[op]
		out[who].order = append(out[who].order, name)
	}
	return out
}

// ratios pairs the root's and the user's rows of one scenario.
// CPU per request is given for phases only: a mixed phase's CPU is both
// principals'.
func ratios(rootRows, userRows []Row, phases []PhaseRow, withCPU bool) []Ratio {
	var out []Ratio
	for _, rr := range rootRows {
		for _, ur := range userRows {
			if ur.Operation != rr.Operation {
				continue
			}
			x := Ratio{Operation: rr.Operation, Clients: rr.Clients, RootP50: rr.P50, UserP50: ur.P50, P50Ratio: div(ur.P50, rr.P50),
				RootP99: rr.P99, UserP99: ur.P99, P99Ratio: div(ur.P99, rr.P99), RootThroughput: rr.Throughput, UserThroughput: ur.Throughput}
			if withCPU {
				x.RootCPUPerReq, x.UserCPUPerReq = cpuPerReq(rootRows, rr), cpuPerReq(userRows, ur)
				x.CPURatio = div(x.UserCPUPerReq, x.RootCPUPerReq)
			}
			byRound := map[int]map[string]PhaseRow{}
			maxRound := -1
			for _, p := range phases {
				if p.Operation == rr.Operation && p.Clients == rr.Clients {
					if byRound[p.Round] == nil {
						byRound[p.Round] = map[string]PhaseRow{}
					}
					byRound[p.Round][p.Principal] = p
					maxRound = max(maxRound, p.Round)
				}
			}
			for r := 0; r <= maxRound; r++ {
				a, b := byRound[r][principalRoot], byRound[r][principalUser]
				x.P50RatioByRound = append(x.P50RatioByRound, div(b.P50, a.P50))
				x.P99RatioByRound = append(x.P99RatioByRound, div(b.P99, a.P99))
			}
			out = append(out, x)
		}
	}
	return out
}

// cpuPerReq is the process's CPU in µs per request of r, or per pair
// when r is one half of a churn pair.
func cpuPerReq(rows []Row, r Row) float64 {
	n := r.Throughput
	for _, x := range rows {
		if x.Operation == opPair {
			n = x.Throughput
		}
	}
	if n == 0 {
		return 0
	}
	return float64(int(r.ProcessCPU / n * 1e6))
}

func div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return float64(int(a/b*1000+0.5)) / 1000
}

func printComparison(w io.Writer, rep *Report) {
	c := rep.Compare
	fmt.Fprintf(w, "\nuser / root (%s: %d statements, %d characters; %d %s rounds: %s):\n",
		c.UserARN, c.Statements, c.PolicySize, c.Rounds, c.Mode, strings.Join(c.Order, ","))
	cpu := c.Mode == "phases" // a mixed phase's CPU is both principals'
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "operation\tclients\troot p50\tuser p50\tratio\troot p99\tuser p99\tratio\troot req/s\tuser req/s\t"
	if cpu {
		head += "root cpu µs\tuser cpu µs\tratio\t"
	}
	fmt.Fprintln(tw, head+"p50 ratio by round\tp99 ratio by round\t")
	for _, r := range c.Ratios {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.0f\t%.0f\t", r.Operation, r.Clients,
			r.RootP50, r.UserP50, r.P50Ratio, r.RootP99, r.UserP99, r.P99Ratio, r.RootThroughput, r.UserThroughput)
		if cpu {
			fmt.Fprintf(tw, "%.0f\t%.0f\t%.2f\t", r.RootCPUPerReq, r.UserCPUPerReq, r.CPURatio)
		}
		fmt.Fprintf(tw, "%s\t%s\t\n", floats(r.P50RatioByRound), floats(r.P99RatioByRound))
	}
	tw.Flush()
}

func floats(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(s, " ")
}

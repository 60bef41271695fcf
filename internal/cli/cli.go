// Package cli is the capstan client: `capstan <noun> <verb> [flags]`
// commands built on the AWS SDK's ECS client, so every request the CLI makes
// is one the AWS CLI or any SDK could make too.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/smithy-go"
)

// Main runs a client command and returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return run(ctx, args, os.Getenv, os.Stdin, stdout, stderr)
}

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the request failed
	exitUsage = 2 // the command line is wrong
)

// run is Main with the environment and standard input supplied by the caller.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	s := &session{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr, cmd: "capstan"}

	// Global flags may come before the noun and between noun and verb.
	top := s.flagSet("capstan")
	rest, err := parseUntilWord(top, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, topHelp())
		return exitOK
	}
	if err != nil {
		return s.usage(err, topHelp)
	}
	if len(rest) == 0 {
		return s.usage(errors.New("missing noun"), topHelp)
	}
	n := findNoun(rest[0])
	if n == nil {
		return s.usage(fmt.Errorf("unknown noun %q", rest[0]), topHelp)
	}
	v := n.run
	rest = rest[1:]
	s.cmd = "capstan " + n.name
	if v == nil {
		nounFlags := s.flagSet("capstan " + n.name)
		rest, err = parseUntilWord(nounFlags, rest)
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, n.help())
			return exitOK
		}
		if err != nil {
			return s.usage(err, n.help)
		}
		if len(rest) == 0 {
			return s.usage(errors.New("missing verb"), n.help)
		}
		if rest[0] == "help" {
			fmt.Fprint(stdout, n.help())
			return exitOK
		}
		if v = n.find(rest[0]); v == nil {
			return s.usage(fmt.Errorf("unknown verb %q for %s", rest[0], n.name), n.help)
		}
		rest = rest[1:]
	}

	s.cmd = strings.TrimSpace("capstan " + n.name + " " + v.name)
	fs := s.flagSet(s.cmd)
	act := v.bind(fs)
	verbHelp := func() string { return v.help(n, fs) }
	pos, err := parseInterspersed(fs, rest)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, verbHelp())
		return exitOK
	}
	if err != nil {
		return s.usage(err, verbHelp)
	}
	switch s.g.output {
	case "", "table":
		s.g.output = "table"
	case "json":
	default:
		return s.usage(fmt.Errorf("-o %q: want table or json", s.g.output), verbHelp)
	}
	s.setFlags = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { s.setFlags[f.Name] = true })

	err = act(ctx, s, pos)
	if err != nil && ctx.Err() != nil {
		return s.interrupted(n, v, fs, pos)
	}
	var ue *usageError
	if errors.As(err, &ue) {
		return s.usage(err, verbHelp)
	}
	var es *exitStatus
	if errors.As(err, &es) {
		fmt.Fprintf(s.stderr, "capstan: %s\n", es.msg)
		return es.code
	}
	if err != nil {
		s.printError(err)
		return exitError
	}
	return exitOK
}

// session is one command invocation.
type session struct {
	g        globals
	getenv   func(string) string
	stdin    io.Reader
	stdout   io.Writer
	stderr   io.Writer
	setFlags map[string]bool
	conn     *connection
	ecs      *ecs.Client
	cmd      string // the command as far as it is known, for usage errors
}

func (s *session) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and help are printed by run
	fs.Usage = func() {}
	s.g.register(fs)
	return fs
}

// client connects on first use, so usage errors never need a server.
func (s *session) client(ctx context.Context) (*ecs.Client, error) {
	if s.ecs != nil {
		return s.ecs, nil
	}
	c, err := connect(ctx, &s.g, s.getenv)
	if err != nil {
		return nil, err
	}
	s.conn, s.ecs = c, c.client()
	return s.ecs, nil
}

// set reports whether the user gave flag name on the command line.
func (s *session) set(name string) bool { return s.setFlags[name] }

func (s *session) json() bool { return s.g.output == "json" }

// show prints v as JSON with -o json, else calls table.
func (s *session) show(v smithy.Serializable, table func(w io.Writer)) error {
	if s.json() {
		b, err := marshalShape(v)
		if err != nil {
			return err
		}
		_, err = s.stdout.Write(b)
		return err
	}
	table(s.stdout)
	return nil
}

func (s *session) warn(format string, args ...any) {
	fmt.Fprintf(s.stderr, "capstan: warning: "+format+"\n", args...)
}

// exitInterrupted is the shells' code for a command ended by SIGINT.
const exitInterrupted = 130

// interrupted ends a command the user interrupted (Ctrl-C). A request
// already made goes on in the server: after --wait that is a deployment,
// and the user is told how to pick up following it.
func (s *session) interrupted(n *noun, v *verb, fs *flag.FlagSet, pos []string) int {
	if !s.set("wait") && !(n.name == "daemon" && v.name == "rollout") {
		fmt.Fprintln(s.stderr, "capstan: interrupted")
		return exitInterrupted
	}
	watch := "capstan events --follow"
	if len(pos) > 0 {
		name := pos[len(pos)-1]
		switch n.name {
		case "daemon":
			watch = "capstan daemon rollout status " + name
		case "service":
			watch = "capstan service status " + name
		}
		if f := fs.Lookup("cluster"); f != nil && f.Value.String() != "" {
			watch += " --cluster " + f.Value.String()
		}
		if n.name == "service" {
			watch += " --wait"
		}
	}
	fmt.Fprintf(s.stderr, "capstan: stopped waiting; the deployment goes on in the server. Follow it again with: %s\n", watch)
	return exitInterrupted
}

// usage reports a command-line mistake in two lines: what is wrong and
// where the help is. The help itself would bury the message.
func (s *session) usage(err error, _ func() string) int {
	fmt.Fprintf(s.stderr, "capstan: %v\nRun '%s --help' for usage.\n", err, s.cmd)
	return exitUsage
}

// printError prints `capstan: <ErrorCode>: <message>` for API errors.
func (s *session) printError(err error) {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			s.printError(e)
		}
		return
	}
	var ae smithy.APIError
	var ue *url.Error
	switch {
	case errors.As(err, &ae) && !(s.conn != nil && noErrorCode(ae)):
		fmt.Fprintf(s.stderr, "capstan: %s: %s\n", ae.ErrorCode(), ae.ErrorMessage())
	case s.conn != nil && certProblem(err) == notTLS:
		fmt.Fprintf(s.stderr, "capstan: cannot reach %s: %s\n", s.conn.endpoint, notTLS)
	case s.conn != nil && certProblem(err) != "":
		trust := "the system's roots: pass --ca-bundle FILE or set AWS_CA_BUNDLE to the server's CA bundle"
		if s.conn.caBundle != "" {
			trust = "the CA bundle " + s.conn.caBundle
		}
		fmt.Fprintf(s.stderr, "capstan: cannot reach %s: its certificate is not trusted: %s; checked against %s\n", s.conn.endpoint, certProblem(err), trust)
	case errors.As(err, &ue) && s.conn != nil:
		fmt.Fprintf(s.stderr, "capstan: cannot reach %s: %v\n", s.conn.endpoint, ue.Err)
	case s.conn != nil && strings.HasPrefix(s.conn.endpoint, "http://") && strings.Contains(err.Error(), "StatusCode: 400, RequestID: ,"):
		// A TLS port answers plain HTTP with a bare 400, no ECS error.
		fmt.Fprintf(s.stderr, "capstan: %v\ncapstan: a 400 without an error body: if the server serves TLS, use https://\n", err)
	case s.conn != nil && notCapstan(err) != "":
		fmt.Fprintf(s.stderr, "capstan: %s is not a Capstan/ECS API: %s; check --endpoint, $CAPSTAN_ENDPOINT or the config file\n", s.conn.endpoint, notCapstan(err))
	default:
		fmt.Fprintf(s.stderr, "capstan: %v\n", err)
	}
}

// usageError is a command-line mistake: exit 2 with the command's help.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// apiError is a failure the CLI detects itself but that means the same as
// the server's error of that name (a name that resolves to nothing).
type apiError struct{ code, msg string }

func (e *apiError) Error() string                 { return e.code + ": " + e.msg }
func (e *apiError) ErrorCode() string             { return e.code }
func (e *apiError) ErrorMessage() string          { return e.msg }
func (e *apiError) ErrorFault() smithy.ErrorFault { return smithy.FaultClient }

// noun is a resource kind; verbs act on it.
type noun struct {
	name    string
	summary string
	verbs   []*verb
	// run, instead of verbs, makes the noun a command of its own
	// (capstan events [flags]).
	run *verb
}

type verb struct {
	name    string
	args    string // synopsis after the verb
	summary string
	details string
	// bind registers the verb's flags and returns the action to run after
	// parsing with the positional arguments.
	bind func(fs *flag.FlagSet) action
}

type action func(ctx context.Context, s *session, args []string) error

var nouns = []*noun{clusterNoun(), capacityProviderNoun(), taskDefinitionNoun(), daemonTaskDefinitionNoun(), daemonNoun(), serviceNoun(), taskNoun(), instanceNoun(), agentCredentialNoun(), eventsNoun(), logsNoun(), execNoun(),
	userNoun(), groupNoun(), policyNoun(), whoamiNoun(), auditNoun()}

func findNoun(name string) *noun {
	for _, n := range nouns {
		if n.name == name {
			return n
		}
	}
	return nil
}

func (n *noun) find(name string) *verb {
	for _, v := range n.verbs {
		if v.name == name {
			return v
		}
	}
	return nil
}

func topHelp() string {
	var b strings.Builder
	b.WriteString("Usage: capstan [global flags] <noun> <verb> [flags]\n\nNouns:\n")
	for _, n := range nouns {
		fmt.Fprintf(&b, "  %-24s %s\n", n.name, n.summary)
	}
	b.WriteString("\nRun 'capstan <noun> -h' for its verbs.\n\n")
	b.WriteString(globalHelp)
	return b.String()
}

func (n *noun) help() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: capstan %s <verb> [flags]\n\n%s\n\nVerbs:\n", n.name, n.summary)
	for _, v := range n.verbs {
		fmt.Fprintf(&b, "  %-12s %s\n", v.name, v.summary)
	}
	fmt.Fprintf(&b, "\nRun 'capstan %s <verb> -h' for its flags.\n\n", n.name)
	b.WriteString(globalHelp)
	return b.String()
}

func (v *verb) help(n *noun, fs *flag.FlagSet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s\n\n%s\n", strings.Join(strings.Fields("capstan "+n.name+" "+v.name+" "+v.args), " "), v.summary)
	if v.details != "" {
		fmt.Fprintf(&b, "\n%s\n", strings.TrimSpace(v.details))
	}
	var own strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		if isGlobal(f.Name) {
			return
		}
		name, usage := flag.UnquoteUsage(f)
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		line := "  " + dash + f.Name
		if name != "" {
			line += " " + name
		}
		if len(line) > 26 {
			line += "\n" + strings.Repeat(" ", 26)
		}
		fmt.Fprintf(&own, "%-26s %s\n", line, usage)
	})
	if own.Len() > 0 {
		fmt.Fprintf(&b, "\nFlags:\n%s", own.String())
	}
	b.WriteString("\n" + globalHelp)
	return b.String()
}

func isGlobal(name string) bool {
	switch name {
	case "endpoint", "config", "region", "access-key-id", "secret-access-key", "o", "output":
		return true
	}
	return false
}

// parseUntilWord parses flags up to the first non-flag word.
func parseUntilWord(fs *flag.FlagSet, args []string) ([]string, error) {
	if err := fs.Parse(args); err != nil {
		return nil, asTyped(err, args)
	}
	return fs.Args(), nil
}

// parseInterspersed parses flags anywhere among the arguments (the flag
// package stops at the first positional one), honouring "--".
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	all := args
	for {
		if err := fs.Parse(args); err != nil {
			return nil, asTyped(err, all)
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// flagInError finds the flag name in the flag package's error messages,
// which always show it with one dash.
var flagInError = regexp.MustCompile(`(not defined: |for flag |for |an argument: )-([^\s:=]+)`)

// asTyped rewrites a flag error to show the flag with the dashes the user
// typed (--bogus, not -bogus), so it can be found on the command line.
func asTyped(err error, args []string) error {
	m := flagInError.FindStringSubmatchIndex(err.Error())
	if m == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	msg := err.Error()
	name := msg[m[4]:m[5]]
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--"+name || strings.HasPrefix(a, "--"+name+"=") {
			return errors.New(msg[:m[4]] + "-" + msg[m[4]:])
		}
	}
	return err
}

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/capstanhq/capstan/internal/cli"
)

// usageError is a command-line mistake: main prints it in two lines, the
// mistake and where the help is, and exits 2.
type usageError struct {
	err error
	cmd string
}

func (e *usageError) Error() string { return e.err.Error() }

// parseFlags parses args into fs. -h prints the flags to standard output
// and returns flag.ErrHelp; a mistake comes back as a usageError naming
// the flag as the user typed it. The flag package itself would print the
// whole flag list under the message.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(os.Stdout)
		fs.Usage()
		return err
	case err != nil:
		return &usageError{err: cli.FlagErrorAsTyped(err, args), cmd: fs.Name()}
	}
	return nil
}

// exitFor reports err as main does and returns the exit code.
func exitFor(err error) int {
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "capstan: %v\nRun '%s --help' for usage.\n", ue.err, ue.cmd)
		return 2
	}
	fmt.Fprintln(os.Stderr, "capstan:", err)
	return 1
}

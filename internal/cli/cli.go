// Package cli is the capstan client: commands built on the AWS SDK's ECS client.
package cli

import (
	"context"
	"fmt"
	"io"
)

// Main runs a client command and returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintf(stderr, "capstan: unknown command %q\n", args[0])
	return 2
}

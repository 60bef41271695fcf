// Package taskdef validates and normalizes task definitions and daemon task
// definitions before they are stored: the rules ECS applies beyond its model,
// plus the lines Capstan draws because it runs tasks on a plain Docker Engine
// with no AWS services behind it.
//
// Every error is a *fault.Error whose message starts with the path of the
// offending member, e.g. "containerDefinitions[1].portMappings[0].hostPort".
// Valid ECS input that Capstan cannot run is reported as fault.Unsupported.
// The generated shapes Check runs first, so required members, enums and model
// bounds are not repeated here.
package taskdef

import (
	"path"
	"regexp"
	"strconv"

	"github.com/capstanhq/capstan/internal/fault"
)

// Limits Capstan applies; docs/task-definitions.md explains each choice.
const (
	maxContainers  = 10     // ECS quota per task definition
	minTaskCPU     = 128    // ECS floor for task-level cpu outside Fargate
	maxCPU         = 196608 // 192 vCPU, the ECS ceiling outside Fargate
	minMemory      = 6      // MiB; Docker refuses smaller limits
	maxTimeout     = 3600   // seconds; ECS sets none outside Fargate, so a hung stop cannot stall a drain forever
	maxPlacements  = 10     // ECS quota for task definition placement constraints
	maxIgnoredExit = 50
)

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)

// checkName applies the family/container/volume naming rule.
func checkName(field, name string) error {
	if !namePattern.MatchString(name) {
		return fault.Invalid(field, "must be 1-255 letters, digits, hyphens or underscores (got %q)", clip(name))
	}
	return nil
}

// unsupported reports valid ECS input Capstan cannot run, naming the field.
func unsupported(field, format string, args ...any) error {
	return fault.NotSupported(field+": "+format, args...)
}

// required reports a missing member. ECS answers these with ClientException.
func required(field string) error {
	return fault.ClientError("%s: is required", field)
}

// between checks an optional integer against an inclusive range.
func between(field string, v *int32, lo, hi int32) error {
	if v != nil && (*v < lo || *v > hi) {
		return fault.Invalid(field, "must be between %d and %d (got %d)", lo, hi, *v)
	}
	return nil
}

// absolute checks a Linux path inside or outside a container.
func absolute(field, p string) error {
	if !path.IsAbs(p) {
		return fault.Invalid(field, "must be an absolute path (got %q)", clip(p))
	}
	return nil
}

func at(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }

// clip keeps echoed user input short in messages.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

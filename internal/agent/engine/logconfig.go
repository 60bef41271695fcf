package engine

import (
	"maps"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

// A container's output stays bounded on the instance: with no
// logConfiguration it goes to Docker's json-file driver rotated at
// LogMaxSize, keeping LogMaxFile files; json-file and local
// configurations without their own limits get the same. capstan logs
// reads these files back through the agent.
const (
	LogMaxSize = "10m"
	LogMaxFile = "3"
)

// logConfig is the driver and options a container is created with.
func logConfig(lc *shapes.LogConfiguration) (string, map[string]string) {
	if lc == nil || lc.LogDriver == "" {
		return "json-file", map[string]string{"max-size": LogMaxSize, "max-file": LogMaxFile}
	}
	opts := maps.Clone(lc.Options)
	if lc.LogDriver == "json-file" || lc.LogDriver == "local" {
		if opts == nil {
			opts = map[string]string{}
		}
		if opts["max-size"] == "" {
			opts["max-size"] = LogMaxSize
		}
		if opts["max-file"] == "" {
			opts["max-file"] = LogMaxFile
		}
	}
	return lc.LogDriver, opts
}

package cli

// Which settings an update gives, so --keep-unspecified can repeat the
// others from the daemon's current revision.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// Settings of an update, named as the UpdateDaemon request members (the
// server's preview uses the same names).
const (
	setTaskDef     = "daemonTaskDefinitionArn"
	setCapacity    = "capacityProviderArns"
	setDrain       = "deploymentConfiguration.drainPercent"
	setBake        = "deploymentConfiguration.bakeTimeInMinutes"
	setAlarms      = "deploymentConfiguration.alarms"
	setCritical    = "critical"
	setPropagate   = "propagateTags"
	setManagedTags = "enableECSManagedTags"
	setExecute     = "enableExecuteCommand"
)

// settingFlags maps daemon flags to the settings they give.
var settingFlags = map[string]string{
	"task-definition": setTaskDef, "capacity-provider": setCapacity, "drain-percent": setDrain, "bake-time": setBake,
	"critical": setCritical, "no-critical": setCritical, "propagate-tags": setPropagate,
	"enable-ecs-managed-tags": setManagedTags, "enable-execute-command": setExecute,
}

// readUpdateFile decodes an UpdateDaemon request file and names the
// settings it gives: members present and not null, in any case (as
// decodeInput matches them).
func readUpdateFile(path string, stdin io.Reader, in *ecs.UpdateDaemonInput) (map[string]bool, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	if err := decodeInput(data, in); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var doc map[string]any
	json.Unmarshal(data, &doc) // decodeInput accepted it
	given := map[string]bool{}
	for k, v := range doc {
		if v == nil {
			continue
		}
		switch strings.ToLower(k) {
		case "daemontaskdefinitionarn":
			given[setTaskDef] = true
		case "capacityproviderarns":
			given[setCapacity] = true
		case "critical":
			given[setCritical] = true
		case "propagatetags":
			given[setPropagate] = true
		case "enableecsmanagedtags":
			given[setManagedTags] = true
		case "enableexecutecommand":
			given[setExecute] = true
		case "deploymentconfiguration":
			m, _ := v.(map[string]any)
			for k, v := range m {
				if v == nil {
					continue
				}
				switch strings.ToLower(k) {
				case "drainpercent":
					given[setDrain] = true
				case "baketimeinminutes":
					given[setBake] = true
				case "alarms":
					given[setAlarms] = true
				}
			}
		}
	}
	return given, nil
}

// keepUnspecified copies into in every setting not given from cur, the
// current configuration, and returns the settings it copied.
func keepUnspecified(in, cur *ecs.UpdateDaemonInput, given map[string]bool) map[string]bool {
	kept := map[string]bool{}
	keep := func(name string, copy func()) {
		if !given[name] {
			copy()
			kept[name] = true
		}
	}
	cdc := cur.DeploymentConfiguration
	if cdc == nil {
		cdc = &types.DaemonDeploymentConfiguration{}
	}
	dc := func() *types.DaemonDeploymentConfiguration {
		if in.DeploymentConfiguration == nil {
			in.DeploymentConfiguration = &types.DaemonDeploymentConfiguration{}
		}
		return in.DeploymentConfiguration
	}
	keep(setTaskDef, func() { in.DaemonTaskDefinitionArn = cur.DaemonTaskDefinitionArn })
	keep(setCapacity, func() { in.CapacityProviderArns = slices.Clone(cur.CapacityProviderArns) })
	keep(setDrain, func() { dc().DrainPercent = cdc.DrainPercent })
	keep(setBake, func() { dc().BakeTimeInMinutes = cdc.BakeTimeInMinutes })
	keep(setAlarms, func() { dc().Alarms = cdc.Alarms })
	keep(setCritical, func() { in.Critical = cur.Critical })
	keep(setPropagate, func() { in.PropagateTags = cur.PropagateTags })
	keep(setManagedTags, func() { in.EnableECSManagedTags = cur.EnableECSManagedTags })
	keep(setExecute, func() { in.EnableExecuteCommand = cur.EnableExecuteCommand })
	return kept
}

// currentConfiguration reads the daemon's current revision as an update
// request (CapstanV1.DescribeDaemonConfiguration).
func (s *session) currentConfiguration(ctx context.Context, daemonArn string) (*ecs.UpdateDaemonInput, error) {
	var out struct {
		CurrentConfiguration json.RawMessage `json:"currentConfiguration"`
	}
	if err := s.callExtension(ctx, "DescribeDaemonConfiguration", map[string]string{"daemonArn": daemonArn}, &out); err != nil {
		return nil, err
	}
	cur := &ecs.UpdateDaemonInput{}
	if err := decodeInput(out.CurrentConfiguration, cur); err != nil {
		return nil, fmt.Errorf("current configuration of %s: %w", daemonArn, err)
	}
	return cur, nil
}

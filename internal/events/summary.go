package events

import (
	"encoding/json"
	"slices"
	"strings"
)

// Mentions reports whether ref is one of the event's resources or a string
// value anywhere in its detail (a daemon ARN appears only in the detail of
// a start failure without a task).
func (e Event) Mentions(ref string) bool {
	if ref == "" {
		return false
	}
	if slices.Contains(e.Resources, ref) {
		return true
	}
	// A cheap test first: most events do not contain ref at all.
	if !strings.Contains(string(e.Detail), ref) {
		return false
	}
	var v any
	if json.Unmarshal(e.Detail, &v) != nil {
		return false
	}
	return hasString(v, ref)
}

func hasString(v any, s string) bool {
	switch x := v.(type) {
	case string:
		return x == s
	case []any:
		return slices.ContainsFunc(x, func(e any) bool { return hasString(e, s) })
	case map[string]any:
		for _, e := range x {
			if hasString(e, s) {
				return true
			}
		}
	}
	return false
}

// summaryFields are the detail members a one-line summary draws on, across
// every detail type.
type summaryFields struct {
	LastStatus           string `json:"lastStatus"`
	DesiredStatus        string `json:"desiredStatus"`
	StopCode             string `json:"stopCode"`
	StoppedReason        string `json:"stoppedReason"`
	Group                string `json:"group"`
	Status               string `json:"status"`
	AgentConnected       bool   `json:"agentConnected"`
	EventName            string `json:"eventName"`
	DaemonDeploymentArn  string `json:"daemonDeploymentArn"`
	FailureType          string `json:"failureType"`
	Reason               string `json:"reason"`
	DaemonArn            string `json:"daemonArn"`
	ContainerInstanceArn string `json:"containerInstanceArn"`
	CapacityProviderArn  string `json:"capacityProviderArn"`
}

// Subject is the resource an event is about: its first resource, else the
// daemon or instance its detail names.
func (e Event) Subject() string {
	if len(e.Resources) > 0 {
		return e.Resources[0]
	}
	var d summaryFields
	json.Unmarshal(e.Detail, &d)
	if d.DaemonArn != "" {
		return d.DaemonArn
	}
	if d.CapacityProviderArn != "" {
		return d.CapacityProviderArn
	}
	return d.ContainerInstanceArn
}

// Summary is a one-line, human description of the event.
func (e Event) Summary() string {
	var d summaryFields
	json.Unmarshal(e.Detail, &d)
	switch e.DetailType {
	case TaskStateChange:
		s := d.LastStatus + " (desired " + d.DesiredStatus + ")"
		if d.Group != "" {
			s += " " + d.Group
		}
		if d.LastStatus == "STOPPED" && (d.StopCode != "" || d.StoppedReason != "") {
			s += ": " + strings.TrimPrefix(d.StopCode+": "+d.StoppedReason, ": ")
		}
		return s
	case ContainerInstanceStateChange:
		// The agent may still be connected at the moment of deregistration,
		// on its way out; what matters is that the instance is gone.
		if d.Status == "INACTIVE" {
			return "INACTIVE, deregistered"
		}
		if d.AgentConnected {
			return d.Status + ", agent connected"
		}
		return d.Status + ", agent disconnected"
	case DaemonDeploymentStateChange:
		return d.EventName + " " + lastSegment(d.DaemonDeploymentArn)
	case DaemonServiceAction, CapacityProviderAction:
		s := d.EventName + " " + d.FailureType
		if d.Reason != "" {
			s += ": " + d.Reason
		}
		return s
	}
	return ""
}

func lastSegment(arn string) string {
	return arn[strings.LastIndexByte(arn, '/')+1:]
}

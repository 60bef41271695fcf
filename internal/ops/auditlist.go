package ops

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"time"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/audit"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
)

// ListAuditEventsRequest selects audit records; every filter is optional.
type ListAuditEventsRequest struct {
	// Principal is an identity's ARN or IAM user name ("root" for the
	// account's root).
	Principal   string `json:"principal,omitempty"`
	AccessKeyID string `json:"accessKeyId,omitempty"`
	EventName   string `json:"eventName,omitempty"`
	// StartTime and EndTime bound eventTime: epoch seconds, or an RFC 3339
	// time as a string.
	StartTime  json.RawMessage `json:"startTime,omitempty"`
	EndTime    json.RawMessage `json:"endTime,omitempty"`
	ErrorsOnly bool            `json:"errorsOnly,omitempty"`
	MaxResults *int32          `json:"maxResults,omitempty"`
	// NextToken is the nextToken of an earlier call: the listing goes on
	// after what that one covered.
	NextToken   string `json:"nextToken,omitempty"`
	WaitSeconds *int32 `json:"waitSeconds,omitempty"`
}

// ListAuditEventsResponse carries records oldest first and the nextToken to
// continue from, also when none came (a follower passes it back).
type ListAuditEventsResponse struct {
	Events    []audit.Event `json:"events"`
	NextToken string        `json:"nextToken"`
}

// RegisterAudit adds CapstanV1.ListAuditEvents, reading trail, to h. It is
// apart from Register because the trail is the server's, not the fleet's.
func (s *Service) RegisterAudit(h *api.Handler, trail *audit.Trail) {
	api.RegisterExtension(h, audit.ListOperation, auditLister{trail}.ListAuditEvents)
}

type auditLister struct{ trail *audit.Trail }

var (
	auditKeyPattern  = regexp.MustCompile(`^[A-Za-z0-9]{1,128}$`)
	auditNamePattern = regexp.MustCompile(`^[A-Za-z0-9]{1,128}$`)
)

// ListAuditEvents pages through the audit trail. With waitSeconds it waits
// until at least one record is there to return.
func (l auditLister) ListAuditEvents(ctx context.Context, req *ListAuditEventsRequest) (*ListAuditEventsResponse, error) {
	q := audit.Query{Principal: req.Principal, AccessKeyID: req.AccessKeyID, EventName: req.EventName, ErrorsOnly: req.ErrorsOnly, Limit: 100}
	if len(req.Principal) > 2048 {
		return nil, fault.Invalid("principal", "must be an ARN or a user name of at most 2048 characters")
	}
	if req.AccessKeyID != "" && !auditKeyPattern.MatchString(req.AccessKeyID) {
		return nil, fault.Invalid("accessKeyId", "must be an access key ID: 1 to 128 letters and digits (got %q)", fleet.Clip(req.AccessKeyID))
	}
	if req.EventName != "" && !auditNamePattern.MatchString(req.EventName) {
		return nil, fault.Invalid("eventName", "must be an operation name such as CreateCluster: 1 to 128 letters and digits (got %q)", fleet.Clip(req.EventName))
	}
	var err error
	if q.Start, err = auditTime("startTime", req.StartTime); err != nil {
		return nil, err
	}
	if q.End, err = auditTime("endTime", req.EndTime); err != nil {
		return nil, err
	}
	if !q.Start.IsZero() && !q.End.IsZero() && q.End.Before(q.Start) {
		return nil, fault.Invalid("endTime", "must not be before startTime (%s is before %s)", q.End.Format(time.RFC3339), q.Start.Format(time.RFC3339))
	}
	if req.MaxResults != nil {
		if *req.MaxResults < 1 || *req.MaxResults > 1000 {
			return nil, fault.Invalid("maxResults", "must be between 1 and 1000 (got %d)", *req.MaxResults)
		}
		q.Limit = int(*req.MaxResults)
	}
	if req.WaitSeconds != nil {
		if *req.WaitSeconds < 0 || *req.WaitSeconds > fleet.MaxEventWait {
			return nil, fault.Invalid("waitSeconds", "must be between 0 and %d (got %d)", fleet.MaxEventWait, *req.WaitSeconds)
		}
		q.Wait = time.Duration(*req.WaitSeconds) * time.Second
	}
	if q.Cursor, err = audit.ParseCursor(req.NextToken); err != nil {
		return nil, err
	}
	res, err := l.trail.List(ctx, q)
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	return &ListAuditEventsResponse{Events: res.Events, NextToken: res.Cursor.String()}, nil
}

// auditTime reads a time filter: epoch seconds as ECS writes timestamps, or
// an RFC 3339 string as CloudTrail's records do.
func auditTime(field string, raw json.RawMessage) (time.Time, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return time.Time{}, nil
	}
	bad := fault.Invalid(field, "must be epoch seconds or an RFC 3339 time such as 2026-01-02T15:04:05Z (got %s)", fleet.Clip(string(raw)))
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return time.Time{}, bad
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return time.Time{}, bad
		}
		return t, nil
	}
	var ts shapes.Timestamp
	if err := ts.UnmarshalJSON(raw); err != nil {
		return time.Time{}, bad
	}
	return ts.Time, nil
}

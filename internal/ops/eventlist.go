package ops

import (
	"context"
	"slices"
	"time"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/events"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
)

// ListEventsRequest asks for a cluster's events after a cursor.
type ListEventsRequest struct {
	Cluster string `json:"cluster"`
	// After is a cursor from an earlier call, or an event id.
	After      string `json:"after,omitempty"`
	DetailType string `json:"detailType,omitempty"`
	// Resource keeps events that name it among their resources or anywhere
	// in their detail.
	Resource    string `json:"resource,omitempty"`
	MaxResults  *int32 `json:"maxResults,omitempty"`
	WaitSeconds *int32 `json:"waitSeconds,omitempty"`
}

// ListEventsResponse carries events oldest first and the cursor to pass as
// After next time (also when no event came).
type ListEventsResponse struct {
	Events []events.Event `json:"events"`
	Cursor string         `json:"cursor"`
}

func (s *Service) registerEvents(h *api.Handler) {
	api.RegisterExtension(h, "ListEvents", s.ListEvents)
}

// ListEvents pages through a cluster's recent events. With waitSeconds it
// waits, following the store, until at least one event is there to return.
func (s *Service) ListEvents(ctx context.Context, req *ListEventsRequest) (*ListEventsResponse, error) {
	if req.Cluster == "" {
		return nil, fault.Invalid("cluster", "is required")
	}
	if req.DetailType != "" && !slices.Contains(events.DetailTypes, req.DetailType) {
		return nil, fault.Invalid("detailType", "must be one of %q (got %q)", events.DetailTypes, fleet.Clip(req.DetailType))
	}
	if len(req.Resource) > 2048 {
		return nil, fault.Invalid("resource", "must be at most 2048 characters")
	}
	limit := 100
	if req.MaxResults != nil {
		if *req.MaxResults < 1 || *req.MaxResults > 1000 {
			return nil, fault.Invalid("maxResults", "must be between 1 and 1000 (got %d)", *req.MaxResults)
		}
		limit = int(*req.MaxResults)
	}
	wait := 0
	if req.WaitSeconds != nil {
		if *req.WaitSeconds < 0 || *req.WaitSeconds > fleet.MaxEventWait {
			return nil, fault.Invalid("waitSeconds", "must be between 0 and %d (got %d)", fleet.MaxEventWait, *req.WaitSeconds)
		}
		wait = int(*req.WaitSeconds)
	}
	cur, err := fleet.ParseEventCursor(req.After)
	if err != nil {
		return nil, err
	}
	cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	// Events recorded before this call are listed by it, though their
	// producers did not wait for their writes.
	sctx, cancel := context.WithTimeout(ctx, fleet.EmitTimeout)
	err = s.Events().Settle(sctx)
	cancel()
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	prefix := store.EventPrefix(cl.Value.ClusterName)
	match := func(ev events.Event) bool {
		return (req.DetailType == "" || ev.DetailType == req.DetailType) && (req.Resource == "" || ev.Mentions(req.Resource))
	}
	var sub *store.Subscription
	if wait > 0 {
		// Subscribed before the first listing, so nothing written in
		// between goes unnoticed.
		sub = s.Store.Subscribe(prefix)
		defer sub.Close()
	}
	wctx, cancel := context.WithTimeout(ctx, time.Duration(wait)*time.Second)
	defer cancel()
	defer context.AfterFunc(s.Events().Ending, cancel)()
	for {
		out, next, err := s.ScanEvents(ctx, prefix, cur, match, limit)
		if err != nil {
			return nil, fleet.StoreErr(err)
		}
		cur = next
		if len(out) > 0 || wait == 0 {
			return &ListEventsResponse{Events: out, Cursor: cur.String()}, nil
		}
		if _, _, err := sub.Next(wctx); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return &ListEventsResponse{Events: []events.Event{}, Cursor: cur.String()}, nil
		}
	}
}

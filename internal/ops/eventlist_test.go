package ops

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/events"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
)

// ListEvents lists an event recorded just before it, though the producer
// did not wait for the write.
func TestListEventsSeesWhatWasRecordedBeforeIt(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	s := New(fleet.New(fleet.Config{Store: st, Region: "us-east-1", AccountID: "123456789012"}))
	if _, err := s.CreateCluster(ctx, &shapes.CreateClusterRequest{ClusterName: "c"}); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		s.Events().Record(ctx, "c", events.Event{DetailType: events.DetailTypes[0], Detail: json.RawMessage(strconv.Itoa(i))})
		out, err := s.ListEvents(ctx, &ListEventsRequest{Cluster: "c", MaxResults: ptr(int32(1000))})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Events) != i+1 {
			t.Fatalf("after %d recorded, listed %d", i+1, len(out.Events))
		}
	}
}

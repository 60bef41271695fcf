package daemons

import (
	"testing"

	"github.com/capstanhq/capstan/internal/store"
)

// Instances waiting on their daemons (new, or draining) go ahead of the
// rest of the fleet's instance changes.
func TestChangingInstancesGoFirst(t *testing.T) {
	for _, tc := range []struct {
		ch   store.Change
		want bool
	}{
		{store.Change{Value: []byte(`{"status":"REGISTERING","capstanId":"i1"}`)}, true},
		{store.Change{Value: []byte(`{"status":"DRAINING"}`)}, true},
		{store.Change{Value: []byte(`{"status":"ACTIVE"}`)}, false},
		{store.Change{Value: []byte(`{"status":"INACTIVE"}`)}, false},
		{store.Change{Deleted: true}, false},
		{store.Change{Value: []byte(`{not json`)}, false},
	} {
		if got := Changing(tc.ch); got != tc.want {
			t.Errorf("Changing(%s, deleted %v) = %v, want %v", tc.ch.Value, tc.ch.Deleted, got, tc.want)
		}
	}
}

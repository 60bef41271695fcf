package iamapi

import (
	"fmt"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/store"
)

// TestToWireNamesWantOfSpace: a write refused for want of space reaches IAM
// clients in the store's words, not as "internal error", however the layers
// above wrapped it.
func TestToWireNamesWantOfSpace(t *testing.T) {
	h := New(Config{})
	full := fmt.Errorf("%w: the disk is full: 3.0 MiB free", store.ErrNoSpace)
	for _, err := range []error{full, fmt.Errorf("create user: %w", full), &fault.Error{Kind: fault.Internal, Message: "put", Err: full}} {
		e := h.toWire(err)
		if e.status != 500 || e.code != "ServiceFailure" || !strings.HasPrefix(e.message, store.ErrNoSpace.Error()) ||
			!strings.Contains(e.message, "the disk is full") {
			t.Errorf("%v: %+v", err, e)
		}
	}
	if e := h.toWire(fmt.Errorf("boom")); e.message != "internal error" {
		t.Errorf("an unclassified error: %+v", e)
	}
}

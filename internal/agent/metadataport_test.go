package agent

import (
	"bytes"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/agent/state"
)

// The metadata endpoint takes the port it had before; a new one only when
// that one is taken, saying so, and keeps the new one from then on.
func TestListenMetadataKeepsItsPort(t *testing.T) {
	path := filepath.Join(t.TempDir(), state.FileName)
	db, err := state.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	ln, first, err := listenMetadata(db, "127.0.0.1:0", log)
	if err != nil {
		t.Fatal(err)
	}
	if first != ln.Addr().String() || strings.HasSuffix(first, ":0") {
		t.Fatalf("listening on %s, reported %s", ln.Addr(), first)
	}
	ln.Close()
	db.Close()

	// As after a restart: the database reopened.
	if db, err = state.Open(path); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ln, again, err := listenMetadata(db, "127.0.0.1:0", log)
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Fatalf("after a restart the endpoint is on %s, before on %s", again, first)
	}
	// Someone else holds it now.
	held := ln
	defer held.Close()
	ln, other, err := listenMetadata(db, "127.0.0.1:0", log)
	if err != nil {
		t.Fatal(err)
	}
	if other == first {
		t.Fatalf("took %s, which is in use", other)
	}
	if !strings.Contains(logBuf.String(), "port of the last start is taken") {
		t.Fatalf("the move to a new port is not logged:\n%s", logBuf.String())
	}
	ln.Close()
	ln, last, err := listenMetadata(db, "127.0.0.1:0", log)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if last != other {
		t.Fatalf("the endpoint went back to %s, want the port it last took, %s", last, other)
	}

	// A port the operator chose is used as is, and not recorded.
	fixed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := fixed.Addr().String()
	fixed.Close()
	ln2, got, err := listenMetadata(db, addr, log)
	if err != nil || got != addr {
		t.Fatalf("fixed %s: got %s, %v", addr, got, err)
	}
	ln2.Close()
	if p, _ := db.MetadataPort(); net.JoinHostPort("127.0.0.1", strconv.Itoa(p)) != other {
		t.Fatalf("recorded port %d after a fixed address, want %s's", p, other)
	}
}

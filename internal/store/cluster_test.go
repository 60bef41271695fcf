package store

import (
	"path/filepath"
	"strings"
	"testing"
)

// A member takes the cluster's CA on first start and keeps it: a CA
// written over, or another CA later, is refused.
func TestMemberAdoptsTheClusterCA(t *testing.T) {
	caDir, other, dir := t.TempDir(), t.TempDir(), t.TempDir()
	if _, _, err := WriteCA(caDir); err != nil {
		t.Fatal(err)
	}
	if _, _, err := WriteCA(caDir); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("a CA written over another: %v", err)
	}
	if err := adoptCA(dir, t.TempDir()); err == nil || !strings.Contains(err.Error(), "capstan etcd ca writes one") {
		t.Fatalf("adopting from a dir without a CA: %v", err)
	}
	if err := adoptCA(dir, caDir); err != nil {
		t.Fatal(err)
	}
	f, err := ensureMemberTLS(dir, memberIPs("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	ca, _, err := loadPair(filepath.Join(caDir, "ca.crt"), filepath.Join(caDir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	srv, _, err := loadPair(f.Server, f.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.CheckSignatureFrom(ca); err != nil {
		t.Fatalf("the member's certificate is not the cluster CA's: %v", err)
	}
	if err := adoptCA(dir, caDir); err != nil {
		t.Fatalf("the same CA again: %v", err)
	}
	if _, _, err := WriteCA(other); err != nil {
		t.Fatal(err)
	}
	if err := adoptCA(dir, other); err == nil || !strings.Contains(err.Error(), "another CA") {
		t.Fatalf("another CA for a member that has one: %v", err)
	}
}

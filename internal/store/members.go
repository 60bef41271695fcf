package store

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ClusterMember is one member of an etcd cluster as its members see it.
type ClusterMember struct {
	ID         uint64
	Name       string // empty until an added member first starts
	PeerURLs   []string
	ClientURLs []string
	Leader     bool
}

// Members is a connection to a cluster for managing its members and
// taking snapshots, with a server's or a member's client certificate.
type Members struct{ c *clientv3.Client }

// DialMembers connects to the cluster at endpoints.
func DialMembers(ctx context.Context, endpoints []string, files TLSFiles) (*Members, error) {
	c, _, err := dialExternal(ctx, endpoints, files)
	if err != nil {
		return nil, err
	}
	return &Members{c}, nil
}

// Close ends the connection.
func (m *Members) Close() error { return m.c.Close() }

// List is the cluster's members, by name.
func (m *Members) List(ctx context.Context) ([]ClusterMember, error) {
	resp, err := m.c.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("list etcd members: %w", err)
	}
	var leader uint64
	for _, ep := range m.c.Endpoints() {
		if st, err := m.c.Status(ctx, ep); err == nil {
			leader = st.Leader
			break
		}
	}
	out := make([]ClusterMember, 0, len(resp.Members))
	for _, x := range resp.Members {
		out = append(out, ClusterMember{ID: x.ID, Name: x.Name, PeerURLs: x.PeerURLs, ClientURLs: x.ClientURLs, Leader: x.ID == leader})
	}
	slices.SortFunc(out, func(a, b ClusterMember) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Add announces a member with peerURL (https://IP:PORT) to the cluster,
// and returns the --initial-cluster it must start with (with
// --initial-cluster-state existing).
func (m *Members) Add(ctx context.Context, name, peerURL string) (initialCluster string, err error) {
	if name == "" {
		return "", fmt.Errorf("a new member needs a name")
	}
	host, ok := strings.CutPrefix(peerURL, "https://")
	if !ok {
		return "", fmt.Errorf("the peer URL must be https://IP:PORT (got %q)", peerURL)
	}
	if err := CheckMemberAddr(host); err != nil {
		return "", fmt.Errorf("the peer URL %w", err)
	}
	have, err := m.List(ctx)
	if err != nil {
		return "", err
	}
	for _, x := range have {
		if x.Name == name {
			return "", fmt.Errorf("the cluster has a member named %s already (remove it first)", name)
		}
	}
	resp, err := m.c.MemberAdd(ctx, []string{peerURL})
	if err != nil {
		return "", fmt.Errorf("add etcd member: %w", err)
	}
	var parts []string
	for _, x := range resp.Members {
		n := x.Name
		if x.ID == resp.Member.ID {
			n = name
		}
		for _, u := range x.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	return strings.Join(parts, ","), nil
}

// Remove removes the member named name, or with that ID in hex.
func (m *Members) Remove(ctx context.Context, nameOrID string) (ClusterMember, error) {
	have, err := m.List(ctx)
	if err != nil {
		return ClusterMember{}, err
	}
	id, idErr := strconv.ParseUint(nameOrID, 16, 64)
	i := slices.IndexFunc(have, func(x ClusterMember) bool { return x.Name == nameOrID || (idErr == nil && x.ID == id) })
	if i < 0 {
		return ClusterMember{}, fmt.Errorf("the cluster has no member named %s", nameOrID)
	}
	if _, err := m.c.MemberRemove(ctx, have[i].ID); err != nil {
		return ClusterMember{}, fmt.Errorf("remove etcd member %s: %w", nameOrID, err)
	}
	return have[i], nil
}

// Snapshot writes a snapshot of the member at the first endpoint's
// database to path, whole or not at all.
func (m *Members) Snapshot(ctx context.Context, path string) (int64, error) {
	r, err := m.c.Snapshot(ctx)
	if err != nil {
		return 0, fmt.Errorf("etcd snapshot: %w", err)
	}
	defer r.Close()
	tmp := path + ".part"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, r)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return 0, fmt.Errorf("etcd snapshot: %w", err)
	}
	return n, nil
}

package docker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/runtime"
	"github.com/capstanhq/capstan/internal/testenv"
)

// TestNetworksAndStaticAddress covers what daemon networking uses beside
// the runtime interface: networks found by label, a container at a fixed
// address, overlap detection, forced disconnection and removal.
func TestNetworksAndStaticAddress(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	name := "capstan-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)

	// Tests of other packages may hold subnets: take the first free one.
	var id string
	var subnet netip.Prefix
	for third := 100; third < 170 && id == ""; third++ {
		subnet = netip.PrefixFrom(netip.AddrFrom4([4]byte{169, 254, byte(third), 0}), 24)
		var err error
		id, err = f.rt.CreateNetwork(ctx, runtime.NetworkSpec{Name: name, Subnet: subnet, Gateway: subnet.Addr().Next(), Labels: f.labels})
		if err != nil && !errors.Is(err, runtime.ErrAddressInUse) {
			t.Fatal(err)
		}
	}
	if id == "" {
		t.Fatal("no free subnet in 169.254.100.0-169.254.169.0")
	}
	t.Cleanup(func() {
		testenv.RemoveLabeled(t, f.rt, f.labels)
		f.rt.RemoveNetwork(context.Background(), id)
	})
	if _, err := f.rt.CreateNetwork(ctx, runtime.NetworkSpec{Name: name + "-2", Subnet: subnet, Labels: f.labels}); !errors.Is(err, runtime.ErrAddressInUse) {
		t.Fatalf("overlapping subnet: %v, want ErrAddressInUse", err)
	}

	addr := subnet.Addr().Next().Next().Next() // .3
	spec := f.spec("sleep", "1000")
	spec.NetworkMode = name
	cid, err := f.rt.CreateWithAddress(ctx, spec, addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.rt.Start(ctx, cid); err != nil {
		t.Fatal(err)
	}
	if c := f.waitState(cid, func(c runtime.Container) bool { return c.State == runtime.StateRunning }, "running"); c.IPAddress != addr.String() || c.NetworkMode != name {
		t.Fatalf("container at %q in %q, want %s in %s", c.IPAddress, c.NetworkMode, addr, name)
	}
	joined := f.spec("sleep", "1000")
	joined.NetworkMode = "container:" + cid
	if c, err := f.rt.Inspect(ctx, f.run(joined)); err != nil || c.NetworkMode != "container:"+cid {
		t.Fatalf("joined container's network mode %q, %v", c.NetworkMode, err)
	}

	nets, err := f.rt.Networks(ctx, f.labels)
	if err != nil || len(nets) != 1 {
		t.Fatalf("networks by label: %+v, %v", nets, err)
	}
	n := nets[0]
	if n.ID != id || n.Name != name || n.Subnet != subnet || n.Gateway != subnet.Addr().Next() || n.Containers[cid] != addr {
		t.Fatalf("network %+v", n)
	}
	// The bridge interfaces are the host's.
	if _, err := os.Stat("/sys/class/net/" + n.Bridge); n.Bridge != "br-"+id[:12] || err != nil {
		t.Fatalf("network's bridge %q: %v", n.Bridge, err)
	}
	if def, err := f.rt.Network(ctx, "bridge"); err != nil || def.Bridge == "" {
		t.Fatalf("default bridge %+v, %v", def, err)
	} else if _, err := os.Stat("/sys/class/net/" + def.Bridge); err != nil {
		t.Fatalf("default bridge's interface %q: %v", def.Bridge, err)
	}

	// A network with a running container on it is removed only once that
	// container is disconnected.
	if err := f.rt.RemoveNetwork(ctx, id); err == nil {
		t.Fatal("removed a network in use")
	}
	if err := f.rt.DisconnectNetwork(ctx, id, cid); err != nil {
		t.Fatal(err)
	}
	if err := f.rt.RemoveNetwork(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := f.rt.RemoveNetwork(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("second removal: %v", err)
	}
}

// TestImportImage builds an image from a root filesystem tar with an
// entrypoint and runs it.
func TestImportImage(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	bin, err := os.ReadFile(testenv.BusyboxPath)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "busybox", Mode: 0o755, Size: int64(len(bin))})
	tw.Write(bin)
	tw.Close()
	ref := "capstan-test/import:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := f.rt.ImportImage(ctx, &buf, ref, []string{`ENTRYPOINT ["/busybox", "echo"]`, "LABEL capstan.test=import"}); err != nil {
		t.Fatal(err)
	}
	img, err := f.rt.Image(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	spec := f.spec("imported")
	spec.Image = ref
	id := f.run(spec)
	t.Cleanup(func() {
		testenv.RemoveLabeled(t, f.rt, f.labels)
		f.rt.RemoveImage(context.Background(), img.ID)
	})
	f.waitState(id, func(c runtime.Container) bool { return c.State == runtime.StateExited }, "exited")
	logs, err := f.rt.Logs(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	var out bytes.Buffer
	out.ReadFrom(logs)
	if out.String() != "imported\n" {
		t.Fatalf("output %q", out.String())
	}
	if err := f.rt.ImportImage(ctx, bytes.NewReader([]byte("not a tar")), ref+"-bad", nil); err == nil {
		t.Fatal("imported garbage")
	}
}

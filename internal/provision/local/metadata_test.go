package local

import "testing"

// Issue 46, point 7: provisioned agents' metadata endpoints listened on all
// interfaces. An unspecified host becomes the docker0 gateway (or
// loopback without it); a chosen address is kept.
func TestMetadataAddr(t *testing.T) {
	defer func(f func() string) { bridgeIP = f }(bridgeIP)
	bridgeIP = func() string { return "172.17.0.1" }
	for in, want := range map[string]string{
		"0.0.0.0:0":        "172.17.0.1:0",
		":51679":           "172.17.0.1:51679",
		"[::]:0":           "172.17.0.1:0",
		"10.0.0.5:51679":   "10.0.0.5:51679",
		"127.0.0.1:0":      "127.0.0.1:0",
		"metadata.local:0": "metadata.local:0",
		"nonsense":         "nonsense",
	} {
		if got := metadataAddr(in); got != want {
			t.Errorf("metadataAddr(%q) = %q, want %q", in, got, want)
		}
	}
	bridgeIP = func() string { return "127.0.0.1" }
	if got := metadataAddr("0.0.0.0:0"); got != "127.0.0.1:0" {
		t.Errorf("without docker0: %q", got)
	}
}

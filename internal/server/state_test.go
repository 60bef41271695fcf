package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The flags of TLS to an external etcd are checked at start, each error
// naming its flag.
func TestEtcdTLSFlags(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600)
	for _, c := range []struct {
		endpoints         []string
		cacert, cert, key string
		want              string
	}{
		{nil, notPEM, "", "", "--etcd-endpoints"},
		{[]string{"http://10.0.0.1:2379"}, notPEM, "", "", "must be https://"},
		{[]string{"https://10.0.0.1:2379"}, filepath.Join(dir, "missing.crt"), "", "", "--etcd-cacert"},
		{[]string{"https://10.0.0.1:2379"}, notPEM, "", "", "--etcd-cacert"},
		{[]string{"https://10.0.0.1:2379"}, "", notPEM, "", "--etcd-cert and --etcd-key go together"},
		{[]string{"https://10.0.0.1:2379"}, "", notPEM, notPEM, "--etcd-cert and --etcd-key:"},
	} {
		cfg := Config{Listen: "127.0.0.1:0", DataDir: dir, Provisioner: "none", EtcdEndpoints: c.endpoints,
			EtcdCACert: c.cacert, EtcdCert: c.cert, EtcdKey: c.key}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c, err, c.want)
		}
	}
}

package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/coder/websocket"

	"github.com/capstanhq/capstan/internal/protocol"
)

// DialSession opens an agent session's websocket on the server at url
// with an agent credential, signed as the agent signs it, for tests that
// speak the session protocol by hand (the hello is theirs to send). The
// connection is closed at cleanup.
func DialSession(t testing.TB, url, key, secret string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+protocol.Path, nil)
	if err != nil {
		t.Fatal(err)
	}
	empty := sha256.Sum256(nil)
	if err := v4.NewSigner().SignHTTP(ctx, aws.Credentials{AccessKeyID: key, SecretAccessKey: secret}, req,
		hex.EncodeToString(empty[:]), "ecs", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http")+protocol.Path, &websocket.DialOptions{HTTPHeader: req.Header})
	if err != nil {
		t.Fatalf("open session: %v", err)
	}
	conn.SetReadLimit(64 << 20)
	t.Cleanup(func() { conn.CloseNow() })
	return conn
}

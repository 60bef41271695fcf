package ops_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/ops"
	"github.com/capstanhq/capstan/internal/store"
)

// trustAll skips signatures so the fuzzer reaches decoding and validation.
type trustAll struct{}

func (trustAll) Verify(context.Context, *http.Request, []byte) (auth.Principal, error) {
	return auth.Principal{AccessKeyID: "FUZZ", Role: auth.RoleAdmin}, nil
}

// FuzzOperations sends arbitrary bodies to every operation of a real
// service on a real store: a client mistake must never be a 5xx or a panic.
func FuzzOperations(f *testing.F) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{DataDir: f.TempDir()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(st.Close)
	h := api.NewHandler(trustAll{}, nil, slog.New(slog.DiscardHandler))
	ops.New(fleet.New(fleet.Config{Store: st, Region: "us-east-1", AccountID: "123456789012", Endpoint: "http://127.0.0.1:1"})).Register(h)
	names := h.Operations()
	sort.Strings(names)
	seeds := []string{
		`{}`, `{"clusterName":"c"}`, `{"daemonName":"d","clusterArn":"c","daemonTaskDefinitionArn":"x:1","capacityProviderArns":["p"]}`,
		`{"family":"f","containerDefinitions":[{"name":"a","image":"i","memory":6}]}`,
		`{"family":"f","containerDefinitions":[{"name":"a","image":"i"}],"volumes":[{"name":"v","host":{"sourcePath":"/proc"}}]}`,
		`{"maxResults":0}`, `{"nextToken":"!!"}`, `{"daemonArn":"arn:aws:ecs:us-east-1:123456789012:daemon/c/d"}`,
		`{"resourceArn":"arn:aws:ecs:us-east-1:123456789012:cluster/c","tags":[{"key":"k","value":"v"}]}`,
		`{"deploymentConfiguration":{"drainPercent":1e309}}`, `{"createdAt":{"before":"x"}}`, `[`, `null`, `{"a":`,
	}
	for i, s := range seeds {
		for j := range names {
			if (i+j)%3 == 0 {
				f.Add(uint8(j), []byte(s))
			}
		}
	}
	f.Fuzz(func(t *testing.T, op uint8, body []byte) {
		name := names[int(op)%len(names)]
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		req.Header.Set("X-Amz-Target", api.TargetPrefix+name)
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req.WithContext(rctx))
		if rec.Code >= 500 {
			t.Fatalf("%s %q: status %d %s", name, body, rec.Code, rec.Body.String())
		}
		if rec.Header().Get("x-amzn-RequestId") == "" {
			t.Fatalf("%s: no request id", name)
		}
	})
}

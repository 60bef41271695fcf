package ops_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/capstanhq/capstan/internal/testenv"
)

// modelInputs prints, for every operation in botocore's ECS model, an
// input with each required member filled with a placeholder of its type.
const modelInputs = `
import botocore.session, json
m = botocore.session.get_session().get_service_model("ecs")
def fill(shape, depth=0):
    t = shape.type_name
    if t == "structure":
        if depth > 3:
            return {}
        return {n: fill(shape.members[n], depth + 1) for n in shape.required_members}
    if t == "list":
        return []
    if t == "map":
        return {}
    if t == "boolean":
        return False
    if t in ("integer", "long"):
        return 1
    if t in ("double", "float"):
        return 1.0
    if t == "timestamp":
        return 0
    if t == "string" and shape.enum:
        return shape.enum[0]
    return "x"
out = {}
for name in m.operation_names:
    op = m.operation_model(name)
    out[name] = fill(op.input_shape) if op.input_shape else {}
print(json.dumps(out))
`

// Every operation in the ECS model is served: called with an empty input
// and with a minimal one, none answers UnknownOperationException, and
// none fails with a server error.
func TestEveryModelOperationAnswers(t *testing.T) {
	raw, err := exec.Command("python3", "-c", modelInputs).Output()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("python3 with botocore is required when CI is set: %v", err)
		}
		t.Skipf("python3 with botocore not available: %v", err)
	}
	var inputs map[string]json.RawMessage
	if err := json.Unmarshal(raw, &inputs); err != nil {
		t.Fatal(err)
	}
	if len(inputs) < 77 {
		t.Fatalf("the model lists only %d operations", len(inputs))
	}
	srv := testenv.StartServer(t, "")
	ctx := context.Background()
	ops := make([]string, 0, len(inputs))
	for op := range inputs {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		for _, body := range [][]byte{[]byte("{}"), inputs[op]} {
			status, typ, msg := callECS(t, ctx, srv, op, body)
			if typ == "UnknownOperationException" || status >= 500 {
				t.Errorf("%s %s: %d %s: %s", op, body, status, typ, msg)
			}
		}
	}
}

// callECS posts one signed ECS call and returns the status and, for an
// error, its type and message.
func callECS(t *testing.T, ctx context.Context, srv *testenv.Server, op string, body []byte) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", "AmazonEC2ContainerServiceV20141113."+op)
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: srv.Config.AdminKeyID, SecretAccessKey: srv.Config.AdminSecret}
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "ecs", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := srv.HTTPClient().Do(req)
	if err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Type    string `json:"__type"`
		Message string `json:"message"`
	}
	if resp.StatusCode != http.StatusOK {
		json.Unmarshal(b, &e)
	}
	return resp.StatusCode, e.Type, e.Message
}

package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A verifier bound to a region refuses requests signed for another one with
// AWS's error, and still lets its own fleet's agents in whatever region they
// sign for.
func TestVerifyRegion(t *testing.T) {
	agent := Credential{AccessKeyID: "CSAGTESTAGENT", SecretAccessKey: "agent-secret", Role: RoleAgent, InstanceID: "i1"}
	v := fixedVerifier(vecTime)
	v.Lookup = NewStaticLookup(adminCred, agent)
	v.Region = "us-east-1"
	signed := func(cred Credential, region string) (*http.Request, []byte) {
		body := []byte(`{}`)
		r := httptest.NewRequest(http.MethodPost, "http://localhost:8080/", strings.NewReader(string(body)))
		r.Header.Set("Content-Type", "application/x-amz-json-1.1")
		r.Header.Set("X-Amz-Target", vecTarget)
		sum := sha256.Sum256(body)
		sdkSign(t, r, cred, region, hex.EncodeToString(sum[:]))
		return onTheWire(t, r)
	}
	verify := func(r *http.Request, body []byte) (Principal, error) { return v.Verify(context.Background(), r, body) }
	if _, err := verify(signed(adminCred, "us-east-1")); err != nil {
		t.Fatalf("own region refused: %v", err)
	}
	r, body := signed(adminCred, "eu-west-1")
	_, err := v.Verify(context.Background(), r, body)
	var ae *Error
	if !errors.As(err, &ae) || ae.Code != CodeInvalidSignature || ae.Message != "Credential should be scoped to a valid region, not 'eu-west-1'." || ae.Status != 400 {
		t.Fatalf("other region: %v", err)
	}
	if p, err := verify(signed(agent, "eu-west-1")); err != nil || p.Role != RoleAgent {
		t.Fatalf("agent in another region: %+v %v", p, err)
	}
	v.Region = ""
	if _, err := verify(signed(adminCred, "eu-west-1")); err != nil {
		t.Fatalf("unbound verifier refused another region: %v", err)
	}
}

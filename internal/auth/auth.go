// Package auth authenticates API and agent requests with AWS Signature
// Version 4, so the stock AWS CLI and SDKs work against Capstan with ordinary
// access keys. It answers "who signed this request"; what that caller may do
// is decided elsewhere.
package auth

import (
	"context"
	"fmt"
)

// Role says what kind of caller a credential belongs to.
type Role string

const (
	RoleAdmin Role = "admin" // the account's root
	RoleAgent Role = "agent"
	RoleUser  Role = "user" // an IAM user: what it may do is its policies'
)

// Credential is an access key pair known to the server.
type Credential struct {
	AccessKeyID     string
	SecretAccessKey string
	Role            Role
	InstanceID      string // set for agent credentials
	UserName        string // set for user credentials
	ARN             string // the identity's ARN (root, user), when known
}

// String and GoString keep the secret out of logs and %v/%#v output.
func (c Credential) String() string {
	return fmt.Sprintf("{AccessKeyID:%s Role:%s InstanceID:%s SecretAccessKey:REDACTED}", c.AccessKeyID, c.Role, c.InstanceID)
}

func (c Credential) GoString() string { return "auth.Credential" + c.String() }

// Principal is the verified caller of one request.
type Principal struct {
	AccessKeyID string
	Role        Role
	InstanceID  string // set for agent credentials, may be empty
	UserName    string // set for users
	ARN         string // the identity's ARN (arn:aws:iam::ACCOUNT:root or :user/NAME), when known
	Region      string // from the signature's credential scope (Verifier.Region restricts it)
}

// Lookup finds the credential for an access key ID. ok is false when the key
// is unknown; err is for failures to look (the key may or may not exist).
type Lookup interface {
	Credential(ctx context.Context, accessKeyID string) (cred Credential, ok bool, err error)
}

// StaticLookup is a fixed set of credentials keyed by access key ID.
type StaticLookup map[string]Credential

// NewStaticLookup indexes creds by their access key IDs.
func NewStaticLookup(creds ...Credential) StaticLookup {
	s := make(StaticLookup, len(creds))
	for _, c := range creds {
		s[c.AccessKeyID] = c
	}
	return s
}

// Credential implements Lookup.
func (s StaticLookup) Credential(_ context.Context, accessKeyID string) (Credential, bool, error) {
	c, ok := s[accessKeyID]
	return c, ok, nil
}

// Chain returns a Lookup that asks each lookup in order and returns the first
// hit. An error stops the search, so a failing store never lets a later
// lookup answer for a key it might hold.
func Chain(lookups ...Lookup) Lookup { return chain(lookups) }

type chain []Lookup

func (c chain) Credential(ctx context.Context, accessKeyID string) (Credential, bool, error) {
	for _, l := range c {
		cred, ok, err := l.Credential(ctx, accessKeyID)
		if err != nil || ok {
			return cred, ok, err
		}
	}
	return Credential{}, false, nil
}

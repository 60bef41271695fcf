// Package iam keeps the account's identities in the store, as AWS IAM
// shapes them: users with their access keys and tags, groups and their
// members, inline policies of users and groups, and customer managed
// policies with their versions and attachments. It answers two questions
// for the rest of the server: whose key is this (Store.Credential) and
// may this principal do that (Authorizer.Check). Policy documents are
// parsed and evaluated by internal/iam/policy.
package iam

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/iam/policy"
	"github.com/capstanhq/capstan/internal/store"
)

// Quotas. IAM's defaults where IAM has one; where IAM lets an account
// raise a quota, its default is kept.
const (
	MaxUsers               = 5000
	MaxGroups              = 300
	MaxManagedPolicies     = 1500
	MaxGroupsPerUser       = 10
	MaxAttachedPerIdentity = 10 // managed policies attached to one user or group
	MaxAccessKeysPerUser   = 2
	MaxPolicyVersions      = 5
	MaxTagsPerUser         = 50
	// Inline policy sizes: all of one user's (or group's) inline policies
	// together, counted without whitespace as IAM counts them.
	MaxUserInlineSize  = policy.MaxUserInlineSize
	MaxGroupInlineSize = 5120
	MaxManagedSize     = policy.MaxManagedSize
)

// Store is the account's identities, kept in the store under iam/.
type Store struct {
	st      *store.Store
	account string
	// Now is the clock for creation dates; time.Now when nil.
	Now func() time.Time

	users    store.Memo[userRecord]
	groups   store.Memo[groupRecord]
	policies store.Memo[policyRecord]
	docs     docCache
}

// NewStore returns the identities of account (12 digits) kept in st.
func NewStore(st *store.Store, accountID string) *Store {
	return &Store{st: st, account: accountID}
}

// Account is the account ID in the store's ARNs.
func (s *Store) Account() string { return s.account }

func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC().Truncate(time.Second)
	}
	return time.Now().UTC().Truncate(time.Second)
}

// RootARN is the ARN of the account's root: the server's administrator
// credential.
func RootARN(account string) string { return "arn:aws:iam::" + account + ":root" }

// AgentARN is the ARN an agent credential goes by: the ECS agent runs
// under an instance role, so an agent is a session of the role
// capstan-agent named after its instance (or its key before it has one).
func AgentARN(account, instanceID, accessKeyID string) string {
	session := instanceID
	if session == "" {
		session = accessKeyID
	}
	return "arn:aws:sts::" + account + ":assumed-role/capstan-agent/" + session
}

// UserARN is the ARN of a user at path ("/" for none).
func UserARN(account, path, name string) string {
	return "arn:aws:iam::" + account + ":user" + path + name
}

// GroupARN is the ARN of a group at path.
func GroupARN(account, path, name string) string {
	return "arn:aws:iam::" + account + ":group" + path + name
}

// PolicyARN is the ARN of a customer managed policy at path.
func PolicyARN(account, path, name string) string {
	return "arn:aws:iam::" + account + ":policy" + path + name
}

// Tag is a key and value on a user or policy.
type Tag struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Error codes, as IAM's Query API names them.
const (
	CodeNoSuchEntity            = "NoSuchEntity"
	CodeEntityAlreadyExists     = "EntityAlreadyExists"
	CodeMalformedPolicyDocument = "MalformedPolicyDocument"
	CodeLimitExceeded           = "LimitExceeded"
	CodeDeleteConflict          = "DeleteConflict"
	CodeValidationError         = "ValidationError"
	CodeInvalidInput            = "InvalidInput"
	CodeConcurrentModification  = "ConcurrentModification"
)

func noSuchEntity(format string, args ...any) *fault.Error {
	return &fault.Error{Kind: fault.NotFound, Code: CodeNoSuchEntity, Message: fmt.Sprintf(format, args...)}
}

func alreadyExists(format string, args ...any) *fault.Error {
	return &fault.Error{Kind: fault.Conflict, Code: CodeEntityAlreadyExists, Message: fmt.Sprintf(format, args...)}
}

func deleteConflict(format string, args ...any) *fault.Error {
	return &fault.Error{Kind: fault.Conflict, Code: CodeDeleteConflict, Message: fmt.Sprintf(format, args...)}
}

func limitExceeded(quota string, n int) *fault.Error {
	return &fault.Error{Kind: fault.Conflict, Code: CodeLimitExceeded, Message: fmt.Sprintf("Cannot exceed quota for %s: %d", quota, n)}
}

func invalidInput(format string, args ...any) *fault.Error {
	return &fault.Error{Kind: fault.InvalidParameter, Code: CodeInvalidInput, Message: fmt.Sprintf(format, args...)}
}

// malformed reports a policy document that does not parse, naming the
// statement and member policy.Parse found at fault.
func malformed(err error) *fault.Error {
	msg := err.Error()
	var pe *policy.Error
	if errors.As(err, &pe) {
		msg = pe.Rule
		if pe.Path != "" {
			msg = pe.Path + ": " + pe.Rule
		}
	}
	return &fault.Error{Kind: fault.InvalidParameter, Code: CodeMalformedPolicyDocument, Message: "Syntax error in policy: " + msg}
}

// storeErr classifies what the store returned: a conflict that outlasted
// the retries is IAM's ConcurrentModification, anything else internal.
func storeErr(err error) error {
	if err == nil || fault.As(err) != nil {
		return err
	}
	if errors.Is(err, store.ErrConflict) {
		return &fault.Error{Kind: fault.Conflict, Code: CodeConcurrentModification,
			Message: "The request was rejected because multiple requests to change this object were submitted simultaneously. Wait a few minutes and submit your request again."}
	}
	return err
}

// codeOf is the IAM error code of err, "" for none.
func codeOf(err error) string {
	if fe := fault.As(err); fe != nil {
		return fe.Code
	}
	return ""
}

// newID returns an IAM unique ID: prefix and 17 characters of A-Z2-7, 21
// in all, as IAM's are.
func newID(prefix string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	b := make([]byte, 17)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return prefix + string(b)
}

// docCache keeps parsed documents by their text: authorizing a call
// parses nothing when the policies have not changed. It is emptied when it
// grows past its bound, which only costs reparsing.
type docCache struct {
	mu sync.Mutex
	m  map[string]*policy.Document
}

const docCacheSize = 4096

func (c *docCache) parse(text string) (*policy.Document, error) {
	c.mu.Lock()
	d := c.m[text]
	c.mu.Unlock()
	if d != nil {
		return d, nil
	}
	d, err := policy.Parse([]byte(text))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= docCacheSize {
		c.m = map[string]*policy.Document{}
	}
	c.m[text] = d
	c.mu.Unlock()
	return d, nil
}

// equalFold reports whether two IAM names are the same name.
func equalFold(a, b string) bool { return strings.EqualFold(a, b) }

// compareFold orders IAM names regardless of case.
func compareFold(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) }

// withRetry runs fn with the store's optimistic retry and classifies its
// error.
func (s *Store) withRetry(ctx context.Context, fn func() error) error {
	return storeErr(store.Retry(ctx, fn))
}

// getRecord reads a record for a change; kind and name word NoSuchEntity.
func getRecord[R any](ctx context.Context, s *Store, key, kind, name string) (store.Item[R], error) {
	it, err := store.Get[R](ctx, s.st, key)
	if errors.Is(err, store.ErrNotFound) {
		return it, noSuchEntity("The %s with name %s cannot be found.", kind, name)
	}
	return it, err
}

// readRecord reads a record through memo: the value is shared and must
// not be changed.
func readRecord[R any](ctx context.Context, s *Store, memo *store.Memo[R], key, kind, name string) (*R, error) {
	it, err := memo.Get(ctx, s.st, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, noSuchEntity("The %s with name %s cannot be found.", kind, name)
	}
	if err != nil {
		return nil, err
	}
	return &it.Value, nil
}

// listRecords returns, in key order, what view makes of the records under
// prefix that it keeps.
func listRecords[R, T any](ctx context.Context, s *Store, memo *store.Memo[R], prefix string, view func(*R) (T, bool)) ([]T, error) {
	items, err := memo.List(ctx, s.st, prefix)
	if err != nil {
		return nil, err
	}
	out := []T{}
	for _, it := range items {
		if v, ok := view(&it.Value); ok {
			out = append(out, v)
		}
	}
	return out, nil
}

// readNamed reads the records of names through read, sorted by name
// regardless of case, leaving out those deleted since.
func readNamed[R, T any](ctx context.Context, names []string, read func(context.Context, string) (*R, error), view func(*R) T) ([]T, error) {
	names = slices.Clone(names)
	slices.SortFunc(names, compareFold)
	out := make([]T, 0, len(names))
	for _, name := range names {
		r, err := read(ctx, name)
		if isNoSuch(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, view(r))
	}
	return out, nil
}

// createRecord writes rec as the new record at key: exists is the error
// when key is taken, LimitExceeded for quota when prefix holds max
// records already.
func (s *Store) createRecord(ctx context.Context, key, prefix string, rec any, exists error, quota string, max int) error {
	return s.withRetry(ctx, func() error {
		if _, err := store.Rev(ctx, s.st, key); err == nil {
			return exists
		}
		if n, err := s.st.Count(ctx, prefix); err != nil {
			return err
		} else if n >= max {
			return limitExceeded(quota, max)
		}
		_, err := s.st.Txn().Create(key, rec).Commit(ctx)
		return err
	})
}

// errUnchanged, from an edit, means there is nothing to write.
var errUnchanged = errors.New("unchanged")

// updateRecord changes the record get reads by name, with retries: edit
// changes it and may add to tx what changes with it; then it is written.
func updateRecord[R any](ctx context.Context, s *Store, get func(context.Context, string) (store.Item[R], error), name string,
	edit func(r *R, tx *store.Txn) error) error {
	return s.withRetry(ctx, func() error {
		it, err := get(ctx, name)
		if err != nil {
			return err
		}
		tx := s.st.Txn()
		if err := edit(&it.Value, tx); errors.Is(err, errUnchanged) {
			return nil
		} else if err != nil {
			return err
		}
		_, err = tx.Update(it.Key, it.Rev, it.Value).Commit(ctx)
		return err
	})
}

// deleteRecord deletes the record get reads by name, with retries, unless
// refuse says why not.
func deleteRecord[R any](ctx context.Context, s *Store, get func(context.Context, string) (store.Item[R], error), name string,
	refuse func(*R) error) error {
	return s.withRetry(ctx, func() error {
		it, err := get(ctx, name)
		if err != nil {
			return err
		}
		if err := refuse(&it.Value); err != nil {
			return err
		}
		_, err = s.st.Txn().Delete(it.Key, it.Rev).Commit(ctx)
		return err
	})
}

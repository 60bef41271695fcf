package iam

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/store"
)

// Access key statuses.
const (
	StatusActive   = "Active"
	StatusInactive = "Inactive"
)

// AccessKey is a user's access key. SecretAccessKey is set only when the
// key is created: IAM never shows it again.
type AccessKey struct {
	UserName        string    `json:"userName"`
	AccessKeyID     string    `json:"accessKeyId"`
	SecretAccessKey string    `json:"secretAccessKey,omitempty"`
	Status          string    `json:"status"`
	CreateDate      time.Time `json:"createDate"`
}

// accessKeyRecord is the stored key, keyed by its ID so that
// authenticating a request reads one record. Its secret goes to etcd
// sealed (store.SecretRecord); records written before secrets were
// sealed hold it in the clear, and are sealed when next written.
type accessKeyRecord struct {
	AccessKey
	UserArn               string `json:"userArn"`
	SealedSecretAccessKey string `json:"sealedSecretAccessKey,omitempty"`
}

var _ store.SecretRecord = (*accessKeyRecord)(nil)

func (r accessKeyRecord) SealSecrets(s store.Sealer) (any, error) {
	err := store.SealSecret(s, &r.SecretAccessKey, &r.SealedSecretAccessKey, r.AccessKeyID)
	return r, err
}

func (r *accessKeyRecord) OpenSecrets(s store.Sealer) error {
	return store.OpenSecret(s, &r.SecretAccessKey, &r.SealedSecretAccessKey, r.AccessKeyID)
}

func (r *accessKeyRecord) InClear() bool {
	return r.SecretAccessKey != "" && r.SealedSecretAccessKey == ""
}

// SealAccessKeys rewrites sealed the keys an earlier version stored with
// their secret in the clear; it says how many.
func (s *Store) SealAccessKeys(ctx context.Context) (int, error) {
	return store.Reseal[accessKeyRecord](ctx, s.st, store.IAMAccessKeyPrefix())
}

// CreateAccessKey mints an Active key for the user; a user has at most two.
func (s *Store) CreateAccessKey(ctx context.Context, userName string) (AccessKey, error) {
	if err := CheckUserName("userName", userName); err != nil {
		return AccessKey{}, err
	}
	var key AccessKey
	err := s.withRetry(ctx, func() error {
		it, err := s.getUser(ctx, userName)
		if err != nil {
			return err
		}
		u := it.Value
		if len(u.AccessKeys) >= MaxAccessKeysPerUser {
			return limitExceeded("AccessKeysPerUser", MaxAccessKeysPerUser)
		}
		key = AccessKey{UserName: u.UserName, AccessKeyID: auth.NewAccessKeyID("AKIA"), SecretAccessKey: auth.NewSecretAccessKey(),
			Status: StatusActive, CreateDate: s.now()}
		u.AccessKeys = append(u.AccessKeys, key.AccessKeyID)
		_, err = s.st.Txn().Update(it.Key, it.Rev, u).
			Create(store.IAMAccessKeyKey(key.AccessKeyID), accessKeyRecord{AccessKey: key, UserArn: u.Arn}).Commit(ctx)
		return err
	})
	return key, err
}

// ListAccessKeys returns the user's keys, without their secrets, oldest
// first.
func (s *Store) ListAccessKeys(ctx context.Context, userName string) ([]AccessKey, error) {
	if err := CheckUserName("userName", userName); err != nil {
		return nil, err
	}
	u, err := s.readUser(ctx, userName)
	if err != nil {
		return nil, err
	}
	out := []AccessKey{}
	for _, id := range u.AccessKeys {
		it, err := store.Get[accessKeyRecord](ctx, s.st, store.IAMAccessKeyKey(id))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		k := it.Value.AccessKey
		k.SecretAccessKey = ""
		out = append(out, k)
	}
	return out, nil
}

// userKey reads the key keyID of the user for a change.
func (s *Store) userKey(ctx context.Context, userName, keyID string) (store.Item[userRecord], store.Item[accessKeyRecord], error) {
	var k store.Item[accessKeyRecord]
	u, err := s.getUser(ctx, userName)
	if err != nil {
		return u, k, err
	}
	if !slices.Contains(u.Value.AccessKeys, keyID) {
		return u, k, noSuchEntity("The Access Key with id %s cannot be found.", keyID)
	}
	k, err = store.Get[accessKeyRecord](ctx, s.st, store.IAMAccessKeyKey(keyID))
	if errors.Is(err, store.ErrNotFound) {
		return u, k, noSuchEntity("The Access Key with id %s cannot be found.", keyID)
	}
	return u, k, err
}

// UpdateAccessKey sets a key Active or Inactive. An Inactive key
// authenticates nothing until it is made Active again.
func (s *Store) UpdateAccessKey(ctx context.Context, userName, keyID, status string) error {
	if err := CheckUserName("userName", userName); err != nil {
		return err
	}
	if err := CheckAccessKeyID("accessKeyId", keyID); err != nil {
		return err
	}
	if status != StatusActive && status != StatusInactive {
		if status == "" {
			return validation("status", "", true, "Member must not be null")
		}
		return validation("status", status, false, "Member must satisfy enum value set: [Active, Inactive]")
	}
	return s.withRetry(ctx, func() error {
		u, k, err := s.userKey(ctx, userName, keyID)
		if err != nil {
			return err
		}
		rec := k.Value
		if rec.Status == status {
			return nil
		}
		rec.Status = status
		_, err = s.st.Txn().Unchanged(u.Key, u.Rev).Update(k.Key, k.Rev, rec).Commit(ctx)
		return err
	})
}

// DeleteAccessKey deletes one of the user's keys.
func (s *Store) DeleteAccessKey(ctx context.Context, userName, keyID string) error {
	if err := CheckUserName("userName", userName); err != nil {
		return err
	}
	if err := CheckAccessKeyID("accessKeyId", keyID); err != nil {
		return err
	}
	return s.withRetry(ctx, func() error {
		u, k, err := s.userKey(ctx, userName, keyID)
		if err != nil {
			return err
		}
		rec := u.Value
		rec.AccessKeys = slices.DeleteFunc(rec.AccessKeys, func(id string) bool { return id == keyID })
		_, err = s.st.Txn().Update(u.Key, u.Rev, rec).Delete(k.Key, k.Rev).Commit(ctx)
		return err
	})
}

// Credential implements auth.Lookup for users' keys: an Active key is the
// user's credential; an Inactive or unknown one is not found.
func (s *Store) Credential(ctx context.Context, accessKeyID string) (auth.Credential, bool, error) {
	if !strings.HasPrefix(accessKeyID, "AKIA") || CheckAccessKeyID("accessKeyId", accessKeyID) != nil {
		return auth.Credential{}, false, nil
	}
	it, err := store.Get[accessKeyRecord](ctx, s.st, store.IAMAccessKeyKey(accessKeyID))
	if errors.Is(err, store.ErrNotFound) {
		return auth.Credential{}, false, nil
	}
	if err != nil {
		return auth.Credential{}, false, err
	}
	k := it.Value
	if k.Status != StatusActive {
		return auth.Credential{}, false, nil
	}
	return auth.Credential{AccessKeyID: k.AccessKeyID, SecretAccessKey: k.SecretAccessKey, Role: auth.RoleUser,
		UserName: k.UserName, ARN: k.UserArn}, true, nil
}

// KeyOwner returns the user name an access key belongs to: for callers
// that act on "the caller's own keys".
func (s *Store) KeyOwner(ctx context.Context, accessKeyID string) (string, bool, error) {
	it, err := store.Get[accessKeyRecord](ctx, s.st, store.IAMAccessKeyKey(accessKeyID))
	if errors.Is(err, store.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return it.Value.UserName, true, nil
}

package iam

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/store"
)

// User is an IAM user as the API shows it.
type User struct {
	UserName   string    `json:"userName"`
	UserID     string    `json:"userId"`
	Path       string    `json:"path"`
	Arn        string    `json:"arn"`
	CreateDate time.Time `json:"createDate"`
	Tags       []Tag     `json:"tags,omitempty"`
}

// InlinePolicy is a policy embedded in one user or group.
type InlinePolicy struct {
	Name     string `json:"name"`
	Document string `json:"document"` // as it was put
}

// userRecord is the stored user. What belongs to the user (keys,
// memberships, policies) is listed on it, so that DeleteUser's check that
// nothing is left and every change to those lists conflict on one
// revision.
type userRecord struct {
	User
	Groups     []string       `json:"groups,omitempty"`     // group names as created
	AccessKeys []string       `json:"accessKeys,omitempty"` // key IDs
	Inline     []InlinePolicy `json:"inline,omitempty"`
	Attached   []string       `json:"attached,omitempty"` // managed policy ARNs
}

// getUser reads a user for a change, NoSuchEntity when there is none.
func (s *Store) getUser(ctx context.Context, name string) (store.Item[userRecord], error) {
	return getRecord[userRecord](ctx, s, store.IAMUserKey(name), "user", name)
}

// readUser reads a user through the memo: the value is shared and must
// not be changed.
func (s *Store) readUser(ctx context.Context, name string) (*userRecord, error) {
	return readRecord(ctx, s, &s.users, store.IAMUserKey(name), "user", name)
}

// CreateUser creates a user at path ("" for "/") with tags.
func (s *Store) CreateUser(ctx context.Context, name, path string, tags []Tag) (User, error) {
	if err := CheckUserName("userName", name); err != nil {
		return User{}, err
	}
	if err := CheckPath("path", path); err != nil {
		return User{}, err
	}
	if err := CheckTags("tags", tags); err != nil {
		return User{}, err
	}
	path = normPath(path)
	u := User{UserName: name, UserID: newID("AIDA"), Path: path, Arn: UserARN(s.account, path, name), CreateDate: s.now(), Tags: slices.Clone(tags)}
	err := s.createRecord(ctx, store.IAMUserKey(name), store.IAMUserPrefix(), userRecord{User: u},
		alreadyExists("User with name %s already exists.", name), "UsersPerAccount", MaxUsers)
	return u, err
}

// GetUser returns the named user.
func (s *Store) GetUser(ctx context.Context, name string) (User, error) {
	if err := CheckUserName("userName", name); err != nil {
		return User{}, err
	}
	u, err := s.readUser(ctx, name)
	if err != nil {
		return User{}, err
	}
	return u.User, nil
}

// ListUsers returns the users whose path starts with pathPrefix ("" for
// all), by name.
func (s *Store) ListUsers(ctx context.Context, pathPrefix string) ([]User, error) {
	if err := CheckPathPrefix("pathPrefix", pathPrefix); err != nil {
		return nil, err
	}
	return listRecords(ctx, s, &s.users, store.IAMUserPrefix(), func(u *userRecord) (User, bool) {
		return u.User, strings.HasPrefix(u.Path, pathPrefix)
	})
}

// DeleteUser deletes a user that has nothing left: no access keys,
// policies or group memberships (IAM asks for them to be removed first).
func (s *Store) DeleteUser(ctx context.Context, name string) error {
	if err := CheckUserName("userName", name); err != nil {
		return err
	}
	return deleteRecord(ctx, s, s.getUser, name, func(u *userRecord) error {
		switch {
		case len(u.AccessKeys) > 0:
			return deleteConflict("Cannot delete entity, must delete access keys first.")
		case len(u.Inline) > 0:
			return deleteConflict("Cannot delete entity, must delete policies first.")
		case len(u.Attached) > 0:
			return deleteConflict("Cannot delete entity, must detach all policies first.")
		case len(u.Groups) > 0:
			return deleteConflict("Cannot delete entity, must remove users from group first.")
		}
		return nil
	})
}

// TagUser adds tags to a user, replacing the values of keys it has
// (compared regardless of case).
func (s *Store) TagUser(ctx context.Context, name string, tags []Tag) error {
	if err := CheckUserName("userName", name); err != nil {
		return err
	}
	if len(tags) == 0 {
		return validation("tags", "", true, "Member must not be null")
	}
	if err := CheckTags("tags", tags); err != nil {
		return err
	}
	return updateRecord(ctx, s, s.getUser, name, func(u *userRecord, _ *store.Txn) error {
		for _, t := range tags {
			i := slices.IndexFunc(u.Tags, func(o Tag) bool { return equalFold(o.Key, t.Key) })
			if i >= 0 {
				u.Tags[i] = t
			} else {
				u.Tags = append(u.Tags, t)
			}
		}
		if len(u.Tags) > MaxTagsPerUser {
			return limitExceeded("TagsPerUser", MaxTagsPerUser)
		}
		return nil
	})
}

// UntagUser removes the tags of keys from a user; keys it does not have
// are ignored, as IAM does.
func (s *Store) UntagUser(ctx context.Context, name string, keys []string) error {
	if err := CheckUserName("userName", name); err != nil {
		return err
	}
	if err := CheckTagKeys("tagKeys", keys); err != nil {
		return err
	}
	return updateRecord(ctx, s, s.getUser, name, func(u *userRecord, _ *store.Txn) error {
		u.Tags = slices.DeleteFunc(u.Tags, func(t Tag) bool {
			return slices.ContainsFunc(keys, func(k string) bool { return equalFold(k, t.Key) })
		})
		return nil
	})
}

package iam

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/store"
)

// Group is an IAM group as the API shows it.
type Group struct {
	GroupName  string    `json:"groupName"`
	GroupID    string    `json:"groupId"`
	Path       string    `json:"path"`
	Arn        string    `json:"arn"`
	CreateDate time.Time `json:"createDate"`
}

// groupRecord is the stored group. Membership is written on both the
// group and the user in one transaction: the user's list says whose
// policies apply to it, the group's lets DeleteGroup see its members
// with one revision check.
type groupRecord struct {
	Group
	Members  []string       `json:"members,omitempty"` // user names as created
	Inline   []InlinePolicy `json:"inline,omitempty"`
	Attached []string       `json:"attached,omitempty"`
}

func (s *Store) getGroup(ctx context.Context, name string) (store.Item[groupRecord], error) {
	it, err := store.Get[groupRecord](ctx, s.st, store.IAMGroupKey(name))
	if errors.Is(err, store.ErrNotFound) {
		return it, noSuchEntity("The group with name %s cannot be found.", name)
	}
	return it, err
}

func (s *Store) readGroup(ctx context.Context, name string) (*groupRecord, error) {
	it, err := s.groups.Get(ctx, s.st, store.IAMGroupKey(name))
	if errors.Is(err, store.ErrNotFound) {
		return nil, noSuchEntity("The group with name %s cannot be found.", name)
	}
	if err != nil {
		return nil, err
	}
	return &it.Value, nil
}

// CreateGroup creates a group at path ("" for "/").
func (s *Store) CreateGroup(ctx context.Context, name, path string) (Group, error) {
	if err := CheckGroupName("groupName", name); err != nil {
		return Group{}, err
	}
	if err := CheckPath("path", path); err != nil {
		return Group{}, err
	}
	path = normPath(path)
	g := Group{GroupName: name, GroupID: newID("AGPA"), Path: path, Arn: GroupARN(s.account, path, name), CreateDate: s.now()}
	err := s.withRetry(ctx, func() error {
		if _, err := store.Rev(ctx, s.st, store.IAMGroupKey(name)); err == nil {
			return alreadyExists("Group with name %s already exists.", name)
		}
		if n, err := s.st.Count(ctx, store.IAMGroupPrefix()); err != nil {
			return err
		} else if n >= MaxGroups {
			return limitExceeded("GroupsPerAccount", MaxGroups)
		}
		_, err := s.st.Txn().Create(store.IAMGroupKey(name), groupRecord{Group: g}).Commit(ctx)
		return err
	})
	return g, err
}

// GetGroup returns a group and its members, by name.
func (s *Store) GetGroup(ctx context.Context, name string) (Group, []User, error) {
	if err := CheckGroupName("groupName", name); err != nil {
		return Group{}, nil, err
	}
	g, err := s.readGroup(ctx, name)
	if err != nil {
		return Group{}, nil, err
	}
	users := []User{}
	for _, m := range g.Members {
		u, err := s.readUser(ctx, m)
		if isNoSuch(err) {
			continue
		}
		if err != nil {
			return Group{}, nil, err
		}
		users = append(users, u.User)
	}
	slices.SortFunc(users, func(a, b User) int { return strings.Compare(strings.ToLower(a.UserName), strings.ToLower(b.UserName)) })
	return g.Group, users, nil
}

// ListGroups returns the groups whose path starts with pathPrefix, by name.
func (s *Store) ListGroups(ctx context.Context, pathPrefix string) ([]Group, error) {
	if err := CheckPathPrefix("pathPrefix", pathPrefix); err != nil {
		return nil, err
	}
	items, err := s.groups.List(ctx, s.st, store.IAMGroupPrefix())
	if err != nil {
		return nil, err
	}
	out := []Group{}
	for _, it := range items {
		if strings.HasPrefix(it.Value.Path, pathPrefix) {
			out = append(out, it.Value.Group)
		}
	}
	return out, nil
}

// DeleteGroup deletes a group without members or policies.
func (s *Store) DeleteGroup(ctx context.Context, name string) error {
	if err := CheckGroupName("groupName", name); err != nil {
		return err
	}
	return s.withRetry(ctx, func() error {
		it, err := s.getGroup(ctx, name)
		if err != nil {
			return err
		}
		g := it.Value
		switch {
		case len(g.Members) > 0:
			return deleteConflict("Cannot delete entity, must remove users from group first.")
		case len(g.Inline) > 0:
			return deleteConflict("Cannot delete entity, must delete policies first.")
		case len(g.Attached) > 0:
			return deleteConflict("Cannot delete entity, must detach all policies first.")
		}
		_, err = s.st.Txn().Delete(it.Key, it.Rev).Commit(ctx)
		return err
	})
}

// AddUserToGroup makes a user a member of a group; adding a member again
// changes nothing.
func (s *Store) AddUserToGroup(ctx context.Context, groupName, userName string) error {
	if err := CheckGroupName("groupName", groupName); err != nil {
		return err
	}
	if err := CheckUserName("userName", userName); err != nil {
		return err
	}
	return s.withRetry(ctx, func() error {
		g, err := s.getGroup(ctx, groupName)
		if err != nil {
			return err
		}
		u, err := s.getUser(ctx, userName)
		if err != nil {
			return err
		}
		gr, ur := g.Value, u.Value
		if containsFold(ur.Groups, gr.GroupName) {
			return nil
		}
		if len(ur.Groups) >= MaxGroupsPerUser {
			return limitExceeded("GroupsPerUser", MaxGroupsPerUser)
		}
		ur.Groups = append(ur.Groups, gr.GroupName)
		gr.Members = append(gr.Members, ur.UserName)
		_, err = s.st.Txn().Update(g.Key, g.Rev, gr).Update(u.Key, u.Rev, ur).Commit(ctx)
		return err
	})
}

// RemoveUserFromGroup ends a membership; the user must be a member.
func (s *Store) RemoveUserFromGroup(ctx context.Context, groupName, userName string) error {
	if err := CheckGroupName("groupName", groupName); err != nil {
		return err
	}
	if err := CheckUserName("userName", userName); err != nil {
		return err
	}
	return s.withRetry(ctx, func() error {
		g, err := s.getGroup(ctx, groupName)
		if err != nil {
			return err
		}
		u, err := s.getUser(ctx, userName)
		if err != nil {
			return err
		}
		gr, ur := g.Value, u.Value
		if !containsFold(ur.Groups, gr.GroupName) {
			return noSuchEntity("The user with name %s is not a member of the group %s.", ur.UserName, gr.GroupName)
		}
		ur.Groups = deleteFold(ur.Groups, gr.GroupName)
		gr.Members = deleteFold(gr.Members, ur.UserName)
		_, err = s.st.Txn().Update(g.Key, g.Rev, gr).Update(u.Key, u.Rev, ur).Commit(ctx)
		return err
	})
}

// ListGroupsForUser returns the groups a user is in, by name.
func (s *Store) ListGroupsForUser(ctx context.Context, userName string) ([]Group, error) {
	if err := CheckUserName("userName", userName); err != nil {
		return nil, err
	}
	u, err := s.readUser(ctx, userName)
	if err != nil {
		return nil, err
	}
	out := []Group{}
	for _, name := range u.Groups {
		g, err := s.readGroup(ctx, name)
		if isNoSuch(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, g.Group)
	}
	slices.SortFunc(out, func(a, b Group) int {
		return strings.Compare(strings.ToLower(a.GroupName), strings.ToLower(b.GroupName))
	})
	return out, nil
}

func containsFold(list []string, s string) bool {
	return slices.ContainsFunc(list, func(x string) bool { return equalFold(x, s) })
}

func deleteFold(list []string, s string) []string {
	return slices.DeleteFunc(slices.Clone(list), func(x string) bool { return equalFold(x, s) })
}

func isNoSuch(err error) bool { return codeOf(err) == CodeNoSuchEntity }

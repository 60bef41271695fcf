package iam

import (
	"context"
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
	return getRecord[groupRecord](ctx, s, store.IAMGroupKey(name), "group", name)
}

func (s *Store) readGroup(ctx context.Context, name string) (*groupRecord, error) {
	return readRecord(ctx, s, &s.groups, store.IAMGroupKey(name), "group", name)
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
	err := s.createRecord(ctx, store.IAMGroupKey(name), store.IAMGroupPrefix(), groupRecord{Group: g},
		alreadyExists("Group with name %s already exists.", name), "GroupsPerAccount", MaxGroups)
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
	users, err := readNamed(ctx, g.Members, s.readUser, func(u *userRecord) User { return u.User })
	if err != nil {
		return Group{}, nil, err
	}
	return g.Group, users, nil
}

// ListGroups returns the groups whose path starts with pathPrefix, by name.
func (s *Store) ListGroups(ctx context.Context, pathPrefix string) ([]Group, error) {
	if err := CheckPathPrefix("pathPrefix", pathPrefix); err != nil {
		return nil, err
	}
	return listRecords(ctx, s, &s.groups, store.IAMGroupPrefix(), func(g *groupRecord) (Group, bool) {
		return g.Group, strings.HasPrefix(g.Path, pathPrefix)
	})
}

// DeleteGroup deletes a group without members or policies.
func (s *Store) DeleteGroup(ctx context.Context, name string) error {
	if err := CheckGroupName("groupName", name); err != nil {
		return err
	}
	return deleteRecord(ctx, s, s.getGroup, name, func(g *groupRecord) error {
		switch {
		case len(g.Members) > 0:
			return deleteConflict("Cannot delete entity, must remove users from group first.")
		case len(g.Inline) > 0:
			return deleteConflict("Cannot delete entity, must delete policies first.")
		case len(g.Attached) > 0:
			return deleteConflict("Cannot delete entity, must detach all policies first.")
		}
		return nil
	})
}

// AddUserToGroup makes a user a member of a group; adding a member again
// changes nothing.
func (s *Store) AddUserToGroup(ctx context.Context, groupName, userName string) error {
	return s.changeMembership(ctx, groupName, userName, func(g *groupRecord, u *userRecord) error {
		if containsFold(u.Groups, g.GroupName) {
			return errUnchanged
		}
		if len(u.Groups) >= MaxGroupsPerUser {
			return limitExceeded("GroupsPerUser", MaxGroupsPerUser)
		}
		u.Groups = append(u.Groups, g.GroupName)
		g.Members = append(g.Members, u.UserName)
		return nil
	})
}

// RemoveUserFromGroup ends a membership; the user must be a member.
func (s *Store) RemoveUserFromGroup(ctx context.Context, groupName, userName string) error {
	return s.changeMembership(ctx, groupName, userName, func(g *groupRecord, u *userRecord) error {
		if !containsFold(u.Groups, g.GroupName) {
			return noSuchEntity("The user with name %s is not a member of the group %s.", u.UserName, g.GroupName)
		}
		u.Groups = deleteFold(u.Groups, g.GroupName)
		g.Members = deleteFold(g.Members, u.UserName)
		return nil
	})
}

// changeMembership lets change edit a group and a user, both written in
// one transaction (errUnchanged: neither).
func (s *Store) changeMembership(ctx context.Context, groupName, userName string, change func(*groupRecord, *userRecord) error) error {
	if err := CheckGroupName("groupName", groupName); err != nil {
		return err
	}
	if err := CheckUserName("userName", userName); err != nil {
		return err
	}
	return updateRecord(ctx, s, s.getGroup, groupName, func(g *groupRecord, tx *store.Txn) error {
		u, err := s.getUser(ctx, userName)
		if err != nil {
			return err
		}
		if err := change(g, &u.Value); err != nil {
			return err
		}
		tx.Update(u.Key, u.Rev, u.Value)
		return nil
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
	return readNamed(ctx, u.Groups, s.readGroup, func(g *groupRecord) Group { return g.Group })
}

func containsFold(list []string, s string) bool {
	return slices.ContainsFunc(list, func(x string) bool { return equalFold(x, s) })
}

func deleteFold(list []string, s string) []string {
	return slices.DeleteFunc(slices.Clone(list), func(x string) bool { return equalFold(x, s) })
}

func isNoSuch(err error) bool { return codeOf(err) == CodeNoSuchEntity }

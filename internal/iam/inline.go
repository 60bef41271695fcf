package iam

import (
	"context"
	"fmt"
	"slices"

	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/iam/policy"
	"github.com/capstanhq/capstan/internal/store"
)

// checkDocument validates a policy document given as text: its characters
// and size, then its grammar (policy.Parse), whose complaint names the
// statement and member.
func (s *Store) checkDocument(field, doc string) error {
	if err := CheckPolicyDocument(field, doc); err != nil {
		return err
	}
	if _, err := s.docs.parse(doc); err != nil {
		return malformed(err)
	}
	return nil
}

func findInline(list []InlinePolicy, name string) (InlinePolicy, bool) {
	i := slices.IndexFunc(list, func(p InlinePolicy) bool { return equalFold(p.Name, name) })
	if i < 0 {
		return InlinePolicy{}, false
	}
	return list[i], true
}

// owner is the kind of identity that holds policies: a user or a group.
type owner struct {
	kind      string // as messages name it
	field     string // the member that names one
	check     func(field, v string) error
	maxInline int
}

func (o *owner) checkName(v string) error { return o.check(o.field, v) }

var (
	userOwner  = &owner{"user", "userName", CheckUserName, MaxUserInlineSize}
	groupOwner = &owner{"group", "groupName", CheckGroupName, MaxGroupInlineSize}
)

// held is an identity's policies, pointing into its record.
type held struct {
	name     string // the identity's, as created
	inline   *[]InlinePolicy
	attached *[]string
}

func (u *userRecord) held() held  { return held{u.UserName, &u.Inline, &u.Attached} }
func (g *groupRecord) held() held { return held{g.GroupName, &g.Inline, &g.Attached} }

// changeHeld changes the policies of the identity name (see updateRecord).
func (s *Store) changeHeld(ctx context.Context, o *owner, name string, edit func(h held, tx *store.Txn) error) error {
	if o == groupOwner {
		return updateRecord(ctx, s, s.getGroup, name, func(g *groupRecord, tx *store.Txn) error { return edit(g.held(), tx) })
	}
	return updateRecord(ctx, s, s.getUser, name, func(u *userRecord, tx *store.Txn) error { return edit(u.held(), tx) })
}

// readHeld reads the policies of the identity name through the memo: they
// are shared and must not be changed.
func (s *Store) readHeld(ctx context.Context, o *owner, name string) (held, error) {
	if o == groupOwner {
		g, err := s.readGroup(ctx, name)
		if err != nil {
			return held{}, err
		}
		return g.held(), nil
	}
	u, err := s.readUser(ctx, name)
	if err != nil {
		return held{}, err
	}
	return u.held(), nil
}

// checkInline checks the names of an identity and one of its policies.
func checkInline(o *owner, name, policyName string) error {
	if err := o.checkName(name); err != nil {
		return err
	}
	return CheckPolicyName("policyName", policyName)
}

// putInlinePolicy adds or replaces an inline policy of an identity.
func (s *Store) putInlinePolicy(ctx context.Context, o *owner, name, policyName, doc string) error {
	if err := checkInline(o, name, policyName); err != nil {
		return err
	}
	if err := s.checkDocument("policyDocument", doc); err != nil {
		return err
	}
	return s.changeHeld(ctx, o, name, func(h held, _ *store.Txn) error {
		list := slices.DeleteFunc(slices.Clone(*h.inline), func(p InlinePolicy) bool { return equalFold(p.Name, policyName) })
		list = append(list, InlinePolicy{Name: policyName, Document: doc})
		total := 0
		for _, p := range list {
			total += policy.Size([]byte(p.Document))
		}
		if total > o.maxInline { // all of the identity's inline policies together
			return &fault.Error{Kind: fault.Conflict, Code: CodeLimitExceeded,
				Message: fmt.Sprintf("Maximum policy size of %d bytes exceeded for %s %s", o.maxInline, o.kind, h.name)}
		}
		slices.SortFunc(list, func(a, b InlinePolicy) int { return compareFold(a.Name, b.Name) })
		*h.inline = list
		return nil
	})
}

// inlinePolicy returns an inline policy of an identity.
func (s *Store) inlinePolicy(ctx context.Context, o *owner, name, policyName string) (InlinePolicy, error) {
	if err := checkInline(o, name, policyName); err != nil {
		return InlinePolicy{}, err
	}
	h, err := s.readHeld(ctx, o, name)
	if err != nil {
		return InlinePolicy{}, err
	}
	p, ok := findInline(*h.inline, policyName)
	if !ok {
		return p, noSuchEntity("The %s policy with name %s cannot be found.", o.kind, policyName)
	}
	return p, nil
}

// inlineNames returns the names of an identity's inline policies.
func (s *Store) inlineNames(ctx context.Context, o *owner, name string) ([]string, error) {
	if err := o.checkName(name); err != nil {
		return nil, err
	}
	h, err := s.readHeld(ctx, o, name)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(*h.inline))
	for i, p := range *h.inline {
		out[i] = p.Name
	}
	return out, nil
}

// deleteInlinePolicy deletes an inline policy of an identity.
func (s *Store) deleteInlinePolicy(ctx context.Context, o *owner, name, policyName string) error {
	if err := checkInline(o, name, policyName); err != nil {
		return err
	}
	return s.changeHeld(ctx, o, name, func(h held, _ *store.Txn) error {
		if _, ok := findInline(*h.inline, policyName); !ok {
			return noSuchEntity("The %s policy with name %s cannot be found.", o.kind, policyName)
		}
		*h.inline = slices.DeleteFunc(*h.inline, func(p InlinePolicy) bool { return equalFold(p.Name, policyName) })
		return nil
	})
}

// PutUserPolicy adds or replaces an inline policy of a user.
func (s *Store) PutUserPolicy(ctx context.Context, userName, policyName, doc string) error {
	return s.putInlinePolicy(ctx, userOwner, userName, policyName, doc)
}

// GetUserPolicy returns an inline policy of a user.
func (s *Store) GetUserPolicy(ctx context.Context, userName, policyName string) (InlinePolicy, error) {
	return s.inlinePolicy(ctx, userOwner, userName, policyName)
}

// ListUserPolicies returns the names of a user's inline policies.
func (s *Store) ListUserPolicies(ctx context.Context, userName string) ([]string, error) {
	return s.inlineNames(ctx, userOwner, userName)
}

// DeleteUserPolicy deletes an inline policy of a user.
func (s *Store) DeleteUserPolicy(ctx context.Context, userName, policyName string) error {
	return s.deleteInlinePolicy(ctx, userOwner, userName, policyName)
}

// PutGroupPolicy adds or replaces an inline policy of a group.
func (s *Store) PutGroupPolicy(ctx context.Context, groupName, policyName, doc string) error {
	return s.putInlinePolicy(ctx, groupOwner, groupName, policyName, doc)
}

// GetGroupPolicy returns an inline policy of a group.
func (s *Store) GetGroupPolicy(ctx context.Context, groupName, policyName string) (InlinePolicy, error) {
	return s.inlinePolicy(ctx, groupOwner, groupName, policyName)
}

// ListGroupPolicies returns the names of a group's inline policies.
func (s *Store) ListGroupPolicies(ctx context.Context, groupName string) ([]string, error) {
	return s.inlineNames(ctx, groupOwner, groupName)
}

// DeleteGroupPolicy deletes an inline policy of a group.
func (s *Store) DeleteGroupPolicy(ctx context.Context, groupName, policyName string) error {
	return s.deleteInlinePolicy(ctx, groupOwner, groupName, policyName)
}

package iam

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/iam/policy"
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

// putInline returns list with the policy name set to doc, replacing one
// of the same name, unless all of them together would exceed max.
func putInline(list []InlinePolicy, name, doc string, max int, owner string) ([]InlinePolicy, error) {
	out := slices.DeleteFunc(slices.Clone(list), func(p InlinePolicy) bool { return equalFold(p.Name, name) })
	out = append(out, InlinePolicy{Name: name, Document: doc})
	total := 0
	for _, p := range out {
		total += policy.Size([]byte(p.Document))
	}
	if total > max {
		return nil, &fault.Error{Kind: fault.Conflict, Code: CodeLimitExceeded,
			Message: fmt.Sprintf("Maximum policy size of %d bytes exceeded for %s", max, owner)}
	}
	slices.SortFunc(out, func(a, b InlinePolicy) int { return strings.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name)) })
	return out, nil
}

func findInline(list []InlinePolicy, name string) (InlinePolicy, bool) {
	i := slices.IndexFunc(list, func(p InlinePolicy) bool { return equalFold(p.Name, name) })
	if i < 0 {
		return InlinePolicy{}, false
	}
	return list[i], true
}

func inlineNames(list []InlinePolicy) []string {
	out := make([]string, len(list))
	for i, p := range list {
		out[i] = p.Name
	}
	return out
}

// PutUserPolicy adds or replaces an inline policy of a user.
func (s *Store) PutUserPolicy(ctx context.Context, userName, policyName, doc string) error {
	if err := CheckUserName("userName", userName); err != nil {
		return err
	}
	if err := CheckPolicyName("policyName", policyName); err != nil {
		return err
	}
	if err := s.checkDocument("policyDocument", doc); err != nil {
		return err
	}
	return s.withRetry(ctx, func() error {
		it, err := s.getUser(ctx, userName)
		if err != nil {
			return err
		}
		u := it.Value
		if u.Inline, err = putInline(u.Inline, policyName, doc, MaxUserInlineSize, "user "+u.UserName); err != nil {
			return err
		}
		_, err = s.st.Txn().Update(it.Key, it.Rev, u).Commit(ctx)
		return err
	})
}

// GetUserPolicy returns an inline policy of a user.
func (s *Store) GetUserPolicy(ctx context.Context, userName, policyName string) (InlinePolicy, error) {
	if err := CheckUserName("userName", userName); err != nil {
		return InlinePolicy{}, err
	}
	if err := CheckPolicyName("policyName", policyName); err != nil {
		return InlinePolicy{}, err
	}
	u, err := s.readUser(ctx, userName)
	if err != nil {
		return InlinePolicy{}, err
	}
	p, ok := findInline(u.Inline, policyName)
	if !ok {
		return p, noSuchEntity("The user policy with name %s cannot be found.", policyName)
	}
	return p, nil
}

// ListUserPolicies returns the names of a user's inline policies.
func (s *Store) ListUserPolicies(ctx context.Context, userName string) ([]string, error) {
	if err := CheckUserName("userName", userName); err != nil {
		return nil, err
	}
	u, err := s.readUser(ctx, userName)
	if err != nil {
		return nil, err
	}
	return inlineNames(u.Inline), nil
}

// DeleteUserPolicy deletes an inline policy of a user.
func (s *Store) DeleteUserPolicy(ctx context.Context, userName, policyName string) error {
	if err := CheckUserName("userName", userName); err != nil {
		return err
	}
	if err := CheckPolicyName("policyName", policyName); err != nil {
		return err
	}
	return s.withRetry(ctx, func() error {
		it, err := s.getUser(ctx, userName)
		if err != nil {
			return err
		}
		u := it.Value
		if _, ok := findInline(u.Inline, policyName); !ok {
			return noSuchEntity("The user policy with name %s cannot be found.", policyName)
		}
		u.Inline = slices.DeleteFunc(u.Inline, func(p InlinePolicy) bool { return equalFold(p.Name, policyName) })
		_, err = s.st.Txn().Update(it.Key, it.Rev, u).Commit(ctx)
		return err
	})
}

// PutGroupPolicy adds or replaces an inline policy of a group.
func (s *Store) PutGroupPolicy(ctx context.Context, groupName, policyName, doc string) error {
	if err := CheckGroupName("groupName", groupName); err != nil {
		return err
	}
	if err := CheckPolicyName("policyName", policyName); err != nil {
		return err
	}
	if err := s.checkDocument("policyDocument", doc); err != nil {
		return err
	}
	return s.withRetry(ctx, func() error {
		it, err := s.getGroup(ctx, groupName)
		if err != nil {
			return err
		}
		g := it.Value
		if g.Inline, err = putInline(g.Inline, policyName, doc, MaxGroupInlineSize, "group "+g.GroupName); err != nil {
			return err
		}
		_, err = s.st.Txn().Update(it.Key, it.Rev, g).Commit(ctx)
		return err
	})
}

// GetGroupPolicy returns an inline policy of a group.
func (s *Store) GetGroupPolicy(ctx context.Context, groupName, policyName string) (InlinePolicy, error) {
	if err := CheckGroupName("groupName", groupName); err != nil {
		return InlinePolicy{}, err
	}
	if err := CheckPolicyName("policyName", policyName); err != nil {
		return InlinePolicy{}, err
	}
	g, err := s.readGroup(ctx, groupName)
	if err != nil {
		return InlinePolicy{}, err
	}
	p, ok := findInline(g.Inline, policyName)
	if !ok {
		return p, noSuchEntity("The group policy with name %s cannot be found.", policyName)
	}
	return p, nil
}

// ListGroupPolicies returns the names of a group's inline policies.
func (s *Store) ListGroupPolicies(ctx context.Context, groupName string) ([]string, error) {
	if err := CheckGroupName("groupName", groupName); err != nil {
		return nil, err
	}
	g, err := s.readGroup(ctx, groupName)
	if err != nil {
		return nil, err
	}
	return inlineNames(g.Inline), nil
}

// DeleteGroupPolicy deletes an inline policy of a group.
func (s *Store) DeleteGroupPolicy(ctx context.Context, groupName, policyName string) error {
	if err := CheckGroupName("groupName", groupName); err != nil {
		return err
	}
	if err := CheckPolicyName("policyName", policyName); err != nil {
		return err
	}
	return s.withRetry(ctx, func() error {
		it, err := s.getGroup(ctx, groupName)
		if err != nil {
			return err
		}
		g := it.Value
		if _, ok := findInline(g.Inline, policyName); !ok {
			return noSuchEntity("The group policy with name %s cannot be found.", policyName)
		}
		g.Inline = slices.DeleteFunc(g.Inline, func(p InlinePolicy) bool { return equalFold(p.Name, policyName) })
		_, err = s.st.Txn().Update(it.Key, it.Rev, g).Commit(ctx)
		return err
	})
}

package iam

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/iam/policy"
	"github.com/capstanhq/capstan/internal/store"
)

// ManagedPolicy is a customer managed policy as the API shows it.
type ManagedPolicy struct {
	PolicyName       string    `json:"policyName"`
	PolicyID         string    `json:"policyId"`
	Arn              string    `json:"arn"`
	Path             string    `json:"path"`
	DefaultVersionID string    `json:"defaultVersionId"`
	AttachmentCount  int       `json:"attachmentCount"`
	Description      string    `json:"description,omitempty"`
	CreateDate       time.Time `json:"createDate"`
	UpdateDate       time.Time `json:"updateDate"`
	Tags             []Tag     `json:"tags,omitempty"`
}

// PolicyVersion is one version of a managed policy's document.
type PolicyVersion struct {
	VersionID        string    `json:"versionId"`
	Document         string    `json:"document"`
	IsDefaultVersion bool      `json:"isDefaultVersion"`
	CreateDate       time.Time `json:"createDate"`
}

// AttachedPolicy names a managed policy attached to a user or group.
type AttachedPolicy struct {
	PolicyName string
	PolicyArn  string
}

// policyRecord is the stored policy with its versions (at most five, so
// one record). AttachmentCount is kept with the attachments, in the same
// transaction, so DeletePolicy sees every attachment by one revision.
type policyRecord struct {
	ManagedPolicy
	LastVersion int             `json:"lastVersion"` // version numbers are never reused
	Versions    []PolicyVersion `json:"versions"`
}

func (r *policyRecord) version(id string) (PolicyVersion, bool) {
	i := slices.IndexFunc(r.Versions, func(v PolicyVersion) bool { return v.VersionID == id })
	if i < 0 {
		return PolicyVersion{}, false
	}
	v := r.Versions[i]
	v.IsDefaultVersion = v.VersionID == r.DefaultVersionID
	return v, true
}

// defaultDocument is the text of the default version.
func (r *policyRecord) defaultDocument() string {
	v, _ := r.version(r.DefaultVersionID)
	return v.Document
}

// policyName returns the name in a policy ARN of this account; a
// malformed ARN is InvalidInput, another account's (AWS managed
// policies included) NoSuchEntity.
func (s *Store) policyName(field, arn string) (string, error) {
	if err := required(field, arn); err != nil {
		return "", err
	}
	if err := length(field, arn, 20, 2048); err != nil {
		return "", err
	}
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[1] != "aws" || parts[2] != "iam" || parts[3] != "" || !strings.HasPrefix(parts[5], "policy/") {
		return "", invalidInput("ARN %s is not valid.", arn)
	}
	res := parts[5]
	name := res[strings.LastIndexByte(res, '/')+1:]
	if name == "" || CheckPolicyName(field, name) != nil {
		return "", invalidInput("ARN %s is not valid.", arn)
	}
	if parts[4] != s.account {
		return "", noSuchEntity("Policy %s does not exist or is not attachable.", arn)
	}
	return name, nil
}

func (s *Store) getPolicy(ctx context.Context, arn string) (store.Item[policyRecord], error) {
	var it store.Item[policyRecord]
	name, err := s.policyName("policyArn", arn)
	if err != nil {
		return it, err
	}
	it, err = store.Get[policyRecord](ctx, s.st, store.IAMPolicyKey(name))
	if errors.Is(err, store.ErrNotFound) || err == nil && !equalFold(it.Value.Arn, arn) {
		return it, noSuchEntity("Policy %s was not found.", arn)
	}
	return it, err
}

// readPolicy reads a policy through the memo (shared: not to be changed).
func (s *Store) readPolicy(ctx context.Context, arn string) (*policyRecord, error) {
	name, err := s.policyName("policyArn", arn)
	if err != nil {
		return nil, err
	}
	it, err := s.policies.Get(ctx, s.st, store.IAMPolicyKey(name))
	if errors.Is(err, store.ErrNotFound) || err == nil && !equalFold(it.Value.Arn, arn) {
		return nil, noSuchEntity("Policy %s was not found.", arn)
	}
	if err != nil {
		return nil, err
	}
	return &it.Value, nil
}

// CreatePolicy creates a customer managed policy whose version v1 is doc.
// Names are unique in the account whatever the path.
func (s *Store) CreatePolicy(ctx context.Context, name, path, doc, description string, tags []Tag) (ManagedPolicy, error) {
	if err := CheckPolicyName("policyName", name); err != nil {
		return ManagedPolicy{}, err
	}
	if err := CheckPolicyPath("path", path); err != nil {
		return ManagedPolicy{}, err
	}
	if err := CheckDescription("description", description); err != nil {
		return ManagedPolicy{}, err
	}
	if err := CheckTags("tags", tags); err != nil {
		return ManagedPolicy{}, err
	}
	if err := s.checkManaged("policyDocument", doc); err != nil {
		return ManagedPolicy{}, err
	}
	path = normPath(path)
	now := s.now()
	p := ManagedPolicy{PolicyName: name, PolicyID: newID("ANPA"), Arn: PolicyARN(s.account, path, name), Path: path, DefaultVersionID: "v1",
		Description: description, CreateDate: now, UpdateDate: now, Tags: slices.Clone(tags)}
	rec := policyRecord{ManagedPolicy: p, LastVersion: 1, Versions: []PolicyVersion{{VersionID: "v1", Document: doc, CreateDate: now}}}
	err := s.createRecord(ctx, store.IAMPolicyKey(name), store.IAMPolicyPrefix(), rec,
		alreadyExists("A policy called %s already exists. Duplicate names are not allowed.", name), "PoliciesPerAccount", MaxManagedPolicies)
	return p, err
}

// checkManaged validates a managed policy's document, size included.
func (s *Store) checkManaged(field, doc string) error {
	if err := s.checkDocument(field, doc); err != nil {
		return err
	}
	if n := policy.Size([]byte(doc)); n > MaxManagedSize {
		return &fault.Error{Kind: fault.Conflict, Code: CodeLimitExceeded,
			Message: fmt.Sprintf("Cannot exceed quota for PolicySize: %d (the document has %d characters other than whitespace)", MaxManagedSize, n)}
	}
	return nil
}

// GetPolicy returns a managed policy by ARN.
func (s *Store) GetPolicy(ctx context.Context, arn string) (ManagedPolicy, error) {
	r, err := s.readPolicy(ctx, arn)
	if err != nil {
		return ManagedPolicy{}, err
	}
	return r.ManagedPolicy, nil
}

// ListPolicies returns the account's managed policies whose path starts
// with pathPrefix, only the attached ones when onlyAttached, by name.
func (s *Store) ListPolicies(ctx context.Context, pathPrefix string, onlyAttached bool) ([]ManagedPolicy, error) {
	if pathPrefix != "" {
		if err := CheckPolicyPath("pathPrefix", pathPrefix); err != nil {
			return nil, err
		}
	}
	return listRecords(ctx, s, &s.policies, store.IAMPolicyPrefix(), func(r *policyRecord) (ManagedPolicy, bool) {
		return r.ManagedPolicy, strings.HasPrefix(r.Path, pathPrefix) && (!onlyAttached || r.AttachmentCount > 0)
	})
}

// DeletePolicy deletes a managed policy that is attached to nothing and
// has no version but its default.
func (s *Store) DeletePolicy(ctx context.Context, arn string) error {
	return deleteRecord(ctx, s, s.getPolicy, arn, func(r *policyRecord) error {
		switch {
		case r.AttachmentCount > 0:
			return deleteConflict("Cannot delete a policy attached to entities.")
		case len(r.Versions) > 1:
			return deleteConflict("This policy has more than one version. Before you delete a policy, you must delete the policy's versions.")
		}
		return nil
	})
}

// GetPolicyVersion returns one version of a managed policy.
func (s *Store) GetPolicyVersion(ctx context.Context, arn, versionID string) (PolicyVersion, error) {
	if err := CheckVersionID("versionId", versionID); err != nil {
		return PolicyVersion{}, err
	}
	r, err := s.readPolicy(ctx, arn)
	if err != nil {
		return PolicyVersion{}, err
	}
	v, ok := r.version(versionID)
	if !ok {
		return v, noSuchEntity("Policy %s version %s does not exist.", arn, versionID)
	}
	return v, nil
}

// ListPolicyVersions returns a policy's versions, newest first.
func (s *Store) ListPolicyVersions(ctx context.Context, arn string) ([]PolicyVersion, error) {
	r, err := s.readPolicy(ctx, arn)
	if err != nil {
		return nil, err
	}
	out := make([]PolicyVersion, 0, len(r.Versions))
	for i := len(r.Versions) - 1; i >= 0; i-- {
		v, _ := r.version(r.Versions[i].VersionID)
		out = append(out, v)
	}
	return out, nil
}

// CreatePolicyVersion adds a version (at most five are kept), the
// default one when setDefault.
func (s *Store) CreatePolicyVersion(ctx context.Context, arn, doc string, setDefault bool) (PolicyVersion, error) {
	if err := s.checkManaged("policyDocument", doc); err != nil {
		return PolicyVersion{}, err
	}
	var v PolicyVersion
	err := updateRecord(ctx, s, s.getPolicy, arn, func(r *policyRecord, _ *store.Txn) error {
		if len(r.Versions) >= MaxPolicyVersions {
			return &fault.Error{Kind: fault.Conflict, Code: CodeLimitExceeded,
				Message: fmt.Sprintf("A managed policy keeps at most %d versions: delete one (DeletePolicyVersion) before creating another.", MaxPolicyVersions)}
		}
		r.LastVersion++
		now := s.now()
		v = PolicyVersion{VersionID: "v" + strconv.Itoa(r.LastVersion), Document: doc, CreateDate: now}
		r.Versions = append(r.Versions, v)
		if setDefault {
			r.DefaultVersionID = v.VersionID
			v.IsDefaultVersion = true
		}
		r.UpdateDate = now
		return nil
	})
	return v, err
}

// DeletePolicyVersion deletes a version other than the default.
func (s *Store) DeletePolicyVersion(ctx context.Context, arn, versionID string) error {
	return s.changeVersion(ctx, arn, versionID, func(r *policyRecord) error {
		if r.DefaultVersionID == versionID {
			return deleteConflict("Cannot delete the default version of a policy.")
		}
		r.Versions = slices.DeleteFunc(r.Versions, func(v PolicyVersion) bool { return v.VersionID == versionID })
		return nil
	})
}

// SetDefaultPolicyVersion makes a version the one that applies.
func (s *Store) SetDefaultPolicyVersion(ctx context.Context, arn, versionID string) error {
	return s.changeVersion(ctx, arn, versionID, func(r *policyRecord) error {
		if r.DefaultVersionID == versionID {
			return errUnchanged
		}
		r.DefaultVersionID, r.UpdateDate = versionID, s.now()
		return nil
	})
}

// changeVersion lets edit change a policy that has the version versionID.
func (s *Store) changeVersion(ctx context.Context, arn, versionID string, edit func(*policyRecord) error) error {
	if err := CheckVersionID("versionId", versionID); err != nil {
		return err
	}
	return updateRecord(ctx, s, s.getPolicy, arn, func(r *policyRecord, _ *store.Txn) error {
		if _, ok := r.version(versionID); !ok {
			return noSuchEntity("Policy %s version %s does not exist.", arn, versionID)
		}
		return edit(r)
	})
}

// attach adds or removes (detach) the policy arn on an identity's list, in
// one transaction with the policy's AttachmentCount.
func (s *Store) attach(ctx context.Context, o *owner, name, arn string, detach bool) error {
	if err := o.checkName(name); err != nil {
		return err
	}
	return s.changeHeld(ctx, o, name, func(h held, tx *store.Txn) error {
		p, err := s.getPolicy(ctx, arn)
		if isNoSuch(err) && !detach {
			return noSuchEntity("Policy %s does not exist or is not attachable.", arn)
		}
		if err != nil {
			return err
		}
		r := p.Value
		has := containsFold(*h.attached, r.Arn)
		switch {
		case !detach && has:
			return errUnchanged
		case detach && !has:
			return noSuchEntity("Policy %s was not found.", arn)
		case !detach && len(*h.attached) >= MaxAttachedPerIdentity:
			return limitExceeded("PoliciesPerUserOrGroup", MaxAttachedPerIdentity)
		}
		if detach {
			*h.attached = deleteFold(*h.attached, r.Arn)
			r.AttachmentCount = max(r.AttachmentCount-1, 0)
		} else {
			*h.attached = append(slices.Clone(*h.attached), r.Arn)
			r.AttachmentCount++
		}
		tx.Update(p.Key, p.Rev, r)
		return nil
	})
}

// AttachUserPolicy attaches a managed policy to a user (again: no change).
func (s *Store) AttachUserPolicy(ctx context.Context, userName, arn string) error {
	return s.attach(ctx, userOwner, userName, arn, false)
}

// DetachUserPolicy detaches a managed policy from a user.
func (s *Store) DetachUserPolicy(ctx context.Context, userName, arn string) error {
	return s.attach(ctx, userOwner, userName, arn, true)
}

// AttachGroupPolicy attaches a managed policy to a group.
func (s *Store) AttachGroupPolicy(ctx context.Context, groupName, arn string) error {
	return s.attach(ctx, groupOwner, groupName, arn, false)
}

// DetachGroupPolicy detaches a managed policy from a group.
func (s *Store) DetachGroupPolicy(ctx context.Context, groupName, arn string) error {
	return s.attach(ctx, groupOwner, groupName, arn, true)
}

// listAttached returns the managed policies attached to an identity
// whose path starts with pathPrefix.
func (s *Store) listAttached(ctx context.Context, o *owner, name, pathPrefix string) ([]AttachedPolicy, error) {
	if err := o.checkName(name); err != nil {
		return nil, err
	}
	if pathPrefix != "" {
		if err := CheckPolicyPath("pathPrefix", pathPrefix); err != nil {
			return nil, err
		}
	}
	h, err := s.readHeld(ctx, o, name)
	if err != nil {
		return nil, err
	}
	out := []AttachedPolicy{}
	for _, a := range *h.attached {
		res := a[strings.Index(a, ":policy")+len(":policy"):] // "/path/name"
		cut := strings.LastIndexByte(res, '/') + 1
		if strings.HasPrefix(res[:cut], pathPrefix) {
			out = append(out, AttachedPolicy{PolicyName: res[cut:], PolicyArn: a})
		}
	}
	return out, nil
}

// ListAttachedUserPolicies returns the managed policies attached to a
// user whose path starts with pathPrefix.
func (s *Store) ListAttachedUserPolicies(ctx context.Context, userName, pathPrefix string) ([]AttachedPolicy, error) {
	return s.listAttached(ctx, userOwner, userName, pathPrefix)
}

// ListAttachedGroupPolicies returns the managed policies attached to a
// group whose path starts with pathPrefix.
func (s *Store) ListAttachedGroupPolicies(ctx context.Context, groupName, pathPrefix string) ([]AttachedPolicy, error) {
	return s.listAttached(ctx, groupOwner, groupName, pathPrefix)
}

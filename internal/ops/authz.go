package ops

import (
	"context"
	"maps"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/store"
)

// Checker decides whether a principal may perform an action on resources
// under a request's condition keys (iam.Authorizer).
type Checker interface {
	Check(ctx context.Context, p auth.Principal, action string, resources []string, conditions map[string][]string) error
}

// Authorizer returns the ECS handler's authorizer: the root may call
// everything, an agent what an instance needs for itself, a user what its
// policies allow: every action and resource of the call's target
// (authztable.go), the dependent ones (tags at creation, host access)
// included.
func (s *Service) Authorizer(iam Checker) api.Authorizer {
	return func(ctx context.Context, p auth.Principal, op string, req any) (api.Checked, error) {
		if p.Role == auth.RoleAgent {
			c := api.Checked{Action: "ecs:" + op, Resources: []string{"*"}}
			if agentOperations[op] {
				return c, nil
			}
			return c, fault.Denied("credential %s (role %s) is not allowed to call %s", p.AccessKeyID, p.Role, op)
		}
		tctx := ctx
		if p.Role == auth.RoleAdmin {
			// The root's target only names the resources in the audit
			// trail: a write need not wait for the latest revision for it.
			tctx = s.Store.InScope(ctx, new(store.Scope), true)
		}
		t, err := s.authTargetOf(tctx, op, req)
		if err != nil {
			if p.Role == auth.RoleAdmin {
				// The operation answers a request it cannot make sense of.
				return api.Checked{Action: "ecs:" + op}, nil
			}
			return api.Checked{Action: "ecs:" + op}, err
		}
		c := api.Checked{Action: t.Action, Resources: t.Resources}
		if p.Role == auth.RoleAdmin {
			return c, nil
		}
		if p.Role != auth.RoleUser || iam == nil {
			return c, fault.Denied("credential %s (role %s) is not allowed to call %s", p.AccessKeyID, p.Role, op)
		}
		ip := api.SourceIP(ctx)
		for _, r := range t.requests() {
			if ip != "" {
				r.Conditions = maps.Clone(r.Conditions)
				if r.Conditions == nil {
					r.Conditions = map[string][]string{}
				}
				r.Conditions["aws:SourceIp"] = []string{ip}
			}
			if err := iam.Check(ctx, p, r.Action, []string{r.Resource}, r.Conditions); err != nil {
				return c, err
			}
		}
		return c, nil
	}
}

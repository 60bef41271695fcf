package ops

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strconv"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
)

// Account settings are stored per principal; the root's are the account's
// defaults (PutAccountSettingDefault writes them). The effective value for
// a principal is its own, else the root's, else ECS's built-in default.
// Capstan stores and reports them; none of them changes what it runs.

func (s *Service) registerAccountSettings(h *api.Handler) {
	api.Register(h, "PutAccountSetting", s.PutAccountSetting)
	api.Register(h, "PutAccountSettingDefault", s.PutAccountSettingDefault)
	api.Register(h, "DeleteAccountSetting", s.DeleteAccountSetting)
	api.Register(h, "ListAccountSettings", s.ListAccountSettings)
}

// accountSetting is one setting name: its values and ECS's default.
type accountSetting struct {
	name     string
	values   []string
	def      string
	readOnly bool // set by AWS on the account's behalf
}

// accountSettings in the model's order.
var accountSettings = []accountSetting{
	{name: "serviceLongArnFormat", values: []string{"enabled", "disabled"}, def: "enabled"},
	{name: "taskLongArnFormat", values: []string{"enabled", "disabled"}, def: "enabled"},
	{name: "containerInstanceLongArnFormat", values: []string{"enabled", "disabled"}, def: "enabled"},
	{name: "awsvpcTrunking", values: []string{"enabled", "disabled"}, def: "disabled"},
	{name: "containerInsights", values: []string{"enabled", "disabled", "enhanced"}, def: "disabled"},
	{name: "fargateFIPSMode", values: []string{"enabled", "disabled"}, def: "disabled"},
	{name: "tagResourceAuthorization", values: []string{"on", "off"}, def: "on"},
	{name: "fargateTaskRetirementWaitPeriod", values: []string{"0", "7", "14"}, def: "7"},
	{name: "guardDutyActivate", values: []string{"on", "off"}, def: "off", readOnly: true},
	{name: "defaultLogDriverMode", values: []string{"blocking", "non-blocking"}, def: "non-blocking"},
	{name: "fargateEventWindows", values: []string{"enabled", "disabled"}, def: "disabled"},
}

func settingNamed(name string) (accountSetting, bool) {
	i := slices.IndexFunc(accountSettings, func(a accountSetting) bool { return a.name == name })
	if i < 0 {
		return accountSetting{}, false
	}
	return accountSettings[i], true
}

func settingNames() []string {
	out := make([]string, len(accountSettings))
	for i, a := range accountSettings {
		out[i] = a.name
	}
	return out
}

func checkSettingName(name string) (accountSetting, error) {
	if name == "" {
		return accountSetting{}, fault.Invalid("name", "is required")
	}
	a, ok := settingNamed(name)
	if !ok {
		return a, fault.Invalid("name", "%q is not an account setting; valid names are %v", fleet.Clip(name), settingNames())
	}
	return a, nil
}

var principalARN = regexp.MustCompile(`^arn:[a-z-]+:iam::(\d{12}):(root|user/[\w+=,.@/-]{1,512}|role/[\w+=,.@/-]{1,512})$`)

// principal resolves the principal a call is about: principalArn, else
// the caller. Only the root may name another principal.
func (s *Service) principal(ctx context.Context, ref string) (string, error) {
	caller, _ := api.Caller(ctx)
	self := s.callerARN(caller)
	if ref == "" {
		return self, nil
	}
	m := principalARN.FindStringSubmatch(ref)
	if m == nil {
		return "", fault.Invalid("principalArn", "%q is not the ARN of a user, role or the root (arn:aws:iam::ACCOUNT:user/NAME)", fleet.Clip(ref))
	}
	if m[1] != s.ARNs.Account {
		return "", fault.Invalid("principalArn", "%q is not in account %s", fleet.Clip(ref), s.ARNs.Account)
	}
	if ref != self && caller.Role != auth.RoleAdmin {
		return "", fault.Denied("only the root user or the principal itself can use principalArn %s", ref)
	}
	return ref, nil
}

// callerARN is the caller's IAM ARN: the root for the admin credential.
func (s *Service) callerARN(p auth.Principal) string {
	base := "arn:" + s.ARNs.Partition + ":iam::" + s.ARNs.Account + ":"
	switch {
	case p.Role == auth.RoleAdmin || p.AccessKeyID == "":
		return base + "root"
	case p.ARN != "":
		return p.ARN
	case p.UserName != "":
		return base + "user/" + p.UserName
	}
	return base + "user/" + p.AccessKeyID
}

func (s *Service) rootARN() string {
	return "arn:" + s.ARNs.Partition + ":iam::" + s.ARNs.Account + ":root"
}

func (s *Service) putSetting(ctx context.Context, name, value, principal string) (*shapes.Setting, error) {
	a, err := checkSettingName(name)
	if err != nil {
		return nil, err
	}
	if a.readOnly {
		return nil, fault.Invalid("name", "%s is read-only: it reports what AWS turned on for the account", name)
	}
	if !slices.Contains(a.values, value) {
		return nil, fault.Invalid("value", "%s takes one of %v (got %q)", name, a.values, fleet.Clip(value))
	}
	if name == "fargateTaskRetirementWaitPeriod" && principal != s.rootARN() {
		return nil, fault.Invalid("principalArn", "fargateTaskRetirementWaitPeriod can only be set for the root user")
	}
	st := shapes.Setting{Name: name, Value: value, PrincipalArn: principal, Type: "user"}
	if _, err := s.Store.Txn().Put(store.AccountSettingKey(principal, name), st).Commit(ctx); err != nil {
		return nil, fleet.StoreErr(err)
	}
	return &st, nil
}

func (s *Service) PutAccountSetting(ctx context.Context, req *shapes.PutAccountSettingRequest) (*shapes.PutAccountSettingResponse, error) {
	principal, err := s.principal(ctx, req.PrincipalArn)
	if err != nil {
		return nil, err
	}
	st, err := s.putSetting(ctx, req.Name, req.Value, principal)
	if err != nil {
		return nil, err
	}
	return &shapes.PutAccountSettingResponse{Setting: st}, nil
}

func (s *Service) PutAccountSettingDefault(ctx context.Context, req *shapes.PutAccountSettingDefaultRequest) (*shapes.PutAccountSettingDefaultResponse, error) {
	st, err := s.putSetting(ctx, req.Name, req.Value, s.rootARN())
	if err != nil {
		return nil, err
	}
	return &shapes.PutAccountSettingDefaultResponse{Setting: st}, nil
}

// DeleteAccountSetting removes the principal's own setting; it then
// follows the default again. Deleting one that is not set answers what
// is in effect.
func (s *Service) DeleteAccountSetting(ctx context.Context, req *shapes.DeleteAccountSettingRequest) (*shapes.DeleteAccountSettingResponse, error) {
	if _, err := checkSettingName(req.Name); err != nil {
		return nil, err
	}
	principal, err := s.principal(ctx, req.PrincipalArn)
	if err != nil {
		return nil, err
	}
	key := store.AccountSettingKey(principal, req.Name)
	var out shapes.Setting
	err = fleet.Retry(ctx, func() error {
		it, err := store.Get[shapes.Setting](ctx, s.Store, key)
		if errors.Is(err, store.ErrNotFound) {
			out, err = s.effectiveSetting(ctx, principal, req.Name)
			return err
		}
		if err != nil {
			return err
		}
		out = it.Value
		_, err = s.Store.Txn().Delete(key, it.Rev).Commit(ctx)
		return err
	})
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	return &shapes.DeleteAccountSettingResponse{Setting: &out}, nil
}

// effectiveSetting is what applies to principal for name.
func (s *Service) effectiveSetting(ctx context.Context, principal, name string) (shapes.Setting, error) {
	for _, p := range []string{principal, s.rootARN()} {
		it, err := store.Get[shapes.Setting](ctx, s.Store, store.AccountSettingKey(p, name))
		if err == nil {
			return it.Value, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return shapes.Setting{}, err
		}
	}
	a, _ := settingNamed(name)
	return shapes.Setting{Name: name, Value: a.def, PrincipalArn: principal, Type: "aws_managed"}, nil
}

// ListAccountSettings lists the principal's own settings, or with
// effectiveSettings what applies to it for every name.
func (s *Service) ListAccountSettings(ctx context.Context, req *shapes.ListAccountSettingsRequest) (*shapes.ListAccountSettingsResponse, error) {
	if req.Name != "" {
		if _, err := checkSettingName(req.Name); err != nil {
			return nil, err
		}
	}
	if req.Value != "" && req.Name == "" {
		return nil, fault.Invalid("value", "needs name")
	}
	limit := 10
	if req.MaxResults != nil {
		if *req.MaxResults < 1 || *req.MaxResults > 10 {
			return nil, fault.Invalid("maxResults", "must be between 1 and 10 (got %d)", *req.MaxResults)
		}
		limit = int(*req.MaxResults)
	}
	principal, err := s.principal(ctx, req.PrincipalArn)
	if err != nil {
		return nil, err
	}
	scope := "accountsettings\x00" + principal + "\x00" + req.Name + "\x00" + req.Value + "\x00" + strconv.FormatBool(req.EffectiveSettings != nil && *req.EffectiveSettings)
	p, err := fleet.NewPage(nil, req.NextToken, scope, limit)
	if err != nil {
		return nil, err
	}
	var all []shapes.Setting
	for _, a := range accountSettings {
		if req.Name != "" && a.name != req.Name {
			continue
		}
		var st shapes.Setting
		if req.EffectiveSettings != nil && *req.EffectiveSettings {
			st, err = s.effectiveSetting(ctx, principal, a.name)
			if err != nil {
				return nil, fleet.StoreErr(err)
			}
		} else {
			it, err := store.Get[shapes.Setting](ctx, s.Store, store.AccountSettingKey(principal, a.name))
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, fleet.StoreErr(err)
			}
			st = it.Value
		}
		if req.Value == "" || st.Value == req.Value {
			all = append(all, st)
		}
	}
	// Pages follow the model's order of names; the token is the last name.
	if p.After != "" {
		at := slices.Index(settingNames(), p.After)
		all = slices.DeleteFunc(all, func(x shapes.Setting) bool { return slices.Index(settingNames(), x.Name) <= at })
	}
	out := &shapes.ListAccountSettingsResponse{Settings: []shapes.Setting{}}
	if len(all) > p.Limit {
		all = all[:p.Limit]
		out.NextToken = fleet.NextToken(scope, all[len(all)-1].Name, true)
	}
	out.Settings = append(out.Settings, all...)
	return out, nil
}

// defaultInsights is the containerInsights value a new cluster takes: the
// caller's effective account setting.
func (s *Service) defaultInsights(ctx context.Context) (string, error) {
	caller, _ := api.Caller(ctx)
	st, err := s.effectiveSetting(ctx, s.callerARN(caller), "containerInsights")
	return st.Value, err
}

package testenv

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestPrometheusTargets(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "capstan_test_ok 1")
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	rule := AlertRule{Name: "Labelled", Expr: `capstan_test_ok{instance_id="i-1", job="test"} == 1`}
	p := StartPrometheus(t, PrometheusOptions{Rules: []AlertRule{rule}})
	if s := p.RuleState(t, "Labelled"); s != "inactive" {
		t.Fatalf("before any target: rule is %q", s)
	}
	p.AddTarget(t, addr, map[string]string{"instance_id": "i-1"})
	p.WaitTargetUp(t, addr)
	p.WaitRuleState(t, "Labelled", "firing")

	// A removed target's series go stale, which resolves the alert.
	p.RemoveTarget(t, addr)
	p.WaitRuleState(t, "Labelled", "inactive")

	p.SetRules(t)
	if s := p.RuleState(t, "Labelled"); s != "" {
		t.Errorf("after SetRules(): rule is %q, want none", s)
	}
}

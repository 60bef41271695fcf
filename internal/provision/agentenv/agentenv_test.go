package agentenv

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	ok := map[string]string{"ECS_IMAGE_PULL_BEHAVIOR": "prefer-cached", "ECS_CONTAINER_STOP_TIMEOUT": "45s"}
	if err := Check(ok); err != nil {
		t.Fatalf("good settings refused: %v", err)
	}
	for _, c := range []struct {
		settings map[string]string
		want     []string
	}{
		{map[string]string{"ECS_IMAGE_PULL_BEHAVIOR": "sometimes"}, []string{`ECS_IMAGE_PULL_BEHAVIOR="sometimes": `}},
		{map[string]string{"ECS_CONTAINER_STOP_TIMEOUT": "soon"}, []string{"ECS_CONTAINER_STOP_TIMEOUT"}},
		{map[string]string{"ECS_NO_SUCH_SETTING": "1"}, []string{"ECS_NO_SUCH_SETTING", "does not know"}},
		{map[string]string{"ECS_CLUSTER": "other"}, []string{"ECS_CLUSTER", "sets it for each instance"}},
		{map[string]string{"ECS_DISABLE_PRIVILEGED": "false"}, []string{"ECS_DISABLE_PRIVILEGED"}},
		{map[string]string{"AWS_REGION": "eu-west-1"}, []string{"AWS_REGION", "only ECS_*"}},
		{map[string]string{"ECS_LOGLEVEL": "info\nECS_CLUSTER=x"}, []string{"ECS_LOGLEVEL", "one line"}},
	} {
		err := Check(c.settings)
		if err == nil {
			t.Errorf("%v: accepted", c.settings)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q does not say %q", c.settings, err, w)
			}
		}
		if strings.Contains(err.Error(), "agent.env") {
			t.Errorf("%v: error %q names the check's temporary file", c.settings, err)
		}
	}
}

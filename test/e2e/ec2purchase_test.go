package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	ec2prov "github.com/capstanhq/capstan/internal/provision/ec2"
)

// runInstancesLog passes EC2 calls through to moto and keeps each
// RunInstances request's form: moto ignores a capacity reservation
// preference, so the request is where it shows.
type runInstancesLog struct {
	mu    sync.Mutex
	forms []url.Values
}

func (l *runInstancesLog) proxy(t *testing.T, target string) string {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if form, err := url.ParseQuery(string(body)); err == nil && form.Get("Action") == "RunInstances" {
			l.mu.Lock()
			l.forms = append(l.forms, form)
			l.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// forProvider is the RunInstances requests tagging the capacity provider.
func (l *runInstancesLog) forProvider(cp string) []url.Values {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []url.Values
	for _, f := range l.forms {
		for i := 1; i <= 10; i++ {
			if f.Get("TagSpecification.1.Tag."+strconv.Itoa(i)+".Key") == ec2prov.TagCapacityProvider && f.Get("TagSpecification.1.Tag."+strconv.Itoa(i)+".Value") == cp {
				out = append(out, f)
			}
		}
	}
	return out
}

// TestEC2PurchaseOptions: a SPOT capacity provider launches spot
// instances (moto records the lifecycle), a reservation preference
// reaches RunInstances, and the capacity provider's agent settings
// (capstan:agent-env: tags) are in the user data over the server's
// --agent-env, so the booted agent runs with them.
func TestEC2PurchaseOptions(t *testing.T) {
	ctx := context.Background()
	m := newMotoAccount(t, "capstan-purchase")
	motoURL, ec := m.url, m.ec
	log := &runInstancesLog{}
	endpoint := log.proxy(t, motoURL)
	boots := newMachines(t, ec)
	p := startEC2Server(t, freeAddr(t), "--data-dir", t.TempDir(), "--provisioner", "ec2", "--ec2-endpoint", endpoint,
		"--ec2-image-id", m.image, "--agent-env", "ECS_IMAGE_PULL_BEHAVIOR=always", "--agent-env", "ECS_CONTAINER_STOP_TIMEOUT=40s")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", p.log)
		}
	})
	f := &fleet{t: t, c: p.client(), image: "busybox:sim", cluster: "purchase"}
	if _, err := f.c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String(f.cluster)}); err != nil {
		t.Fatal(err)
	}
	provider := func(name string, lt types.InstanceLaunchTemplate, tags ...types.Tag) {
		lt.Ec2InstanceProfileArn = aws.String(m.profile)
		lt.NetworkConfiguration = &types.ManagedInstancesNetworkConfiguration{Subnets: []string{aws.ToString(m.subnet.SubnetId)}}
		lt.InstanceRequirements = &types.InstanceRequirementsRequest{VCpuCount: &types.VCpuCountRangeRequest{Min: aws.Int32(2), Max: aws.Int32(2)},
			MemoryMiB: &types.MemoryMiBRequest{Min: aws.Int32(4096), Max: aws.Int32(4096)}, AllowedInstanceTypes: []string{"c5.large"}}
		if _, err := f.c.CreateCapacityProvider(ctx, &ecs.CreateCapacityProviderInput{Name: aws.String(name), Cluster: aws.String(f.cluster), Tags: tags,
			ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
				InfrastructureRoleArn: aws.String("arn:aws:iam::123456789012:role/capstan"), InstanceLaunchTemplate: &lt}}); err != nil {
			t.Fatal(err)
		}
	}
	provider("spot", types.InstanceLaunchTemplate{CapacityOptionType: types.CapacityOptionTypeSpot},
		types.Tag{Key: aws.String("capstan:agent-env:ECS_IMAGE_PULL_BEHAVIOR"), Value: aws.String("prefer-cached")})
	provider("reserved", types.InstanceLaunchTemplate{CapacityOptionType: types.CapacityOptionTypeOnDemand,
		CapacityReservations: &types.CapacityReservationRequest{ReservationPreference: types.CapacityReservationPreferenceReservationsExcluded}})
	td := f.register("job", f.container("job", "sleep", "3600"))
	for _, cp := range []string{"spot", "reserved"} {
		if _, err := f.c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String(f.cluster), TaskDefinition: aws.String(td),
			CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String(cp)}}}); err != nil {
			t.Fatal(err)
		}
	}
	byProvider := map[string]ec2types.Instance{}
	eventually(t, 90*time.Second, "an EC2 instance for each capacity provider", func() bool {
		for _, in := range instancesWith(t, ec, ec2prov.TagCapacityProvider) {
			byProvider[tagsOf(in)[ec2prov.TagCapacityProvider]] = in
		}
		return len(byProvider) == 2
	})
	spot, reserved := byProvider["spot"], byProvider["reserved"]
	if spot.InstanceLifecycle != ec2types.InstanceLifecycleTypeSpot {
		t.Errorf("spot capacity provider's instance lifecycle %q, want spot", spot.InstanceLifecycle)
	}
	if reserved.InstanceLifecycle == ec2types.InstanceLifecycleTypeSpot {
		t.Error("on-demand capacity provider launched a spot instance")
	}
	if rs := log.forProvider("reserved"); len(rs) == 0 || rs[0].Get("CapacityReservationSpecification.CapacityReservationPreference") != "none" ||
		rs[0].Get("InstanceMarketOptions.MarketType") != "" {
		t.Errorf("reserved's RunInstances: %v", rs)
	}
	if ss := log.forProvider("spot"); len(ss) == 0 || ss[0].Get("InstanceMarketOptions.MarketType") != "spot" ||
		ss[0].Get("InstanceMarketOptions.SpotOptions.SpotInstanceType") != "one-time" {
		t.Errorf("spot's RunInstances: %v", ss)
	}
	// The booted machine's agent: the provider's setting over the
	// server's, the server's where the provider has none.
	want := map[string]map[string]string{
		"spot":     {"ECS_IMAGE_PULL_BEHAVIOR": "prefer-cached", "ECS_CONTAINER_STOP_TIMEOUT": "40s", "ECS_DISABLE_PRIVILEGED": "true"},
		"reserved": {"ECS_IMAGE_PULL_BEHAVIOR": "always", "ECS_CONTAINER_STOP_TIMEOUT": "40s"},
	}
	for cp, in := range byProvider {
		id := aws.ToString(in.InstanceId)
		var env map[string]string
		eventually(t, 30*time.Second, "the "+cp+" instance booted", func() bool {
			env, _ = boots.prov.Env(id)
			return env != nil
		})
		for k, v := range want[cp] {
			if env[k] != v {
				t.Errorf("%s instance's agent: %s=%q, want %q", cp, k, env[k], v)
			}
		}
	}
}

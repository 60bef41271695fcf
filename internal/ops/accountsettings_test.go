package ops_test

import (
	"context"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/iam"
	"github.com/capstanhq/capstan/internal/testenv"
)

const rootARN = "arn:aws:iam::123456789012:root"

// userClient is an ECS client for a new IAM user allowed ecs:*.
func userClient(t *testing.T, srv *testenv.Server, name string) *ecs.Client {
	t.Helper()
	ctx := context.Background()
	ids := iam.NewStore(srv.Store, srv.Config.AccountID)
	if _, err := ids.CreateUser(ctx, name, "/", nil); err != nil {
		t.Fatal(err)
	}
	key, err := ids.CreateAccessKey(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := ids.PutUserPolicy(ctx, name, "ecs", `{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"ecs:*","Resource":"*"}}`); err != nil {
		t.Fatal(err)
	}
	return srv.ECSWith(key.AccessKeyID, key.SecretAccessKey)
}

// settingsOf is "name=value/type" for each setting, following pages.
func settingsOf(t *testing.T, c *ecs.Client, in *ecs.ListAccountSettingsInput) []string {
	t.Helper()
	var out []string
	p := ecs.NewListAccountSettingsPaginator(c, in)
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range page.Settings {
			out = append(out, string(s.Name)+"="+aws.ToString(s.Value)+"/"+string(s.Type))
		}
	}
	return out
}

func TestAccountSettingsEffectivePerPrincipal(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	root := srv.ECS()
	alice := userClient(t, srv, "alice")
	aliceARN := "arn:aws:iam::123456789012:user/alice"

	// Nothing set: the effective values are ECS's defaults, AWS-managed.
	eff := settingsOf(t, alice, &ecs.ListAccountSettingsInput{EffectiveSettings: true, MaxResults: 3})
	if len(eff) != 11 || !slices.Contains(eff, "containerInsights=disabled/aws_managed") || !slices.Contains(eff, "taskLongArnFormat=enabled/aws_managed") {
		t.Fatalf("effective defaults over pages of 3: %v", eff)
	}
	if got := settingsOf(t, alice, &ecs.ListAccountSettingsInput{}); len(got) != 0 {
		t.Fatalf("alice set nothing, yet lists %v", got)
	}

	// The account default applies to alice until she sets her own.
	d, err := root.PutAccountSettingDefault(ctx, &ecs.PutAccountSettingDefaultInput{Name: types.SettingNameContainerInsights, Value: aws.String("enhanced")})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(d.Setting.PrincipalArn) != rootARN || d.Setting.Type != types.SettingTypeUser {
		t.Fatalf("default answered %+v", d.Setting)
	}
	if got := settingsOf(t, alice, &ecs.ListAccountSettingsInput{EffectiveSettings: true, Name: types.SettingNameContainerInsights}); !slices.Equal(got, []string{"containerInsights=enhanced/user"}) {
		t.Fatalf("alice's effective containerInsights after the default: %v", got)
	}
	p, err := alice.PutAccountSetting(ctx, &ecs.PutAccountSettingInput{Name: types.SettingNameContainerInsights, Value: aws.String("disabled")})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(p.Setting.PrincipalArn) != aliceARN {
		t.Fatalf("alice's setting is for %s", aws.ToString(p.Setting.PrincipalArn))
	}
	if got := settingsOf(t, alice, &ecs.ListAccountSettingsInput{EffectiveSettings: true, Name: types.SettingNameContainerInsights}); !slices.Equal(got, []string{"containerInsights=disabled/user"}) {
		t.Fatalf("alice's own setting does not win: %v", got)
	}
	if got := settingsOf(t, root, &ecs.ListAccountSettingsInput{EffectiveSettings: true, Name: types.SettingNameContainerInsights}); !slices.Equal(got, []string{"containerInsights=enhanced/user"}) {
		t.Fatalf("the root's: %v", got)
	}
	// The root reads and filters alice's by principalArn and value.
	if got := settingsOf(t, root, &ecs.ListAccountSettingsInput{PrincipalArn: aws.String(aliceARN), Name: types.SettingNameContainerInsights, Value: aws.String("disabled")}); len(got) != 1 {
		t.Fatalf("root listing alice's: %v", got)
	}
	// Deleting hers brings the default back.
	if _, err := alice.DeleteAccountSetting(ctx, &ecs.DeleteAccountSettingInput{Name: types.SettingNameContainerInsights}); err != nil {
		t.Fatal(err)
	}
	if got := settingsOf(t, alice, &ecs.ListAccountSettingsInput{EffectiveSettings: true, Name: types.SettingNameContainerInsights}); !slices.Equal(got, []string{"containerInsights=enhanced/user"}) {
		t.Fatalf("after delete: %v", got)
	}

	// Bad input, each naming its field; alice cannot speak for others.
	_, err = alice.PutAccountSetting(ctx, &ecs.PutAccountSettingInput{Name: types.SettingNameContainerInsights, Value: aws.String("on")})
	wantECSError(t, err, "InvalidParameterException", "value", "containerInsights")
	_, err = alice.PutAccountSetting(ctx, &ecs.PutAccountSettingInput{Name: "noSuchSetting", Value: aws.String("enabled")})
	wantECSError(t, err, "InvalidParameterException", "name")
	_, err = alice.PutAccountSetting(ctx, &ecs.PutAccountSettingInput{Name: types.SettingNameGuardDutyActivate, Value: aws.String("on")})
	wantECSError(t, err, "InvalidParameterException", "read-only")
	_, err = alice.PutAccountSetting(ctx, &ecs.PutAccountSettingInput{Name: types.SettingNameFargateTaskRetirementWaitPeriod, Value: aws.String("14")})
	wantECSError(t, err, "InvalidParameterException", "root")
	_, err = alice.PutAccountSetting(ctx, &ecs.PutAccountSettingInput{Name: types.SettingNameContainerInsights, Value: aws.String("enabled"), PrincipalArn: aws.String(rootARN)})
	wantECSError(t, err, "AccessDeniedException")
	_, err = root.PutAccountSetting(ctx, &ecs.PutAccountSettingInput{Name: types.SettingNameContainerInsights, Value: aws.String("enabled"), PrincipalArn: aws.String("arn:aws:iam::999999999999:user/x")})
	wantECSError(t, err, "InvalidParameterException", "principalArn")
	_, err = root.ListAccountSettings(ctx, &ecs.ListAccountSettingsInput{Value: aws.String("enabled")})
	wantECSError(t, err, "InvalidParameterException", "value")
	_, err = root.ListAccountSettings(ctx, &ecs.ListAccountSettingsInput{MaxResults: 11})
	wantECSError(t, err, "InvalidParameterException", "maxResults")
	if got := settingsOf(t, alice, &ecs.ListAccountSettingsInput{}); len(got) != 0 {
		t.Fatalf("refused calls left %v", got)
	}
	// The root's fargateTaskRetirementWaitPeriod is accepted.
	if _, err := root.PutAccountSetting(ctx, &ecs.PutAccountSettingInput{Name: types.SettingNameFargateTaskRetirementWaitPeriod, Value: aws.String("14")}); err != nil {
		t.Fatal(err)
	}
}

func TestUpdateClusterSettings(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("u")}); err != nil {
		t.Fatal(err)
	}
	out, err := c.UpdateClusterSettings(ctx, &ecs.UpdateClusterSettingsInput{Cluster: aws.String("u"),
		Settings: []types.ClusterSetting{{Name: types.ClusterSettingNameContainerInsights, Value: aws.String("enhanced")}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Cluster.Settings) != 1 || aws.ToString(out.Cluster.Settings[0].Value) != "enhanced" {
		t.Fatalf("answered settings %+v", out.Cluster.Settings)
	}
	u, err := c.UpdateCluster(ctx, &ecs.UpdateClusterInput{Cluster: aws.String("u"),
		Configuration: &types.ClusterConfiguration{ExecuteCommandConfiguration: &types.ExecuteCommandConfiguration{Logging: types.ExecuteCommandLoggingNone}}})
	if err != nil {
		t.Fatal(err)
	}
	if u.Cluster.Configuration == nil || u.Cluster.Configuration.ExecuteCommandConfiguration.Logging != types.ExecuteCommandLoggingNone ||
		aws.ToString(u.Cluster.Settings[0].Value) != "enhanced" {
		t.Fatalf("UpdateCluster answered %+v", u.Cluster)
	}
	d, err := c.DescribeClusters(ctx, &ecs.DescribeClustersInput{Clusters: []string{"u"}, Include: []types.ClusterField{types.ClusterFieldSettings}})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(d.Clusters[0].Settings[0].Value) != "enhanced" {
		t.Fatalf("described settings %+v", d.Clusters[0].Settings)
	}
	_, err = c.UpdateClusterSettings(ctx, &ecs.UpdateClusterSettingsInput{Cluster: aws.String("u"),
		Settings: []types.ClusterSetting{{Name: types.ClusterSettingNameContainerInsights, Value: aws.String("maybe")}}})
	wantECSError(t, err, "InvalidParameterException", "settings[0].value")
	_, err = c.UpdateCluster(ctx, &ecs.UpdateClusterInput{Cluster: aws.String("u"),
		Settings: []types.ClusterSetting{{Name: "other", Value: aws.String("enabled")}}})
	wantECSError(t, err, "InvalidParameterException", "settings[0].name")
	_, err = c.UpdateClusterSettings(ctx, &ecs.UpdateClusterSettingsInput{Cluster: aws.String("nope"),
		Settings: []types.ClusterSetting{{Name: types.ClusterSettingNameContainerInsights, Value: aws.String("enabled")}}})
	wantECSError(t, err, "ClusterNotFoundException")
}

// A cluster created without settings takes the caller's containerInsights
// account setting, as on ECS.
func TestNewClustersFollowContainerInsightsSetting(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()
	insightsOf := func(name string) string {
		t.Helper()
		out, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range out.Cluster.Settings {
			if s.Name == types.ClusterSettingNameContainerInsights {
				return aws.ToString(s.Value)
			}
		}
		t.Fatalf("cluster %s has no containerInsights setting: %+v", name, out.Cluster.Settings)
		return ""
	}
	if got := insightsOf("before"); got != "disabled" {
		t.Fatalf("with no account setting: %s", got)
	}
	if _, err := c.PutAccountSettingDefault(ctx, &ecs.PutAccountSettingDefaultInput{Name: types.SettingNameContainerInsights, Value: aws.String("enhanced")}); err != nil {
		t.Fatal(err)
	}
	if got := insightsOf("after"); got != "enhanced" {
		t.Fatalf("with the default enhanced: %s", got)
	}
}

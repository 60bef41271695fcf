package ops

// Sample requests for the rows of authzmore.go.
func init() {
	authSamples["PutAttributes"] = `{"cluster":"prod","attributes":[{"name":"k","value":"v","targetId":"` + taskA + `"}]}`
	authSamples["DeleteAttributes"] = `{"cluster":"prod","attributes":[{"name":"k","targetId":"` + taskA + `"}]}`
	authSamples["ListAttributes"] = `{"cluster":"prod","targetType":"container-instance"}`
	authSamples["PutAccountSetting"] = `{"name":"containerInsights","value":"enabled"}`
	authSamples["PutAccountSettingDefault"] = `{"name":"containerInsights","value":"enabled"}`
	authSamples["DeleteAccountSetting"] = `{"name":"containerInsights"}`
	authSamples["ListAccountSettings"] = `{}`
	authSamples["UpdateCluster"] = `{"cluster":"prod","settings":[{"name":"containerInsights","value":"enabled"}]}`
	authSamples["GetTaskProtection"] = `{"cluster":"prod","tasks":["` + taskA + `"]}`
	authSamples["UpdateTaskProtection"] = `{"cluster":"prod","tasks":["` + taskA + `"],"protectionEnabled":true}`
	authSamples["ListServiceDeployments"] = `{"cluster":"prod","service":"api"}`
	authSamples["DescribeServiceDeployments"] = `{"serviceDeploymentArns":["` + arnBase + `service-deployment/prod/api/1"]}`
	authSamples["DescribeServiceRevisions"] = `{"serviceRevisionArns":["` + arnBase + `service-revision/prod/api/1"]}`
	authSamples["StopServiceDeployment"] = `{"serviceDeploymentArn":"` + arnBase + `service-deployment/prod/api/1"}`
	authSamples["UpdateClusterSettings"] = `{"cluster":"prod","settings":[{"name":"containerInsights","value":"enabled"}]}`
}

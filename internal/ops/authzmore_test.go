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
	for _, op := range []string{"CreateTaskSet", "DeleteTaskSet", "DescribeTaskSets", "UpdateTaskSet", "UpdateServicePrimaryTaskSet"} {
		authSamples[op] = `{"cluster":"prod","service":"api","taskDefinition":"web","taskSet":"ts","primaryTaskSet":"ts"}`
	}
	authSamples["ContinueServiceDeployment"] = `{"serviceDeploymentArn":"` + arnBase + `service-deployment/prod/api/1","hookId":"h"}`
	authSamples["ExecuteCommand"] = `{"cluster":"prod","task":"` + taskA + `","command":"sh","interactive":true}`
	authSamples["ListServicesByNamespace"] = `{"namespace":"ns"}`
	authSamples["SubmitTaskStateChange"] = `{"cluster":"prod"}`
	authSamples["SubmitContainerStateChange"] = `{"cluster":"prod"}`
	authSamples["SubmitAttachmentStateChanges"] = `{"cluster":"prod","attachments":[]}`
	authSamples["UpdateContainerAgent"] = `{"cluster":"prod","containerInstance":"` + taskA + `"}`
	authSamples["CreateExpressGatewayService"] = `{}`
	authSamples["DescribeExpressGatewayService"] = `{"serviceArn":"` + arnBase + `service/prod/api"}`
	authSamples["UpdateExpressGatewayService"] = `{"serviceArn":"` + arnBase + `service/prod/api"}`
	authSamples["DeleteExpressGatewayService"] = `{"serviceArn":"` + arnBase + `service/prod/api"}`
	authSamples["UpdateClusterSettings"] = `{"cluster":"prod","settings":[{"name":"containerInsights","value":"enabled"}]}`
}

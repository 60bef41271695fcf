package ops

import (
	"maps"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

// Rows for the operations added for ECS fidelity (issue 47), kept apart
// from authztable.go's literal so that both can change at once; init
// merges them into authTable.
func init() { maps.Copy(authTable, authTableMore) }

// Texts of the resources column for these rows.
const resInstances = "each container instance named"

var authTableMore = map[string]authSpec{
	// Attributes: the reference checks Put and Delete against the
	// container instances, List against the cluster.
	"PutAttributes": authOp("ecs:PutAttributes", resInstances, nil, keys(condCluster),
		func(b *authBuild, r *shapes.PutAttributesRequest) error {
			return b.attributeTargets(r.Cluster, r.Attributes)
		}),
	"DeleteAttributes": authOp("ecs:DeleteAttributes", resInstances, nil, keys(condCluster),
		func(b *authBuild, r *shapes.DeleteAttributesRequest) error {
			return b.attributeTargets(r.Cluster, r.Attributes)
		}),
	"ListAttributes": authOp("ecs:ListAttributes", resCluster, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.ListAttributesRequest) error {
			_, _, err := b.cluster("cluster", r.Cluster)
			return err
		}),

	// Account settings: the reference lists no resource type.
	"PutAccountSetting": authOp("ecs:PutAccountSetting", resAll, nil, nil,
		func(*authBuild, *shapes.PutAccountSettingRequest) error { return nil }),
	"PutAccountSettingDefault": authOp("ecs:PutAccountSettingDefault", resAll, nil, nil,
		func(*authBuild, *shapes.PutAccountSettingDefaultRequest) error { return nil }),
	"DeleteAccountSetting": authOp("ecs:DeleteAccountSetting", resAll, nil, nil,
		func(*authBuild, *shapes.DeleteAccountSettingRequest) error { return nil }),
	"ListAccountSettings": authOp("ecs:ListAccountSettings", resAll, nil, nil,
		func(*authBuild, *shapes.ListAccountSettingsRequest) error { return nil }),

	// Cluster updates.
	"UpdateCluster": authOp("ecs:UpdateCluster", resCluster, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.UpdateClusterRequest) error {
			_, _, err := b.cluster("cluster", r.Cluster)
			return err
		}),
	"UpdateClusterSettings": authOp("ecs:UpdateClusterSettings", resCluster, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.UpdateClusterSettingsRequest) error {
			_, _, err := b.cluster("cluster", r.Cluster)
			return err
		}),

	// Task protection, checked against each task named.
	"GetTaskProtection": authOp("ecs:GetTaskProtection", "each task named", keys(condCluster), nil,
		func(b *authBuild, r *shapes.GetTaskProtectionRequest) error {
			_, err := b.inCluster("tasks", r.Cluster, r.Tasks, b.s.TaskID, b.s.ARNs.Task)
			return err
		}),
	"UpdateTaskProtection": authOp("ecs:UpdateTaskProtection", "each task named", keys(condCluster), nil,
		func(b *authBuild, r *shapes.UpdateTaskProtectionRequest) error {
			_, err := b.inCluster("tasks", r.Cluster, r.Tasks, b.s.TaskID, b.s.ARNs.Task)
			return err
		}),

	// Service deployments and revisions: List is checked against the
	// service, the others against the deployments or revisions named.
	"ListServiceDeployments": authOp("ecs:ListServiceDeployments", resService, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.ListServiceDeploymentsRequest) error {
			_, _, err := b.service(r.Cluster, "service", r.Service)
			return err
		}),
	"DescribeServiceDeployments": authOp("ecs:DescribeServiceDeployments", "each service deployment named", nil, keys(condCluster),
		func(b *authBuild, r *shapes.DescribeServiceDeploymentsRequest) error {
			return b.deploymentArns("serviceDeploymentArns", "service-deployment", r.ServiceDeploymentArns)
		}),
	"DescribeServiceRevisions": authOp("ecs:DescribeServiceRevisions", "each service revision named", nil, keys(condCluster),
		func(b *authBuild, r *shapes.DescribeServiceRevisionsRequest) error {
			return b.deploymentArns("serviceRevisionArns", "service-revision", r.ServiceRevisionArns)
		}),
	"StopServiceDeployment": authOp("ecs:StopServiceDeployment", "service deployment", nil, keys(condCluster),
		func(b *authBuild, r *shapes.StopServiceDeploymentRequest) error {
			return b.deploymentArns("serviceDeploymentArn", "service-deployment", []string{r.ServiceDeploymentArn})
		}),

	// Operations answered as ECS does without the feature (unavailable.go),
	// still authorized as ECS authorizes them.
	"CreateTaskSet": authOp("ecs:CreateTaskSet", resService, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.CreateTaskSetRequest) error {
			return b.taskSetService(r.Cluster, r.Service)
		}),
	"DeleteTaskSet": authOp("ecs:DeleteTaskSet", resService, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.DeleteTaskSetRequest) error {
			return b.taskSetService(r.Cluster, r.Service)
		}),
	"DescribeTaskSets": authOp("ecs:DescribeTaskSets", resService, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.DescribeTaskSetsRequest) error {
			return b.taskSetService(r.Cluster, r.Service)
		}),
	"UpdateTaskSet": authOp("ecs:UpdateTaskSet", resService, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.UpdateTaskSetRequest) error {
			return b.taskSetService(r.Cluster, r.Service)
		}),
	"UpdateServicePrimaryTaskSet": authOp("ecs:UpdateServicePrimaryTaskSet", resService, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.UpdateServicePrimaryTaskSetRequest) error {
			return b.taskSetService(r.Cluster, r.Service)
		}),
	"ContinueServiceDeployment": authOp("ecs:ContinueServiceDeployment", "service deployment", nil, keys(condCluster),
		func(b *authBuild, r *shapes.ContinueServiceDeploymentRequest) error {
			return b.deploymentArns("serviceDeploymentArn", "service-deployment", []string{r.ServiceDeploymentArn})
		}),
	"ExecuteCommand": authOp("ecs:ExecuteCommand", "task", keys(condCluster, condContainerName), nil,
		func(b *authBuild, r *shapes.ExecuteCommandRequest) error {
			arns, err := b.inCluster("task", r.Cluster, []string{r.Task}, b.s.TaskID, b.s.ARNs.Task)
			if err != nil {
				return err
			}
			return b.execContainer(arns[0], r.Container)
		}),
	"ListServicesByNamespace": authOp("ecs:ListServicesByNamespace", resAll, nil, nil,
		func(*authBuild, *shapes.ListServicesByNamespaceRequest) error { return nil }),
	"SubmitTaskStateChange": authOp("ecs:SubmitTaskStateChange", resCluster, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.SubmitTaskStateChangeRequest) error {
			_, _, err := b.cluster("cluster", r.Cluster)
			return err
		}),
	"SubmitContainerStateChange": authOp("ecs:SubmitContainerStateChange", resCluster, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.SubmitContainerStateChangeRequest) error {
			_, _, err := b.cluster("cluster", r.Cluster)
			return err
		}),
	"SubmitAttachmentStateChanges": authOp("ecs:SubmitAttachmentStateChanges", resCluster, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.SubmitAttachmentStateChangesRequest) error {
			_, _, err := b.cluster("cluster", r.Cluster)
			return err
		}),
	"UpdateContainerAgent": authOp("ecs:UpdateContainerAgent", "container instance", keys(condCluster), nil,
		func(b *authBuild, r *shapes.UpdateContainerAgentRequest) error {
			_, err := b.inCluster("containerInstance", r.Cluster, []string{r.ContainerInstance}, b.s.InstanceID, b.s.ARNs.ContainerInstance)
			return err
		}),
	"CreateExpressGatewayService": authOp("ecs:CreateExpressGatewayService", resAll, nil, nil,
		func(*authBuild, *shapes.CreateExpressGatewayServiceRequest) error { return nil }),
	"DescribeExpressGatewayService": authOp("ecs:DescribeExpressGatewayService", "the service named", nil, nil,
		func(b *authBuild, r *shapes.DescribeExpressGatewayServiceRequest) error {
			b.resource(r.ServiceArn, nil)
			return nil
		}),
	"UpdateExpressGatewayService": authOp("ecs:UpdateExpressGatewayService", "the service named", nil, nil,
		func(b *authBuild, r *shapes.UpdateExpressGatewayServiceRequest) error {
			b.resource(r.ServiceArn, nil)
			return nil
		}),
	"DeleteExpressGatewayService": authOp("ecs:DeleteExpressGatewayService", "the service named", nil, nil,
		func(b *authBuild, r *shapes.DeleteExpressGatewayServiceRequest) error {
			b.resource(r.ServiceArn, nil)
			return nil
		}),
}

// taskSetService adds the service a task set call names.
func (b *authBuild) taskSetService(cluster, service string) error {
	_, _, err := b.service(cluster, "service", service)
	return err
}

// deploymentArns adds service deployment or revision ARNs, each with its
// cluster.
func (b *authBuild) deploymentArns(field, typ string, arns []string) error {
	for i, arn := range arns {
		cluster, _, _, err := b.s.deploymentRef(fieldIndex(field, i), typ, arn)
		if err != nil {
			return err
		}
		b.resource(arn, map[string][]string{condCluster: {b.s.ARNs.Cluster(cluster)}})
	}
	return nil
}

// attributeTargets adds each attribute's target instance.
func (b *authBuild) attributeTargets(cluster string, attrs []shapes.Attribute) error {
	refs := make([]string, len(attrs))
	for i, a := range attrs {
		refs[i] = a.TargetId
	}
	_, err := b.inCluster("attributes", cluster, refs, b.s.InstanceID, b.s.ARNs.ContainerInstance)
	return err
}

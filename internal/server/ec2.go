package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/capstanhq/capstan/internal/fleet"
	ec2prov "github.com/capstanhq/capstan/internal/provision/ec2"
)

// EC2Config is the ec2 provisioner's part of the configuration.
type EC2Config struct {
	// Endpoint replaces the EC2 API's URL (e.g. a moto server); "" for
	// the region's.
	Endpoint string
	// ImageID is the AMI managed instances boot.
	ImageID string
	// AgentURL is where their boot script fetches the agent's .deb when
	// the image lacks it.
	AgentURL string
}

// newEC2Provisioner builds the ec2 provisioner with credentials and region
// from the standard AWS configuration chain (environment, shared files,
// instance role).
func newEC2Provisioner(ctx context.Context, cfg Config, svc *fleet.State) (*ec2prov.Provisioner, error) {
	ac, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("ec2 provisioner: AWS configuration: %w", err)
	}
	if ac.Region == "" {
		return nil, errors.New("ec2 provisioner: no AWS region: set AWS_REGION or a profile's region")
	}
	client := ec2.NewFromConfig(ac, func(o *ec2.Options) {
		if cfg.EC2.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.EC2.Endpoint)
		}
	})
	return ec2prov.New(ctx, ec2prov.Config{Client: client, ImageID: cfg.EC2.ImageID, AgentURL: cfg.EC2.AgentURL, Fleet: svc, Log: cfg.Log})
}

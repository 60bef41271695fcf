package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/smithy-go"

	"github.com/capstanhq/capstan/internal/testenv"
)

// Through the server's connection tracking, a signed body over 1 MiB (left
// unread, the connection closed after the answer) still gets ECS's error
// at the SDK.
func TestTooLargeBodyAnsweredThroughLimits(t *testing.T) {
	s := testenv.StartServerWith(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	big := strings.Repeat("x", 2<<20)
	_, err := s.ECS().RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("big"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("c"), Image: aws.String("busybox"), Memory: aws.Int32(64),
			Environment: []types.KeyValuePair{{Name: aws.String("BIG"), Value: aws.String(big)}}}}})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "ClientException" || !strings.Contains(ae.ErrorMessage(), "Max allowed length is '65536' bytes.") {
		t.Fatalf("a 2 MiB task definition: %v", err)
	}
}

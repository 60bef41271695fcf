package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

// An awsvpc task's network attachment, as ECS shows an ENI. Capstan has no
// ENI: the task's holder container has an address on the instance's task
// network, and the names below are derived from the task ARN, so the
// server (which lists the attachment when it creates the task) and the
// agent (which fills in the address) agree without talking.
const (
	AttachmentType = "ElasticNetworkInterface"

	AttachmentPrecreated = "PRECREATED" // the task is created, no address yet
	AttachmentAttached   = "ATTACHED"   // the holder runs with its address
	AttachmentDeleted    = "DELETED"    // the holder is removed

	DetailSubnetID    = "subnetId"
	DetailInterfaceID = "networkInterfaceId"
	DetailMAC         = "macAddress"
	DetailAddress     = "privateIPv4Address"
	DetailDNSName     = "privateDnsName"
)

func digest(taskArn string) string {
	h := sha256.Sum256([]byte(taskArn))
	return hex.EncodeToString(h[:])
}

// AttachmentID is the attachment's ID, in the form of a UUID.
func AttachmentID(taskArn string) string {
	d := digest("attachment:" + taskArn)
	return d[0:8] + "-" + d[8:12] + "-" + d[12:16] + "-" + d[16:20] + "-" + d[20:32]
}

// InterfaceID is the networkInterfaceId shown for the task.
func InterfaceID(taskArn string) string { return "eni-" + digest("interface:" + taskArn)[:17] }

// DNSName is the privateDnsName shown for an address (a name in ECS's
// pattern; nothing resolves it).
func DNSName(addr string) string { return "ip-" + strings.ReplaceAll(addr, ".", "-") }

// Attachment is the attachment of an awsvpc task in the given status; addr
// and mac may be empty.
func Attachment(taskArn, status, addr, mac string) shapes.Attachment {
	a := shapes.Attachment{Id: AttachmentID(taskArn), Type: AttachmentType, Status: status}
	a.Details = append(a.Details, shapes.KeyValuePair{Name: DetailInterfaceID, Value: InterfaceID(taskArn)})
	if mac != "" {
		a.Details = append(a.Details, shapes.KeyValuePair{Name: DetailMAC, Value: mac})
	}
	if addr != "" {
		a.Details = append(a.Details,
			shapes.KeyValuePair{Name: DetailDNSName, Value: DNSName(addr)},
			shapes.KeyValuePair{Name: DetailAddress, Value: addr})
	}
	return a
}

// Detail is the value of a detail of a, "" when absent.
func Detail(a shapes.Attachment, name string) string {
	for _, kv := range a.Details {
		if kv.Name == name {
			return kv.Value
		}
	}
	return ""
}

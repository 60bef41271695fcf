// Package audit is the audit trail: every API call, allowed or denied, kept
// as a record in CloudTrail's shape for a retention period. The API hands
// each answered call to Trail.Record, which never waits; a writer batches
// the records into pages in the store, and agents' routine calls become one
// summary per credential, operation and minute. Trail.List reads them back
// filtered, and can wait for new ones.
package audit

import (
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/auth"
)

// EventType is every record's eventType: each is one API call (or a
// summary of several).
const EventType = "AwsApiCall"

// Event sources, by the service a call was made to.
const (
	SourceECS = "ecs.amazonaws.com"
	SourceIAM = "iam.amazonaws.com"
	SourceSTS = "sts.amazonaws.com"
)

// Identity types of userIdentity.type.
const (
	Root    = "Root"
	IAMUser = "IAMUser"
	Agent   = "Agent"   // an instance agent's credential
	Unknown = "Unknown" // the signature did not authenticate anyone
)

// Event is one record, as stored and as ListAuditEvents returns it. The
// member names are CloudTrail's, so tools that read CloudTrail records read
// these.
type Event struct {
	EventTime       time.Time    `json:"eventTime"`
	EventSource     string       `json:"eventSource"`
	EventName       string       `json:"eventName"`
	AwsRegion       string       `json:"awsRegion"`
	SourceIPAddress string       `json:"sourceIPAddress"`
	UserAgent       string       `json:"userAgent"`
	UserIdentity    UserIdentity `json:"userIdentity"`
	Resources       []Resource   `json:"resources,omitempty"`
	ReadOnly        bool         `json:"readOnly"`
	ErrorCode       string       `json:"errorCode,omitempty"`
	ErrorMessage    string       `json:"errorMessage,omitempty"`
	RequestID       string       `json:"requestID,omitempty"`
	EventID         string       `json:"eventID"`
	EventType       string       `json:"eventType"`
	// RecipientAccountID is the account whose API was called.
	RecipientAccountID string `json:"recipientAccountId"`
	// AdditionalEventData is set on a summary of an agent's calls.
	AdditionalEventData *Summary `json:"additionalEventData,omitempty"`
	// ServiceEventDetails is set on an exec session's record.
	ServiceEventDetails *ExecSession `json:"serviceEventDetails,omitempty"`
}

// UserIdentity is who made the call.
type UserIdentity struct {
	Type string `json:"type"`
	// PrincipalID is the account for the root, the instance for an agent
	// (when its credential names one).
	PrincipalID string `json:"principalId,omitempty"`
	ARN         string `json:"arn,omitempty"`
	AccountID   string `json:"accountId,omitempty"`
	// AccessKeyID is the signing key, also the one a refused signature
	// claimed.
	AccessKeyID string `json:"accessKeyId,omitempty"`
	UserName    string `json:"userName,omitempty"`
}

// Resource is a resource the call was authorized against.
type Resource struct {
	ARN       string `json:"ARN"`
	AccountID string `json:"accountId,omitempty"`
}

// Summary stands for an agent's calls of one operation in one minute: the
// record's eventTime is the first. Failed calls are counted here and also
// recorded one by one; a minute of failures only has no summary.
type Summary struct {
	CallCount      int       `json:"callCount"`
	ErrorCount     int       `json:"errorCount"`
	FirstEventTime time.Time `json:"firstEventTime"`
	LastEventTime  time.Time `json:"lastEventTime"`
}

// Bounds on what a record keeps of client-supplied text.
const (
	maxName      = 128
	maxUserAgent = 1024
	maxMessage   = 1024
	maxResources = 20
)

// stsOperations and iamOperations name the IAM and STS calls, for records
// whose call never reached authorization (a bad signature) and so has no
// action to tell the service by.
var (
	stsOperations = set("GetCallerIdentity", "GetSessionToken", "AssumeRole")
	iamOperations = set("CreateUser", "GetUser", "ListUsers", "DeleteUser", "TagUser", "UntagUser", "ListUserTags",
		"CreateAccessKey", "ListAccessKeys", "UpdateAccessKey", "DeleteAccessKey",
		"CreateGroup", "GetGroup", "ListGroups", "DeleteGroup", "AddUserToGroup", "RemoveUserFromGroup", "ListGroupsForUser",
		"PutUserPolicy", "GetUserPolicy", "ListUserPolicies", "DeleteUserPolicy",
		"PutGroupPolicy", "GetGroupPolicy", "ListGroupPolicies", "DeleteGroupPolicy",
		"CreatePolicy", "GetPolicy", "ListPolicies", "DeletePolicy", "GetPolicyVersion", "ListPolicyVersions", "CreatePolicyVersion",
		"AttachUserPolicy", "DetachUserPolicy", "ListAttachedUserPolicies",
		"AttachGroupPolicy", "DetachGroupPolicy", "ListAttachedGroupPolicies", "SimulatePrincipalPolicy")
)

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// source is the service a call was made to: from the action it was
// authorized as, else from its name.
func source(r api.Record) string {
	if svc, _, ok := strings.Cut(r.Action, ":"); ok {
		switch svc {
		case "iam":
			return SourceIAM
		case "sts":
			return SourceSTS
		}
		return SourceECS
	}
	switch {
	case stsOperations[r.Operation]:
		return SourceSTS
	case iamOperations[r.Operation]:
		return SourceIAM
	}
	return SourceECS
}

// identity is the caller of a record: the authenticated principal, or the
// key a refused signature claimed.
func identity(r api.Record, account string) UserIdentity {
	p := r.Principal
	id := UserIdentity{AccountID: account, AccessKeyID: clip(p.AccessKeyID, maxName)}
	switch p.Role {
	case auth.RoleAdmin:
		id.Type, id.PrincipalID, id.ARN = Root, account, p.ARN
		if id.ARN == "" {
			id.ARN = "arn:aws:iam::" + account + ":root"
		}
	case auth.RoleUser:
		id.Type, id.ARN, id.UserName = IAMUser, p.ARN, p.UserName
		if id.ARN == "" && p.UserName != "" {
			id.ARN = "arn:aws:iam::" + account + ":user/" + p.UserName
		}
	case auth.RoleAgent:
		id.Type, id.PrincipalID, id.ARN = Agent, p.InstanceID, p.ARN
	default:
		id = UserIdentity{Type: Unknown, AccessKeyID: clip(r.AccessKeyID, maxName)}
	}
	return id
}

// event is the record of one call; its EventID is given when written.
func (t *Trail) event(r api.Record) Event {
	region := r.Principal.Region
	if region == "" {
		region = t.region
	}
	ev := Event{
		EventTime:          r.Time.UTC().Truncate(time.Millisecond),
		EventSource:        source(r),
		EventName:          clip(r.Operation, maxName),
		AwsRegion:          clip(region, maxName),
		SourceIPAddress:    clip(r.SourceIP, maxName),
		UserAgent:          clip(r.UserAgent, maxUserAgent),
		UserIdentity:       identity(r, t.account),
		ReadOnly:           r.ReadOnly,
		ErrorCode:          clip(r.ErrorCode, maxName),
		ErrorMessage:       clip(r.ErrorMessage, maxMessage),
		RequestID:          r.RequestID,
		EventType:          EventType,
		RecipientAccountID: t.account,
	}
	ev.Resources = addResources(nil, r.Resources)
	return ev
}

// addResources adds the ARNs among arns that rs lacks, up to maxResources;
// a wildcard is not a resource.
func addResources(rs []Resource, arns []string) []Resource {
	for _, a := range arns {
		if a == "" || a == "*" || len(rs) == maxResources {
			continue
		}
		if slices.ContainsFunc(rs, func(r Resource) bool { return r.ARN == a }) {
			continue
		}
		r := Resource{ARN: clip(a, 2048)}
		if parts := strings.SplitN(a, ":", 6); len(parts) == 6 && parts[0] == "arn" {
			r.AccountID = parts[4]
		}
		rs = append(rs, r)
	}
	return rs
}

// clip bounds s to n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n]
}

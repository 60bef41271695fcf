package iamapi

import (
	"time"

	"github.com/capstanhq/capstan/internal/iam"
)

// The XML shapes of IAM's and STS's results: element names are the
// members of AWS's API models.

// list is a Query protocol list: <Name><member>...</member>...</Name>; an
// empty one is still written, so clients see an empty list, not none.
type list[T any] struct {
	Member []T `xml:"member"`
}

func members[T any](v []T) list[T] { return list[T]{Member: v} }

// paging ends every List result.
type paging struct {
	IsTruncated bool
	Marker      string `xml:",omitempty"`
}

type tagXML struct {
	Key   string
	Value string
}

type userXML struct {
	Path       string
	UserName   string `xml:",omitempty"` // the root has none
	UserId     string
	Arn        string
	CreateDate string
	Tags       *list[tagXML] `xml:",omitempty"`
}

type groupXML struct {
	Path       string
	GroupName  string
	GroupId    string
	Arn        string
	CreateDate string
}

type accessKeyXML struct {
	UserName        string
	AccessKeyId     string
	Status          string
	SecretAccessKey string `xml:",omitempty"`
	CreateDate      string
}

type policyXML struct {
	PolicyName                    string
	PolicyId                      string
	Arn                           string
	Path                          string
	DefaultVersionId              string
	AttachmentCount               int
	PermissionsBoundaryUsageCount int
	IsAttachable                  bool
	Description                   string `xml:",omitempty"`
	CreateDate                    string
	UpdateDate                    string
	Tags                          *list[tagXML] `xml:",omitempty"`
}

type versionXML struct {
	Document         string `xml:",omitempty"` // URL-encoded, as IAM sends it
	VersionId        string
	IsDefaultVersion bool
	CreateDate       string
}

type attachedXML struct {
	PolicyName string
	PolicyArn  string
}

type positionXML struct {
	Line   int
	Column int
}

type statementXML struct {
	SourcePolicyId   string
	SourcePolicyType string
	StartPosition    *positionXML `xml:",omitempty"`
	EndPosition      *positionXML `xml:",omitempty"`
}

type evalXML struct {
	EvalActionName       string
	EvalResourceName     string
	EvalDecision         string
	MatchedStatements    list[statementXML]
	MissingContextValues list[string]
}

// timestamp is IAM's ISO 8601 form.
func timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }

func tagsXML(tags []iam.Tag) *list[tagXML] {
	if len(tags) == 0 {
		return nil
	}
	l := &list[tagXML]{}
	for _, t := range tags {
		l.Member = append(l.Member, tagXML{t.Key, t.Value})
	}
	return l
}

func toUser(u iam.User, withTags bool) userXML {
	x := userXML{Path: u.Path, UserName: u.UserName, UserId: u.UserID, Arn: u.Arn, CreateDate: timestamp(u.CreateDate)}
	if withTags {
		x.Tags = tagsXML(u.Tags)
	}
	return x
}

func toGroup(g iam.Group) groupXML {
	return groupXML{Path: g.Path, GroupName: g.GroupName, GroupId: g.GroupID, Arn: g.Arn, CreateDate: timestamp(g.CreateDate)}
}

func toPolicy(p iam.ManagedPolicy, withTags bool) policyXML {
	x := policyXML{PolicyName: p.PolicyName, PolicyId: p.PolicyID, Arn: p.Arn, Path: p.Path, DefaultVersionId: p.DefaultVersionID,
		AttachmentCount: p.AttachmentCount, IsAttachable: true, Description: p.Description,
		CreateDate: timestamp(p.CreateDate), UpdateDate: timestamp(p.UpdateDate)}
	if withTags {
		x.Tags = tagsXML(p.Tags)
	}
	return x
}

func toVersion(v iam.PolicyVersion, withDocument bool) versionXML {
	x := versionXML{VersionId: v.VersionID, IsDefaultVersion: v.IsDefaultVersion, CreateDate: timestamp(v.CreateDate)}
	if withDocument {
		x.Document = encodeDocument(v.Document)
	}
	return x
}

func toAccessKey(k iam.AccessKey) accessKeyXML {
	return accessKeyXML{UserName: k.UserName, AccessKeyId: k.AccessKeyID, Status: k.Status, SecretAccessKey: k.SecretAccessKey,
		CreateDate: timestamp(k.CreateDate)}
}

// encodeDocument percent-encodes a policy document as IAM returns it:
// everything but RFC 3986's unreserved characters, spaces as %20 (the
// AWS CLI decodes with a plain unquote, which leaves '+' alone).
func encodeDocument(doc string) string {
	const hexDigits = "0123456789ABCDEF"
	b := make([]byte, 0, len(doc)*3/2)
	for i := 0; i < len(doc); i++ {
		ch := doc[i]
		if 'A' <= ch && ch <= 'Z' || 'a' <= ch && ch <= 'z' || '0' <= ch && ch <= '9' || ch == '-' || ch == '_' || ch == '.' || ch == '~' {
			b = append(b, ch)
			continue
		}
		b = append(b, '%', hexDigits[ch>>4], hexDigits[ch&15])
	}
	return string(b)
}

package iam

import (
	"context"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/capstanhq/capstan/internal/iam/policy"
)

// Source types of a policy, as SimulatePrincipalPolicy names them.
const (
	SourceUser        = "user"         // a user's inline policy
	SourceGroup       = "group"        // a group's inline policy
	SourceUserManaged = "user-managed" // a customer managed policy
)

// source is one policy that applies to a user, with its text (for
// positions) and where it comes from.
type source struct {
	policy.Named
	Type string
	Text string
}

// Policies returns every policy that applies to a user: its inline
// policies ("user/NAME/inline/POLICY"), the default versions of the
// managed policies attached to it (by ARN), and the same for each of its
// groups ("group/NAME/inline/POLICY"). A managed policy attached more than
// once is listed once.
func (s *Store) Policies(ctx context.Context, userName string) ([]policy.Named, error) {
	_, srcs, err := s.sources(ctx, userName)
	if err != nil {
		return nil, err
	}
	out := make([]policy.Named, len(srcs))
	for i, src := range srcs {
		out[i] = src.Named
	}
	return out, nil
}

// sources is Policies with the user record and the documents' texts.
func (s *Store) sources(ctx context.Context, userName string) (*userRecord, []source, error) {
	u, err := s.readUser(ctx, userName)
	if err != nil {
		return nil, nil, err
	}
	var out []source
	seen := map[string]bool{}
	add := func(name, typ, text string) {
		// Stored documents were parsed when written; one that no longer
		// parses (a stricter parser since) allows nothing.
		if doc, err := s.docs.parse(text); err == nil {
			out = append(out, source{Named: policy.Named{Name: name, Doc: doc}, Type: typ, Text: text})
		}
	}
	managed := func(arns []string) error {
		for _, arn := range arns {
			if seen[strings.ToLower(arn)] {
				continue
			}
			seen[strings.ToLower(arn)] = true
			p, err := s.readPolicy(ctx, arn)
			if isNoSuch(err) {
				continue
			}
			if err != nil {
				return err
			}
			add(p.Arn, SourceUserManaged, p.defaultDocument())
		}
		return nil
	}
	for _, p := range u.Inline {
		add("user/"+u.UserName+"/inline/"+p.Name, SourceUser, p.Document)
	}
	if err := managed(u.Attached); err != nil {
		return nil, nil, err
	}
	for _, name := range u.Groups {
		g, err := s.readGroup(ctx, name)
		if isNoSuch(err) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		for _, p := range g.Inline {
			add("group/"+g.GroupName+"/inline/"+p.Name, SourceGroup, p.Document)
		}
		if err := managed(g.Attached); err != nil {
			return nil, nil, err
		}
	}
	return u, out, nil
}

// Position is a place in a policy document: line and column from 1,
// columns counted in characters.
type Position struct {
	Line, Column int
}

// statementSpans finds each statement of a document's text: where its
// value starts and where it ends (its last character). Statement i of the
// parsed document is span i. ok is false when the text does not decode.
func statementSpans(text string) (spans [][2]Position, ok bool) {
	dec := json.NewDecoder(strings.NewReader(text))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	var offsets [][2]int
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, false
		}
		start := skipSeparators(text, int(dec.InputOffset()))
		if k != "Statement" || offsets != nil || start >= len(text) {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, false
			}
			continue
		}
		if text[start] != '[' {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, false
			}
			offsets = append(offsets, [2]int{start, int(dec.InputOffset()) - 1})
			continue
		}
		if _, err := dec.Token(); err != nil {
			return nil, false
		}
		offsets = [][2]int{}
		for dec.More() {
			st := skipSeparators(text, int(dec.InputOffset()))
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, false
			}
			offsets = append(offsets, [2]int{st, int(dec.InputOffset()) - 1})
		}
		if _, err := dec.Token(); err != nil {
			return nil, false
		}
	}
	for _, o := range offsets {
		spans = append(spans, [2]Position{position(text, o[0]), position(text, o[1])})
	}
	return spans, true
}

// skipSeparators moves past whitespace, ':' and ',' from offset i.
func skipSeparators(text string, i int) int {
	for i < len(text) && strings.IndexByte(" \t\r\n:,", text[i]) >= 0 {
		i++
	}
	return i
}

func position(text string, off int) Position {
	line := 1 + strings.Count(text[:off], "\n")
	lineStart := strings.LastIndexByte(text[:off], '\n') + 1
	return Position{Line: line, Column: 1 + utf8.RuneCountInString(text[lineStart:off])}
}

package policy

import (
	"bytes"
	"encoding/json"
)

// MarshalJSON writes d as a policy document that Parse reads back to an
// equal Document: lists are always lists, and condition values are strings
// (IAM reads numbers and booleans from strings alike).
func (d Document) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"Version":`)
	str(&b, d.Version)
	if d.ID != "" {
		b.WriteString(`,"Id":`)
		str(&b, d.ID)
	}
	b.WriteString(`,"Statement":[`)
	for i := range d.Statements {
		if i > 0 {
			b.WriteByte(',')
		}
		s := &d.Statements[i]
		b.WriteByte('{')
		if s.Sid != "" {
			b.WriteString(`"Sid":`)
			str(&b, s.Sid)
			b.WriteByte(',')
		}
		b.WriteString(`"Effect":`)
		str(&b, s.Effect)
		list(&b, "Action", s.Action)
		list(&b, "NotAction", s.NotAction)
		list(&b, "Resource", s.Resource)
		list(&b, "NotResource", s.NotResource)
		if len(s.Conditions) > 0 {
			b.WriteString(`,"Condition":{`)
			// Conditions are grouped by operator in order of first appearance.
			done := map[string]bool{}
			firstOp := true
			for _, c := range s.Conditions {
				if done[c.Operator] {
					continue
				}
				done[c.Operator] = true
				if !firstOp {
					b.WriteByte(',')
				}
				firstOp = false
				str(&b, c.Operator)
				b.WriteString(`:{`)
				firstKey := true
				for _, k := range s.Conditions {
					if k.Operator != c.Operator {
						continue
					}
					if !firstKey {
						b.WriteByte(',')
					}
					firstKey = false
					str(&b, k.Key)
					b.WriteByte(':')
					strs(&b, k.Values)
				}
				b.WriteByte('}')
			}
			b.WriteByte('}')
		}
		b.WriteByte('}')
	}
	b.WriteString("]}")
	return b.Bytes(), nil
}

func str(b *bytes.Buffer, s string) {
	j, _ := json.Marshal(s) // a string always marshals
	b.Write(j)
}

func strs(b *bytes.Buffer, ss []string) {
	b.WriteByte('[')
	for i, s := range ss {
		if i > 0 {
			b.WriteByte(',')
		}
		str(b, s)
	}
	b.WriteByte(']')
}

func list(b *bytes.Buffer, name string, ss []string) {
	if ss == nil {
		return
	}
	b.WriteString(`,"`)
	b.WriteString(name)
	b.WriteString(`":`)
	strs(b, ss)
}

// UnmarshalJSON parses a policy document with Parse, so a Document held in
// a larger JSON value is validated as it is read. JSON null leaves d as is.
func (d *Document) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	p, err := Parse(b)
	if err != nil {
		return err
	}
	*d = *p
	return nil
}

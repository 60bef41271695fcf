package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// node is a JSON value that keeps object members in document order, so
// duplicate members can be refused (encoding/json keeps the last silently)
// and errors can name the first offender.
type node struct {
	kind  byte   // 'o' object, 'a' array, 's' string, 'n' number, 'b' bool, 'z' null
	text  string // string contents, number literal, "true"/"false"
	keys  []string
	vals  []*node // object member values, parallel to keys
	items []*node // array elements
}

// maxDepth bounds nesting; no valid policy goes deeper than 5.
const maxDepth = 16

func decodeJSON(b []byte) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	n, err := decodeValue(dec, 0, "")
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &Error{Rule: "invalid JSON: data after the document"}
	}
	return n, nil
}

func decodeValue(dec *json.Decoder, depth int, path string) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, jsonError(err)
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= maxDepth {
			return nil, &Error{Rule: "invalid JSON: nested too deeply"}
		}
		if t == '{' {
			if path == "Statement" {
				path = "Statement[0]" // as a single statement's errors are named
			}
			n := &node{kind: 'o'}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, jsonError(err)
				}
				k := kt.(string) // the decoder only yields string keys
				kp := k
				if path != "" {
					kp = path + "." + k
				}
				for _, seen := range n.keys {
					if seen == k {
						return nil, &Error{Path: kp, Rule: "duplicate member"}
					}
				}
				v, err := decodeValue(dec, depth+1, kp)
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, k)
				n.vals = append(n.vals, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, jsonError(err)
			}
			return n, nil
		}
		n := &node{kind: 'a'}
		for dec.More() {
			v, err := decodeValue(dec, depth+1, fmt.Sprintf("%s[%d]", path, len(n.items)))
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, v)
		}
		if _, err := dec.Token(); err != nil {
			return nil, jsonError(err)
		}
		return n, nil
	case string:
		return &node{kind: 's', text: t}, nil
	case json.Number:
		return &node{kind: 'n', text: string(t)}, nil
	case bool:
		if t {
			return &node{kind: 'b', text: "true"}, nil
		}
		return &node{kind: 'b', text: "false"}, nil
	case nil:
		return &node{kind: 'z'}, nil
	}
	return nil, &Error{Rule: fmt.Sprintf("invalid JSON: unexpected token %v", tok)}
}

func jsonError(err error) error {
	if err == io.EOF {
		return &Error{Rule: "invalid JSON: unexpected end of input"}
	}
	return &Error{Rule: "invalid JSON: " + err.Error()}
}

func (n *node) kindName() string {
	switch n.kind {
	case 'o':
		return "an object"
	case 'a':
		return "a list"
	case 's':
		return "a string"
	case 'n':
		return "a number"
	case 'b':
		return "a boolean"
	}
	return "null"
}

package policy

import (
	"strings"
	"unicode/utf8"
)

// glob reports whether s matches pattern p, where * matches any run of
// characters and ? any one character. fold compares ASCII letters without
// case (action names are ASCII). esc makes a backslash quote the next byte;
// expanded policy variables use it so their values match literally.
func glob(p, s string, fold, esc bool) bool {
	px, sx := 0, 0
	starP, starS := -1, 0 // where to resume after the last *, if any
	for px < len(p) || sx < len(s) {
		if px < len(p) {
			c := p[px]
			switch {
			case c == '*':
				starP, starS = px, sx
				px++
				continue
			case c == '?':
				if sx < len(s) {
					_, n := utf8.DecodeRuneInString(s[sx:])
					px++
					sx += n
					continue
				}
			default:
				w := 1
				if esc && c == '\\' && px+1 < len(p) {
					c, w = p[px+1], 2
				}
				if sx < len(s) && (s[sx] == c || fold && lower(s[sx]) == lower(c)) {
					px += w
					sx++
					continue
				}
			}
		}
		// Mismatch: let the last * swallow one more character, if it can.
		if starP < 0 || starS >= len(s) {
			return false
		}
		_, n := utf8.DecodeRuneInString(s[starS:])
		starS += n
		px, sx = starP+1, starS
	}
	return true
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// arnMatch matches an ARN against an ARN pattern the way IAM does: "*" alone
// matches anything; otherwise the five fields before the resource are matched
// one by one, so wildcards never reach across their colons, and the resource
// part (which may itself hold colons) is matched as a whole. Case-sensitive.
func arnMatch(p, arn string, esc bool) bool {
	if p == "*" {
		return true
	}
	for range 5 {
		pi, ai := strings.IndexByte(p, ':'), strings.IndexByte(arn, ':')
		if pi < 0 || ai < 0 || !glob(p[:pi], arn[:ai], false, esc) {
			return false
		}
		p, arn = p[pi+1:], arn[ai+1:]
	}
	return glob(p, arn, false, esc)
}

// A policy variable: ${key}, ${key, 'default'}, or one of ${*} ${?} ${$},
// which stand for those characters literally.
type policyVar struct {
	start, end int // the variable's bytes in the string
	key        string
	def        string
	hasDef     bool
	literal    string // set for ${*}, ${?}, ${$}
}

// scanVars finds the policy variables in s, or says what is malformed.
func scanVars(s string) ([]policyVar, string) {
	var vars []policyVar
	for i := 0; i < len(s); {
		j := strings.Index(s[i:], "${")
		if j < 0 {
			break
		}
		v, rule := scanVar(s, i+j)
		if rule != "" {
			return nil, rule
		}
		vars = append(vars, v)
		i = v.end
	}
	return vars, ""
}

func scanVar(s string, start int) (policyVar, string) {
	const bad = "malformed policy variable (want ${key} or ${key, 'default'})"
	v := policyVar{start: start}
	i := start + 2
	end := strings.IndexAny(s[i:], ",}")
	if end < 0 {
		return v, bad
	}
	key := strings.TrimSpace(s[i : i+end])
	i += end
	v.key = key
	if key == "*" || key == "?" || key == "$" {
		v.literal = key
	} else if key == "" || strings.ContainsAny(key, " \t\n\r'${") {
		return v, bad
	}
	if s[i] == ',' {
		if v.literal != "" {
			return v, bad
		}
		i++
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if i >= len(s) || s[i] != '\'' {
			return v, bad
		}
		i++
		var def strings.Builder
		for {
			q := strings.IndexByte(s[i:], '\'')
			if q < 0 {
				return v, bad
			}
			def.WriteString(s[i : i+q])
			i += q + 1
			if i < len(s) && s[i] == '\'' { // '' is a quote inside the default
				def.WriteByte('\'')
				i++
				continue
			}
			break
		}
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if i >= len(s) || s[i] != '}' {
			return v, bad
		}
		v.def, v.hasDef = def.String(), true
	}
	v.end = i + 1
	return v, ""
}

// expand replaces the policy variables in a pattern with their values from
// the request, quoting them (and the pattern's own backslashes) for glob's
// esc mode so a value such as "*" matches only itself. ok is false when a
// variable has no single value and no default: IAM then treats the pattern
// as matching nothing.
func expand(p string, ctx *lookup) (out string, ok bool) {
	var b strings.Builder
	b.Grow(len(p) + 16)
	quote := func(s string, wild bool) {
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c == '\\' || !wild && (c == '*' || c == '?') {
				b.WriteByte('\\')
			}
			b.WriteByte(c)
		}
	}
	at := 0
	for {
		j := strings.Index(p[at:], "${")
		if j < 0 {
			break
		}
		v, rule := scanVar(p, at+j)
		if rule != "" {
			return "", false
		}
		quote(p[at:v.start], true)
		at = v.end
		switch {
		case v.literal != "":
			quote(v.literal, false)
		default:
			vals := ctx.get(v.key)
			switch {
			case len(vals) == 1:
				quote(vals[0], false)
			case v.hasDef:
				quote(v.def, false)
			default:
				return "", false
			}
		}
	}
	quote(p[at:], true)
	return b.String(), true
}

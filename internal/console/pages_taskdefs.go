package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

// listTaskDefs pages through ListDaemonTaskDefinitions with in.
func (c *Console) listTaskDefs(r *http.Request, s *session, in map[string]any) ([]shapes.DaemonTaskDefinitionSummary, error) {
	var all []shapes.DaemonTaskDefinitionSummary
	for range 200 {
		var out shapes.ListDaemonTaskDefinitionsResponse
		if err := c.call(r, s, "ListDaemonTaskDefinitions", in, &out); err != nil {
			return nil, err
		}
		all = append(all, out.DaemonTaskDefinitions...)
		if out.NextToken == "" {
			break
		}
		in["nextToken"] = out.NextToken
	}
	return all, nil
}

// familyOf is the family of family:revision.
func familyOf(label string) string {
	f, _, _ := strings.Cut(label, ":")
	return f
}

func (c *Console) taskDefsPage(w http.ResponseWriter, r *http.Request, s *session) {
	// The last revision of each family, whatever its status.
	last, err := c.listTaskDefs(r, s, map[string]any{"revision": "LAST_REGISTERED", "status": "ALL"})
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	sort.Slice(last, func(i, j int) bool { return revisionLabel(last[i].Arn) < revisionLabel(last[j].Arn) })
	c.render(w, r, http.StatusOK, "taskdefs", s, map[string]any{"Families": last})
}

var familyRe = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,255}$`)

func (c *Console) taskDefFamilyPage(w http.ResponseWriter, r *http.Request, s *session) {
	family := r.URL.Query().Get("family")
	if !familyRe.MatchString(family) {
		c.fail(w, r, s, invalid("family", "must be 1 to 255 letters, digits, hyphens and underscores (got %q)", clip(family)))
		return
	}
	revs, err := c.listTaskDefs(r, s, map[string]any{"family": family, "status": "ALL", "sort": "DESC"})
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	if len(revs) == 0 {
		c.fail(w, r, s, invalid("family", "no daemon task definition family %q", family))
		return
	}
	c.render(w, r, http.StatusOK, "taskdeffamily", s, map[string]any{"Family": family, "Revisions": revs})
}

// registerable is the RegisterDaemonTaskDefinition request that makes a
// revision like td: its registerable fields, as indented JSON.
func registerable(td *shapes.DaemonTaskDefinition) string {
	req := shapes.RegisterDaemonTaskDefinitionRequest{Family: td.Family, ContainerDefinitions: td.ContainerDefinitions, Cpu: td.Cpu,
		Memory: td.Memory, ExecutionRoleArn: td.ExecutionRoleArn, TaskRoleArn: td.TaskRoleArn, PidMode: td.PidMode, IpcMode: td.IpcMode, Volumes: td.Volumes}
	return indented(req)
}

// indented is v as indented JSON, with <, > and & as they are: the page
// escapes them.
func indented(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

// taskDefView is the revision page: the revision and the form to register
// the next one, with its text and error when a registration failed.
func (c *Console) taskDefView(r *http.Request, s *session, ref string) (map[string]any, error) {
	if ref == "" || len(ref) > 2048 {
		return nil, invalid("arn", "a daemon task definition (family:revision or ARN) is required (at most 2048 characters)")
	}
	var out shapes.DescribeDaemonTaskDefinitionResponse
	if err := c.call(r, s, "DescribeDaemonTaskDefinition", map[string]any{"daemonTaskDefinition": ref}, &out); err != nil {
		return nil, err
	}
	if out.DaemonTaskDefinition == nil {
		return nil, invalid("arn", "no daemon task definition %q", clip(ref))
	}
	td := out.DaemonTaskDefinition
	return map[string]any{"TD": td, "Label": revisionLabel(td.DaemonTaskDefinitionArn), "JSON": indented(td), "Text": registerable(td),
		"RegisterDenied": c.allowed(r, s, "RegisterDaemonTaskDefinition", &shapes.RegisterDaemonTaskDefinitionRequest{Family: td.Family})}, nil
}

func (c *Console) taskDefPage(w http.ResponseWriter, r *http.Request, s *session) {
	data, err := c.taskDefView(r, s, r.URL.Query().Get("arn"))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "taskdef", s, data)
}

// taskDefRegister registers the form's JSON as a new revision. A refused
// one shows the revision page again with the text as typed, the error and,
// when the error names a field, the line it is on.
func (c *Console) taskDefRegister(w http.ResponseWriter, r *http.Request, s *session) {
	from, text := r.PostFormValue("from"), r.PostFormValue("json")
	data, err := c.taskDefView(r, s, from)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	data["Text"] = text
	field, err := checkRegisterJSON(text)
	if err == nil {
		var out shapes.RegisterDaemonTaskDefinitionResponse
		if err = c.call(r, s, "RegisterDaemonTaskDefinition", json.RawMessage(text), &out); err == nil {
			http.Redirect(w, r, Prefix+"daemon-task-definition?arn="+urlQuery(revisionLabel(out.DaemonTaskDefinitionArn)), http.StatusSeeOther)
			return
		}
		var ae *apiError
		if errors.As(err, &ae) {
			field = fieldOf(ae.Message)
		}
	}
	data["Error"] = err.Error()
	if field != "" {
		data["ErrorField"] = field
		if line := lineOf(text, field); line > 0 {
			data["ErrorLine"] = line
		}
	}
	status := statusOf(err)
	if status == http.StatusInternalServerError {
		status = http.StatusBadRequest // the form's own checks
	}
	c.render(w, r, status, "taskdef", s, data)
}

// checkRegisterJSON decodes text as a RegisterDaemonTaskDefinition request,
// refusing unknown fields and trailing text; the field it blames, if any.
func checkRegisterJSON(text string) (string, error) {
	if strings.TrimSpace(text) == "" {
		return "", errors.New("json: paste the daemon task definition's JSON")
	}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	var req shapes.RegisterDaemonTaskDefinitionRequest
	err := dec.Decode(&req)
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return "", fmt.Errorf("json: line %d: %v", lineAt(text, int(syn.Offset)), syn)
	case errors.As(err, &typ):
		return typ.Field, fmt.Errorf("%s: must be %s (got %s)", typ.Field, typ.Type, typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "", errors.New("json: the text ends before the JSON does")
	case err != nil && strings.HasPrefix(err.Error(), "json: unknown field "):
		name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		return name, fmt.Errorf("%s: not a field of a daemon task definition", name)
	case err != nil:
		return "", fmt.Errorf("json: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", fmt.Errorf("json: line %d: text after the JSON object", lineAt(text, int(dec.InputOffset())))
	}
	return "", nil
}

// fieldRe is the field path an API validation message starts with, e.g.
// containerDefinitions[0].memory.
var fieldRe = regexp.MustCompile(`^([a-zA-Z][a-zA-Z0-9]*(\[[0-9]+\])*(\.[a-zA-Z][a-zA-Z0-9]*(\[[0-9]+\])*)*): `)

func fieldOf(msg string) string {
	if m := fieldRe.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	return ""
}

func lineAt(text string, off int) int {
	off = min(max(off, 0), len(text))
	return strings.Count(text[:off], "\n") + 1
}

// lineOf is the line of text where the field path (a.b[1].c, or Go's
// a.b.c without indexes) is, or of the nearest enclosing field there; 0
// when none is found.
func lineOf(text, path string) int {
	at := map[string]int{} // path (with and without indexes) -> offset
	type frame struct {
		obj     bool
		path    string
		key     string // the object's current key
		wantKey bool
		i       int
	}
	var st []frame
	record := func(p string, off int) {
		for _, k := range []string{p, indexRe.ReplaceAllString(p, "")} {
			if _, ok := at[k]; !ok {
				at[k] = off
			}
		}
	}
	dec := json.NewDecoder(strings.NewReader(text))
	for {
		off := int(dec.InputOffset())
		tok, err := dec.Token()
		if err != nil {
			break
		}
		// The token starts after separators and blanks.
		for off < len(text) && strings.IndexByte(" \t\r\n,:", text[off]) >= 0 {
			off++
		}
		d, isDelim := tok.(json.Delim)
		if n := len(st); n > 0 && st[n-1].obj && st[n-1].wantKey {
			if isDelim && d == '}' {
				st = st[:n-1]
			} else if k, ok := tok.(string); ok {
				st[n-1].key, st[n-1].wantKey = k, false
				p := k
				if st[n-1].path != "" {
					p = st[n-1].path + "." + k
				}
				record(p, off)
				continue
			}
		} else if isDelim && d == ']' {
			st = st[:n-1]
		} else {
			p := ""
			if n > 0 && st[n-1].obj {
				p = st[n-1].key
				if st[n-1].path != "" {
					p = st[n-1].path + "." + p
				}
			} else if n > 0 {
				p = fmt.Sprintf("%s[%d]", st[n-1].path, st[n-1].i)
				st[n-1].i++
				record(p, off)
			}
			if isDelim {
				st = append(st, frame{obj: d == '{', path: p, wantKey: d == '{'})
				continue
			}
		}
		if n := len(st); n > 0 && st[n-1].obj {
			st[n-1].wantKey = true
		}
	}
	for p := path; p != ""; {
		if off, ok := at[p]; ok {
			return lineAt(text, off)
		}
		i := max(strings.LastIndexByte(p, '.'), strings.LastIndexByte(p, '['))
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0
}

var indexRe = regexp.MustCompile(`\[[0-9]+\]`)

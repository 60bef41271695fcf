package console

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"
)

// extraPages are the pages beside the daemon's: each parsed with the
// layout and its own file.
var extraPages = []string{"taskdefs", "taskdeffamily", "taskdef", "task"}

// extend adds the capacity provider and event tabs to the cluster page and
// parses the other pages.
func (pt *pageTemplates) extend() {
	pt.pages["cluster"] = template.Must(template.New("").Funcs(funcs).ParseFS(assets,
		"templates/layout.html", "templates/live.html", "templates/cluster.html", "templates/capacitytab.html", "templates/eventstab.html"))
	for _, name := range extraPages {
		pt.pages[name] = template.Must(template.New("").Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/"+name+".html"))
	}
}

// The extra pages' functions join the shared map: cluster.html uses them
// and loadTemplates parses it too.
func init() {
	for k, f := range extraFuncs {
		funcs[k] = f
	}
}

var extraFuncs = template.FuncMap{
	"taskLink": taskLink,
	"familyOf": familyOf,
	"tabLabel": func(tab string) string {
		if tab == "capacity" {
			return "capacity providers"
		}
		return tab
	},
}

// routesExtra adds the pages of this file's siblings to m.
func (c *Console) routesExtra(m *http.ServeMux) {
	m.HandleFunc("GET /console/cluster", c.authed(c.clusterTabs))
	m.HandleFunc("GET /console/events/live", c.authed(c.eventsLive))
	m.HandleFunc("GET /console/task", c.authed(c.taskPage))
	m.HandleFunc("GET /console/task/logs", c.authed(c.taskLogs))
	m.HandleFunc("GET /console/daemon-task-definitions", c.authed(c.taskDefsPage))
	m.HandleFunc("GET /console/daemon-task-definitions/family", c.authed(c.taskDefFamilyPage))
	m.HandleFunc("GET /console/daemon-task-definition", c.authed(c.taskDefPage))
	m.HandleFunc("POST /console/daemon-task-definition/register", c.formCap(c.authed(c.taskDefRegister)))
}

// clusterTabs serves the capacity provider and event tabs; the other tabs
// are the cluster page's.
func (c *Console) clusterTabs(w http.ResponseWriter, r *http.Request, s *session) {
	switch r.URL.Query().Get("tab") {
	case "capacity":
		c.capacityTab(w, r, s)
	case "events":
		c.eventsTab(w, r, s)
	default:
		c.clusterPage(w, r, s)
	}
}

// describeCluster is the named cluster, or ClusterNotFoundException.
func (c *Console) describeCluster(r *http.Request, s *session, name string) (cluster, error) {
	if name == "" || len(name) > 2048 {
		return cluster{}, &apiError{Status: 400, Type: "InvalidParameterException", Message: "name: a cluster name is required (at most 2048 characters)"}
	}
	var cl struct {
		Clusters []cluster `json:"clusters"`
	}
	if err := c.call(r, s, "DescribeClusters", map[string]any{"clusters": []string{name}}, &cl); err != nil {
		return cluster{}, err
	}
	if len(cl.Clusters) == 0 {
		return cluster{}, &apiError{Status: 400, Type: "ClusterNotFoundException", Message: "Cluster not found."}
	}
	return cl.Clusters[0], nil
}

// invalid is a bad input of a page, named by its field.
func invalid(field, format string, args ...any) error {
	return &apiError{Status: 400, Type: "InvalidParameterException", Message: field + ": " + fmt.Sprintf(format, args...)}
}

// formCap answers a form over the 64 KiB cap with 413 before anything
// else reads it (the CSRF check would otherwise see an empty form).
func (c *Console) formCap(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := r.ParseMultipartForm(maxForm)
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			http.Error(w, fmt.Sprintf("the form is larger than %d KiB", maxForm>>10), http.StatusRequestEntityTooLarge)
			return
		case err != nil && !errors.Is(err, http.ErrNotMultipart):
			http.Error(w, "unreadable form: "+err.Error(), http.StatusBadRequest)
			return
		}
		h(w, r)
	}
}

// alive reports whether the session is still signed in.
func (c *Console) alive(s *session) bool {
	c.sessions.mu.Lock()
	defer c.sessions.mu.Unlock()
	_, ok := c.sessions.byID[s.id]
	return ok
}

// stream is a server-sent event stream.
type stream struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startStream(w http.ResponseWriter) *stream {
	rc := http.NewResponseController(w)
	// A stream outlives the server's read timeout.
	rc.SetReadDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &stream{w: w, rc: rc}
}

// send writes one event; false when the browser is gone.
func (st *stream) send(event, data string) bool {
	st.rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(st.w, "event: %s\n", event)
	for line := range strings.SplitSeq(data, "\n") {
		fmt.Fprintf(st.w, "data: %s\n", line)
	}
	fmt.Fprint(st.w, "\n")
	return st.rc.Flush() == nil
}

func (st *stream) keepalive() bool {
	st.rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(st.w, ": keepalive\n\n")
	return st.rc.Flush() == nil
}

// taskLink is the task page of a task ARN
// (arn:...:task/cluster/id), "" for anything else.
func taskLink(arn string) string {
	i := strings.Index(arn, ":task/")
	if i < 0 {
		return ""
	}
	cl, id, ok := strings.Cut(arn[i+len(":task/"):], "/")
	if !ok || cl == "" || id == "" {
		return ""
	}
	return Prefix + "task?cluster=" + urlQuery(cl) + "&task=" + urlQuery(id)
}

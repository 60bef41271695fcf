package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

// pageTemplates holds each page parsed with the layout.
type pageTemplates struct {
	pages map[string]*template.Template
}

var funcs = template.FuncMap{
	"last":  lastPart,
	"label": revisionLabel,
	"when": func(t shapes.Timestamp) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"flag": func(p *bool) bool { return p != nil && *p },
	"unix": func(t shapes.Timestamp) int64 { return t.Unix() },
	"deref": func(p *int32) int32 {
		if p == nil {
			return 0
		}
		return *p
	},
}

func loadTemplates() *pageTemplates {
	pt := &pageTemplates{pages: map[string]*template.Template{}}
	for _, name := range []string{"signin", "clusters", "cluster", "daemon", "preview", "message"} {
		pt.pages[name] = template.Must(template.New("").Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/live.html", "templates/"+name+".html"))
	}
	return pt
}

// fragment renders one named template of the daemon page alone.
func (pt *pageTemplates) fragment(w io.Writer, name string, data any) error {
	return pt.pages["daemon"].ExecuteTemplate(w, name, data)
}

// render writes a full page: the layout around the page's content.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, s *session, data map[string]any) {
	data["Page"] = page
	if s != nil {
		data["CSRF"] = s.csrf
		who := s.principal.UserName
		if who == "" {
			who = "root"
		}
		data["Who"] = who
	}
	var buf bytes.Buffer
	if err := c.pages.pages[page].ExecuteTemplate(&buf, "layout", data); err != nil {
		c.cfg.Log.Error("console render", "page", page, "err", err)
		http.Error(w, "could not render the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// fail shows an API error: AccessDenied as 403, bad input as 400.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	status := http.StatusInternalServerError
	var ae *apiError
	if errors.As(err, &ae) {
		status = ae.Status
		if denied(err) {
			status = http.StatusForbidden
		}
	}
	c.render(w, r, status, "message", s, map[string]any{"Error": err.Error()})
}

func lastPart(arn string) string { return arn[strings.LastIndexByte(arn, '/')+1:] }

// revisionLabel is family:revision of a (daemon) task definition ARN.
func revisionLabel(arn string) string { return lastPart(arn) }

type cluster struct {
	ClusterArn                        string `json:"clusterArn"`
	ClusterName                       string `json:"clusterName"`
	Status                            string `json:"status"`
	RegisteredContainerInstancesCount int    `json:"registeredContainerInstancesCount"`
	RunningTasksCount                 int    `json:"runningTasksCount"`
	PendingTasksCount                 int    `json:"pendingTasksCount"`
	ActiveServicesCount               int    `json:"activeServicesCount"`
}

func (c *Console) clustersPage(w http.ResponseWriter, r *http.Request, s *session) {
	var arns []string
	var tok string
	for range 100 {
		var out struct {
			ClusterArns []string `json:"clusterArns"`
			NextToken   string   `json:"nextToken"`
		}
		if err := c.call(r, s, "ListClusters", map[string]any{"nextToken": tok}, &out); err != nil {
			c.fail(w, r, s, err)
			return
		}
		arns, tok = append(arns, out.ClusterArns...), out.NextToken
		if tok == "" {
			break
		}
	}
	var all []cluster
	for chunk := range slices.Chunk(arns, 100) {
		var out struct {
			Clusters []cluster `json:"clusters"`
		}
		if err := c.call(r, s, "DescribeClusters", map[string]any{"clusters": chunk}, &out); err != nil {
			c.fail(w, r, s, err)
			return
		}
		all = append(all, out.Clusters...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].ClusterName < all[j].ClusterName })
	c.render(w, r, http.StatusOK, "clusters", s, map[string]any{"Clusters": all})
}

var tabs = []string{"services", "tasks", "instances", "daemons", "capacity", "events"}

type task struct {
	TaskArn              string `json:"taskArn"`
	Group                string `json:"group"`
	LastStatus           string `json:"lastStatus"`
	DesiredStatus        string `json:"desiredStatus"`
	TaskDefinitionArn    string `json:"taskDefinitionArn"`
	ContainerInstanceArn string `json:"containerInstanceArn"`
	StoppedReason        string `json:"stoppedReason"`
	HealthStatus         string `json:"healthStatus"`
}

type instanceRow struct {
	shapes.ContainerInstance
	ID                                   string
	Connected                            bool
	DaemonsRunning, DaemonsExpected      int
	MissingDaemon                        bool
	CPUUsed, CPUTotal, MemUsed, MemTotal int64
}

func (c *Console) clusterPage(w http.ResponseWriter, r *http.Request, s *session) {
	name := r.URL.Query().Get("name")
	tab := r.URL.Query().Get("tab")
	if tab == "" {
		tab = "services"
	}
	if name == "" || len(name) > 2048 {
		c.fail(w, r, s, &apiError{Status: 400, Type: "InvalidParameterException", Message: "name: a cluster name is required (at most 2048 characters)"})
		return
	}
	if !slices.Contains(tabs, tab) {
		c.fail(w, r, s, &apiError{Status: 400, Type: "InvalidParameterException", Message: fmt.Sprintf("tab: must be one of %s", strings.Join(tabs, ", "))})
		return
	}
	var cl struct {
		Clusters []cluster `json:"clusters"`
	}
	if err := c.call(r, s, "DescribeClusters", map[string]any{"clusters": []string{name}}, &cl); err != nil {
		c.fail(w, r, s, err)
		return
	}
	if len(cl.Clusters) == 0 {
		c.fail(w, r, s, &apiError{Status: 400, Type: "ClusterNotFoundException", Message: "Cluster not found."})
		return
	}
	data := map[string]any{"Cluster": cl.Clusters[0], "Tab": tab, "Tabs": tabs}
	var err error
	switch tab {
	case "services":
		data["Services"], err = c.services(r, s, name)
	case "tasks":
		data["Tasks"], err = c.tasks(r, s, name)
	case "instances":
		data["Instances"], err = c.instances(r, s, name)
	case "daemons":
		data["Daemons"], err = c.daemons(r, s, cl.Clusters[0].ClusterArn)
	case "events":
		var out struct {
			Events []struct {
				ID         string   `json:"id"`
				Time       string   `json:"time"`
				DetailType string   `json:"detail-type"`
				Resources  []string `json:"resources"`
			} `json:"events"`
		}
		err = c.call(r, s, "CapstanV1.ListEvents", map[string]any{"cluster": name, "maxResults": 200}, &out)
		slices.Reverse(out.Events)
		data["Events"] = out.Events
	}
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "cluster", s, data)
}

// list pages through a List* call, collecting the field key of each page.
func (c *Console) list(r *http.Request, s *session, op string, in map[string]any, key string) ([]string, error) {
	var all []string
	for range 200 {
		var out map[string]any
		if err := c.call(r, s, op, in, &out); err != nil {
			return nil, err
		}
		items, _ := out[key].([]any)
		for _, it := range items {
			if v, ok := it.(string); ok {
				all = append(all, v)
			}
		}
		tok, _ := out["nextToken"].(string)
		if tok == "" {
			break
		}
		in["nextToken"] = tok
	}
	return all, nil
}

type service struct {
	ServiceName    string `json:"serviceName"`
	Status         string `json:"status"`
	DesiredCount   int    `json:"desiredCount"`
	RunningCount   int    `json:"runningCount"`
	PendingCount   int    `json:"pendingCount"`
	TaskDefinition string `json:"taskDefinition"`
}

func (c *Console) services(r *http.Request, s *session, cl string) ([]service, error) {
	arns, err := c.list(r, s, "ListServices", map[string]any{"cluster": cl}, "serviceArns")
	if err != nil {
		return nil, err
	}
	var all []service
	for chunk := range slices.Chunk(arns, 10) {
		var out struct {
			Services []service `json:"services"`
		}
		if err := c.call(r, s, "DescribeServices", map[string]any{"cluster": cl, "services": chunk}, &out); err != nil {
			return nil, err
		}
		all = append(all, out.Services...)
	}
	return all, nil
}

func (c *Console) tasks(r *http.Request, s *session, cl string) ([]task, error) {
	arns, err := c.list(r, s, "ListTasks", map[string]any{"cluster": cl}, "taskArns")
	if err != nil {
		return nil, err
	}
	var all []task
	for chunk := range slices.Chunk(arns, 100) {
		var out struct {
			Tasks []task `json:"tasks"`
		}
		if err := c.call(r, s, "DescribeTasks", map[string]any{"cluster": cl, "tasks": chunk}, &out); err != nil {
			return nil, err
		}
		all = append(all, out.Tasks...)
	}
	return all, nil
}

func (c *Console) containerInstances(r *http.Request, s *session, cl string) ([]shapes.ContainerInstance, error) {
	arns, err := c.list(r, s, "ListContainerInstances", map[string]any{"cluster": cl}, "containerInstanceArns")
	if err != nil {
		return nil, err
	}
	var all []shapes.ContainerInstance
	for chunk := range slices.Chunk(arns, 100) {
		var out struct {
			ContainerInstances []shapes.ContainerInstance `json:"containerInstances"`
		}
		if err := c.call(r, s, "DescribeContainerInstances", map[string]any{"cluster": cl, "containerInstances": chunk}, &out); err != nil {
			return nil, err
		}
		all = append(all, out.ContainerInstances...)
	}
	return all, nil
}

func resourceValue(rs []shapes.Resource, name string) int64 {
	for _, r := range rs {
		if r.Name == name && r.IntegerValue != nil {
			return int64(*r.IntegerValue)
		}
	}
	return 0
}

// instances are the cluster's instances with their daemon coverage: the
// daemon tasks running on each against the ACTIVE daemons of its
// capacity provider.
func (c *Console) instances(r *http.Request, s *session, cl string) ([]instanceRow, error) {
	insts, err := c.containerInstances(r, s, cl)
	if err != nil {
		return nil, err
	}
	tasks, err := c.tasks(r, s, cl)
	if err != nil {
		return nil, err
	}
	running := map[string]int{}
	for _, t := range tasks {
		if strings.HasPrefix(t.Group, "daemon:") && t.LastStatus == "RUNNING" {
			running[t.ContainerInstanceArn]++
		}
	}
	expected := map[string]int{}
	var rows []instanceRow
	for _, ci := range insts {
		cp := ci.CapacityProviderName
		if _, done := expected[cp]; !done && cp != "" {
			n, err := c.activeDaemons(r, s, cl, cp)
			if err != nil {
				return nil, err
			}
			expected[cp] = n
		}
		row := instanceRow{ContainerInstance: ci, ID: lastPart(ci.ContainerInstanceArn), Connected: ci.AgentConnected != nil && *ci.AgentConnected,
			DaemonsRunning: running[ci.ContainerInstanceArn], DaemonsExpected: expected[cp]}
		row.MissingDaemon = ci.Status == "ACTIVE" && row.DaemonsRunning < row.DaemonsExpected
		row.CPUTotal, row.MemTotal = resourceValue(ci.RegisteredResources, "CPU"), resourceValue(ci.RegisteredResources, "MEMORY")
		row.CPUUsed = row.CPUTotal - resourceValue(ci.RemainingResources, "CPU")
		row.MemUsed = row.MemTotal - resourceValue(ci.RemainingResources, "MEMORY")
		rows = append(rows, row)
	}
	return rows, nil
}

func (c *Console) activeDaemons(r *http.Request, s *session, cl, cp string) (int, error) {
	n := 0
	in := map[string]any{"clusterArn": cl, "capacityProviderArns": []string{cp}}
	for range 200 {
		var out shapes.ListDaemonsResponse
		if err := c.call(r, s, "ListDaemons", in, &out); err != nil {
			return 0, err
		}
		for _, d := range out.DaemonSummariesList {
			if d.Status == "ACTIVE" {
				n++
			}
		}
		if out.NextToken == "" {
			break
		}
		in["nextToken"] = out.NextToken
	}
	return n, nil
}

type daemonRow struct {
	shapes.DaemonDetail
	Name    string
	Running int32
	Without int32
}

func (c *Console) daemons(r *http.Request, s *session, clusterArn string) ([]daemonRow, error) {
	var rows []daemonRow
	in := map[string]any{"clusterArn": clusterArn}
	for range 200 {
		var out shapes.ListDaemonsResponse
		if err := c.call(r, s, "ListDaemons", in, &out); err != nil {
			return nil, err
		}
		for _, d := range out.DaemonSummariesList {
			var dd shapes.DescribeDaemonResponse
			if err := c.call(r, s, "DescribeDaemon", map[string]any{"daemonArn": d.DaemonArn}, &dd); err != nil {
				return nil, err
			}
			if dd.Daemon == nil {
				continue
			}
			row := daemonRow{DaemonDetail: *dd.Daemon, Name: lastPart(d.DaemonArn)}
			for _, cr := range dd.Daemon.CurrentRevisions {
				if cr.TotalRunningCount != nil {
					row.Running += *cr.TotalRunningCount
				}
				if cr.TotalWithoutDaemonCount != nil {
					row.Without += *cr.TotalWithoutDaemonCount
				}
			}
			rows = append(rows, row)
		}
		if out.NextToken == "" {
			break
		}
		in["nextToken"] = out.NextToken
	}
	return rows, nil
}

// rolloutView is CapstanV1.DescribeDaemonRollout's answer, as shown.
type rolloutView struct {
	DaemonDeploymentArn             string           `json:"daemonDeploymentArn"`
	Status                          string           `json:"status"`
	StatusReason                    string           `json:"statusReason"`
	TargetDaemonRevisionArn         string           `json:"targetDaemonRevisionArn"`
	RollbackTargetDaemonRevisionArn string           `json:"rollbackTargetDaemonRevisionArn"`
	BatchSize                       int              `json:"batchSize"`
	Replaced                        int              `json:"replaced"`
	BakeTimeInMinutes               int              `json:"bakeTimeInMinutes"`
	BakeEndsAt                      shapes.Timestamp `json:"bakeEndsAt"`
	CapacityProviders               []struct {
		Name                                                string `json:"name"`
		Instances, OnTarget, Draining, Remaining, Launching int
	} `json:"capacityProviders"`
	CircuitBreaker struct {
		FailureCount int    `json:"failureCount"`
		Threshold    int    `json:"threshold"`
		Status       string `json:"status"`
	} `json:"circuitBreaker"`
	Alarms struct {
		Status              string   `json:"status"`
		AlarmNames          []string `json:"alarmNames"`
		TriggeredAlarmNames []string `json:"triggeredAlarmNames"`
		Error               string   `json:"error"`
	} `json:"alarms"`
	Stalled *struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
	} `json:"stalled"`
	StopReasons []string `json:"stopReasons"`
}

// cell is one instance of the daemon's cluster in the rollout grid.
type cell struct {
	ID       string
	Revision string // family:revision of the daemon task on it; "" none
	State    string // launching, on-target, old, draining, none
	Color    int    // index of the revision in the legend
	Title    string
	Task     string // the daemon task's ID, for its link
	Cluster  string
}

type daemonView struct {
	Daemon      shapes.DaemonDetail
	Name        string
	Cluster     string
	Revisions   []shapes.DaemonRevision
	RevLabel    map[string]string // revision ARN -> family:revision
	Deployments []shapes.DaemonDeploymentSummary
	Rollout     *rolloutView
	Cells       []cell
	Legend      []string
	Target      string // family:revision the rollout goes to
	Now         int64
	// The stop button: the session's CSRF token (the live part is
	// re-rendered alone) and why it is greyed, "" when it is offered.
	CSRF       string
	StopDenied string
	// StopSlot, in a render shared by several sessions, stands where each
	// one's stop form goes.
	StopSlot template.HTML
}

// daemonView gathers the daemon page: the daemon, its revisions and
// deployments, the rollout and one cell per instance.
func (c *Console) daemonView(r *http.Request, s *session, arn string) (*daemonView, error) {
	var dd shapes.DescribeDaemonResponse
	if err := c.call(r, s, "DescribeDaemon", map[string]any{"daemonArn": arn}, &dd); err != nil {
		return nil, err
	}
	if dd.Daemon == nil {
		return nil, &apiError{Status: 400, Type: "ResourceNotFoundException", Message: "no such daemon"}
	}
	v := &daemonView{Daemon: *dd.Daemon, Name: lastPart(arn), Cluster: lastPart(dd.Daemon.ClusterArn), RevLabel: map[string]string{}, Now: c.cfg.Now().Unix()}
	var deps shapes.ListDaemonDeploymentsResponse
	if err := c.call(r, s, "ListDaemonDeployments", map[string]any{"daemonArn": arn, "maxResults": 20}, &deps); err != nil {
		return nil, err
	}
	v.Deployments = deps.DaemonDeployments
	revArns := map[string]bool{}
	for _, d := range deps.DaemonDeployments {
		if d.TargetDaemonRevisionArn != "" {
			revArns[d.TargetDaemonRevisionArn] = true
		}
	}
	for _, cr := range dd.Daemon.CurrentRevisions {
		revArns[cr.Arn] = true
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range revArns {
			if !yield(k) {
				return
			}
		}
	})
	for chunk := range slices.Chunk(keys, 20) {
		var out shapes.DescribeDaemonRevisionsResponse
		if err := c.call(r, s, "DescribeDaemonRevisions", map[string]any{"daemonRevisionArns": chunk}, &out); err != nil {
			return nil, err
		}
		v.Revisions = append(v.Revisions, out.DaemonRevisions...)
	}
	sort.Slice(v.Revisions, func(i, j int) bool { return v.Revisions[i].CreatedAt.After(v.Revisions[j].CreatedAt.Time) })
	for _, rv := range v.Revisions {
		v.RevLabel[rv.DaemonRevisionArn] = revisionLabel(rv.DaemonTaskDefinitionArn)
	}
	if dd.Daemon.DeploymentArn != "" {
		var ro rolloutView
		if err := c.call(r, s, "CapstanV1.DescribeDaemonRollout", map[string]any{"daemonArn": arn}, &ro); err != nil && !denied(err) {
			return nil, err
		} else if err == nil {
			v.Rollout = &ro
			v.Target = v.RevLabel[ro.TargetDaemonRevisionArn]
		}
	}
	v.CSRF, v.StopDenied = s.csrf, c.stopDenied(r, s, v)
	return v, c.cells(r, s, v)
}

// cells colours every instance of the daemon's cluster by the revision
// of its daemon task and the task's state: from the fleet view when the
// session may list the cluster's instances and tasks, else through the API
// (which then answers with its own refusal).
func (c *Console) cells(r *http.Request, s *session, v *daemonView) error {
	if c.cfg.Fleet != nil && c.cellsDenied(r, s, v.Daemon.ClusterArn) == "" {
		return c.fleetCells(r, s, v)
	}
	cl := v.Daemon.ClusterArn
	insts, err := c.containerInstances(r, s, cl)
	if err != nil {
		return err
	}
	tasks, err := c.tasks(r, s, cl)
	if err != nil {
		return err
	}
	onInstance := map[string]task{}
	for _, t := range tasks {
		if t.Group != "daemon:"+v.Name || t.DesiredStatus == "STOPPED" && t.LastStatus == "STOPPED" {
			continue
		}
		if o, ok := onInstance[t.ContainerInstanceArn]; ok && o.LastStatus == "RUNNING" && t.LastStatus != "RUNNING" {
			continue
		}
		onInstance[t.ContainerInstanceArn] = t
	}
	g := v.grid()
	sort.Slice(insts, func(i, j int) bool { return insts[i].ContainerInstanceArn < insts[j].ContainerInstanceArn })
	for _, ci := range insts {
		if ci.Status == "INACTIVE" {
			continue
		}
		t, ok := onInstance[ci.ContainerInstanceArn]
		rev := ""
		if ok {
			rev = revisionLabel(t.TaskDefinitionArn)
		}
		g.add(lastPart(ci.ContainerInstanceArn), ci.Status, rev, lastPart(t.TaskArn), t.LastStatus)
	}
	return nil
}

// cellsDenied is why the session may not see the cluster's instances and
// tasks ("" when it may): the listing calls, asked of the API's
// authorizer for the cluster.
func (c *Console) cellsDenied(r *http.Request, s *session, clusterArn string) string {
	req, _ := json.Marshal(map[string]string{"cluster": clusterArn})
	for _, op := range []string{"ListContainerInstances", "ListTasks"} {
		if why := c.allowed(r, s, op, json.RawMessage(req)); why != "" {
			return why
		}
	}
	return ""
}

// fleetCells fills the grid from the fleet view: no record is decoded.
func (c *Console) fleetCells(r *http.Request, s *session, v *daemonView) error {
	dcs, err := c.cfg.Fleet.DaemonCells(r.Context(), v.Cluster, v.Name, nil)
	if err != nil {
		return err
	}
	// Revisions older than the deployments listed are described once.
	var unknown []string
	for _, dc := range dcs {
		if dc.RevisionArn != "" && v.RevLabel[dc.RevisionArn] == "" && !slices.Contains(unknown, dc.RevisionArn) {
			unknown = append(unknown, dc.RevisionArn)
		}
	}
	for chunk := range slices.Chunk(unknown, 20) {
		var out shapes.DescribeDaemonRevisionsResponse
		if err := c.call(r, s, "DescribeDaemonRevisions", map[string]any{"daemonRevisionArns": chunk}, &out); err != nil {
			return err
		}
		for _, rv := range out.DaemonRevisions {
			v.RevLabel[rv.DaemonRevisionArn] = revisionLabel(rv.DaemonTaskDefinitionArn)
		}
	}
	g := v.grid()
	for _, dc := range dcs {
		rev := ""
		if dc.TaskID != "" {
			if rev = v.RevLabel[dc.RevisionArn]; rev == "" {
				rev = lastPart(dc.RevisionArn)
			}
		}
		g.add(dc.ID, dc.Status, rev, dc.TaskID, dc.TaskLast)
	}
	return nil
}

// grid builds v's cells and legend.
type grid struct {
	v      *daemonView
	legend map[string]int
}

func (v *daemonView) grid() *grid {
	g := &grid{v: v, legend: map[string]int{}}
	for i := len(v.Revisions) - 1; i >= 0; i-- { // oldest first: colours stay put as revisions come
		l := revisionLabel(v.Revisions[i].DaemonTaskDefinitionArn)
		if _, ok := g.legend[l]; !ok {
			g.legend[l] = len(v.Legend)
			v.Legend = append(v.Legend, l)
		}
	}
	return g
}

// add is one instance (its ID and status) with the daemon's task on it:
// its revision label, ID and last status ("" when it has none).
func (g *grid) add(id, status, rev, taskID, taskLast string) {
	v := g.v
	cl := cell{ID: id, State: "none", Color: -1, Cluster: v.Cluster}
	ok := rev != ""
	if ok {
		cl.Revision, cl.Task = rev, taskID
		if i, found := g.legend[rev]; found {
			cl.Color = i
		} else {
			cl.Color = len(v.Legend)
			g.legend[rev] = cl.Color
			v.Legend = append(v.Legend, rev)
		}
	}
	switch {
	case status == "DRAINING" || status == "DEREGISTERING":
		cl.State = "draining"
	case status == "REGISTERING" || ok && taskLast != "RUNNING":
		cl.State = "launching"
	case ok && (v.Target == "" || cl.Revision == v.Target):
		cl.State = "on-target"
	case ok:
		cl.State = "old"
	}
	cl.Title = fmt.Sprintf("%s: %s", cl.ID, cl.State)
	if cl.Revision != "" {
		cl.Title += " (" + cl.Revision + ")"
	}
	v.Cells = append(v.Cells, cl)
}

func (c *Console) daemonPage(w http.ResponseWriter, r *http.Request, s *session) {
	arn := r.URL.Query().Get("arn")
	if arn == "" || len(arn) > 2048 {
		c.fail(w, r, s, &apiError{Status: 400, Type: "InvalidParameterException", Message: "arn: a daemon ARN is required (at most 2048 characters)"})
		return
	}
	v, err := c.daemonView(r, s, arn)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	// The same request the update form makes, asked before it is offered.
	up := &shapes.UpdateDaemonRequest{DaemonArn: arn, CapacityProviderArns: []string{}}
	if len(v.Revisions) > 0 {
		up.DaemonTaskDefinitionArn = v.Revisions[0].DaemonTaskDefinitionArn
	}
	live, err := c.liveParts(v)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "daemon", s, map[string]any{"V": v, "Live": template.HTML(live.frame()), "UpdateDenied": c.allowed(r, s, "UpdateDaemon", up)})
}

// preview is CapstanV1.PreviewDaemonUpdate's answer, as shown.
type preview struct {
	CurrentRevisionArn string `json:"currentRevisionArn"`
	IfRevisionArn      string `json:"ifRevisionArn"`
	Resets             []struct {
		Setting string `json:"setting"`
		Current any    `json:"current"`
		New     any    `json:"new"`
	} `json:"resets"`
	Changes []struct {
		Setting string `json:"setting"`
		Current any    `json:"current"`
		New     any    `json:"new"`
	} `json:"changes"`
	TaskDefinitionChanges []struct {
		Field   string `json:"field"`
		Change  string `json:"change"`
		Current any    `json:"current"`
		New     any    `json:"new"`
	} `json:"taskDefinitionChanges"`
	CurrentConfiguration shapes.UpdateDaemonRequest `json:"currentConfiguration"`
	InstancesToReplace   int                        `json:"instancesToReplace"`
	BatchSize            int                        `json:"batchSize"`
	Batches              []struct {
		Instances []struct {
			ContainerInstanceArn string `json:"containerInstanceArn"`
		} `json:"instances"`
	} `json:"batches"`
}

// updateRequest is the UpdateDaemon the forms describe: the daemon's
// current configuration with another daemon task definition, so that
// nothing else is reset.
func (c *Console) updateRequest(r *http.Request, s *session) (*shapes.UpdateDaemonRequest, error) {
	arn, td := r.PostFormValue("arn"), strings.TrimSpace(r.PostFormValue("taskDefinition"))
	if arn == "" {
		return nil, &apiError{Status: 400, Type: "InvalidParameterException", Message: "arn: the daemon ARN is required"}
	}
	if td == "" {
		return nil, &apiError{Status: 400, Type: "InvalidParameterException", Message: "daemonTaskDefinitionArn: name a daemon task definition (family:revision or ARN)"}
	}
	var cur struct {
		CurrentConfiguration shapes.UpdateDaemonRequest `json:"currentConfiguration"`
	}
	if err := c.call(r, s, "CapstanV1.DescribeDaemonConfiguration", map[string]any{"daemonArn": arn}, &cur); err != nil {
		return nil, err
	}
	up := cur.CurrentConfiguration
	up.DaemonArn, up.DaemonTaskDefinitionArn = arn, td
	if up.CapacityProviderArns == nil {
		up.CapacityProviderArns = []string{}
	}
	return &up, nil
}

func (c *Console) daemonPreview(w http.ResponseWriter, r *http.Request, s *session) {
	up, err := c.updateRequest(r, s)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	var p preview
	if err := c.call(r, s, "CapstanV1.PreviewDaemonUpdate", up, &p); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "preview", s, map[string]any{"P": p, "Arn": up.DaemonArn, "Name": lastPart(up.DaemonArn),
		"TaskDefinition": up.DaemonTaskDefinitionArn, "UpdateDenied": c.allowed(r, s, "UpdateDaemon", up)})
}

func (c *Console) daemonUpdate(w http.ResponseWriter, r *http.Request, s *session) {
	up, err := c.updateRequest(r, s)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	// The update applies only to the daemon as previewed.
	ifRev := r.PostFormValue("ifRevision")
	if ifRev == "" {
		c.fail(w, r, s, &apiError{Status: 400, Type: "InvalidParameterException", Message: "ifRevisionArn: preview the update first; the confirmation names the revision it was previewed against"})
		return
	}
	in := struct {
		shapes.UpdateDaemonRequest
		IfRevisionArn string `json:"ifRevisionArn"`
	}{*up, ifRev}
	if err := c.call(r, s, "CapstanV1.UpdateDaemonIfUnchanged", in, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	http.Redirect(w, r, Prefix+"daemon?arn="+urlQuery(up.DaemonArn), http.StatusSeeOther)
}

func (c *Console) daemonRollback(w http.ResponseWriter, r *http.Request, s *session) {
	arn := r.PostFormValue("arn")
	if arn == "" {
		c.fail(w, r, s, &apiError{Status: 400, Type: "InvalidParameterException", Message: "arn: the daemon ARN is required"})
		return
	}
	in := map[string]any{"daemonArn": arn}
	if to := r.PostFormValue("toRevision"); to != "" {
		in["toRevisionArn"] = to
	}
	if err := c.call(r, s, "CapstanV1.RollbackDaemon", in, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	http.Redirect(w, r, Prefix+"daemon?arn="+urlQuery(arn), http.StatusSeeOther)
}

func urlQuery(s string) string { return template.URLQueryEscaper(s) }

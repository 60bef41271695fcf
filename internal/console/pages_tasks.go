package console

import (
	"context"
	"encoding/json"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

// logTail is how many lines the task page shows without its script.
const logTail = 100

// logWait is how long one follow call waits for a line (the API's most).
const logWait = 20

// logPage is CapstanV1.GetTaskLogs' answer, as used here.
type logPage struct {
	Container string `json:"container"`
	Events    []struct {
		Timestamp string `json:"timestamp"`
		Stream    string `json:"stream"`
		Message   string `json:"message"`
	} `json:"events"`
	NextToken  string `json:"nextToken"`
	Truncated  bool   `json:"truncated"`
	TaskStatus string `json:"taskStatus"`
}

// taskParams reads cluster, task and container of a task request.
func taskParams(r *http.Request) (cl, id, ctr string, err error) {
	q := r.URL.Query()
	cl, id, ctr = q.Get("cluster"), q.Get("task"), q.Get("container")
	switch {
	case cl == "" || len(cl) > 2048:
		err = invalid("cluster", "a cluster name is required (at most 2048 characters)")
	case id == "" || len(id) > 2048:
		err = invalid("task", "a task ID or ARN is required (at most 2048 characters)")
	case len(ctr) > 255:
		err = invalid("container", "a container name is at most 255 characters")
	case len(r.URL.Query().Get("after")) > 64:
		err = invalid("after", "a log position is at most 64 characters")
	}
	return cl, id, ctr, err
}

// taskRef reads and checks cluster, task and container of a task request:
// the task must be in the cluster, the container one of the task's.
func (c *Console) taskRef(r *http.Request, s *session) (*shapes.Task, string, error) {
	cl, id, ctr, err := taskParams(r)
	if err != nil {
		return nil, "", err
	}
	var out shapes.DescribeTasksResponse
	if err := c.call(r, s, "DescribeTasks", map[string]any{"cluster": cl, "tasks": []string{id}}, &out); err != nil {
		return nil, "", err
	}
	if len(out.Tasks) == 0 {
		reason := "MISSING"
		if len(out.Failures) > 0 && out.Failures[0].Reason != "" {
			reason = out.Failures[0].Reason
		}
		return nil, "", &apiError{Status: 400, Type: "InvalidParameterException", Message: "task: no task " + clip(id) + " in cluster " + clip(cl) + " (" + reason + ")"}
	}
	t := &out.Tasks[0]
	var names []string
	for _, k := range t.Containers {
		names = append(names, k.Name)
		if ctr == "" {
			ctr = k.Name
		}
	}
	if !slices.Contains(names, ctr) {
		return nil, "", invalid("container", "the task has no container %q (it has %s)", clip(ctr), strings.Join(names, ", "))
	}
	return t, ctr, nil
}

func (c *Console) taskPage(w http.ResponseWriter, r *http.Request, s *session) {
	t, ctr, err := c.taskRef(r, s)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	cl := lastPart(t.ClusterArn)
	data := map[string]any{"T": t, "ID": lastPart(t.TaskArn), "Cluster": cl, "Container": ctr,
		"InstanceID": lastPart(t.ContainerInstanceArn), "Lines": []struct{}{}}
	if strings.Contains(t.TaskDefinitionArn, ":daemon-task-definition/") {
		data["DaemonTaskDefinition"] = revisionLabel(t.TaskDefinitionArn)
	}
	// Without the script, the last lines; with it, the stream follows on.
	var lp logPage
	err = c.call(r, s, "CapstanV1.GetTaskLogs", map[string]any{"cluster": t.ClusterArn, "task": t.TaskArn, "container": ctr, "tail": logTail}, &lp)
	if err != nil {
		data["LogsError"] = err.Error()
	} else {
		data["Lines"] = lp.Events
	}
	if err == nil || !denied(err) {
		q := url.Values{"cluster": {cl}, "task": {lastPart(t.TaskArn)}, "container": {ctr}}
		if lp.NextToken != "" {
			q.Set("after", lp.NextToken)
		}
		data["LogsSrc"] = template.URL(Prefix + "task/logs?" + q.Encode())
	}
	c.render(w, r, http.StatusOK, "task", s, data)
}

// taskLogs streams a container's log lines as server-sent "line" events,
// following the task until it stops. Each page is CapstanV1.GetTaskLogs
// called as the user: the API's action, resource and checks (the task in
// the cluster, the container in the task), and nothing more. Bad input or
// a refusal answers before the stream starts, with its status.
func (c *Console) taskLogs(w http.ResponseWriter, r *http.Request, s *session) {
	cl, id, ctr, err := taskParams(r)
	if err != nil {
		http.Error(w, err.Error(), statusOf(err))
		return
	}
	in := map[string]any{"cluster": cl, "task": id}
	if ctr != "" {
		in["container"] = ctr
	}
	if after := r.URL.Query().Get("after"); after != "" {
		in["nextToken"] = after
	} else {
		in["tail"] = logTail
	}
	var lp logPage
	if err := c.call(r, s, "CapstanV1.GetTaskLogs", in, &lp); err != nil {
		http.Error(w, err.Error(), statusOf(err))
		return
	}
	delete(in, "tail")
	in["waitSeconds"] = logWait
	// A waiting call ends with the server too.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(c.ctx, cancel)()
	r = r.WithContext(ctx)
	st := startStream(w)
	for {
		for _, e := range lp.Events {
			b, _ := json.Marshal(map[string]string{"time": e.Timestamp, "stream": e.Stream, "message": e.Message})
			if !st.send("line", string(b)) {
				return
			}
		}
		if lp.NextToken != "" {
			in["nextToken"] = lp.NextToken
		}
		if len(lp.Events) == 0 && !lp.Truncated {
			if lp.TaskStatus == "STOPPED" {
				st.send("end", "the task stopped")
				return
			}
			if !st.keepalive() {
				return
			}
		}
		if !c.alive(s) {
			st.send("end", "signed out")
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-c.ctx.Done():
			return
		default:
		}
		lp = logPage{}
		if err := c.call(r, s, "CapstanV1.GetTaskLogs", in, &lp); err != nil {
			if r.Context().Err() == nil {
				st.send("failure", err.Error())
			}
			return
		}
	}
}

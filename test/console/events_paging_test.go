package console_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/testenv"
)

var eventRowRe = regexp.MustCompile(`<tr data-id="([0-9a-f-]+)">`)

// TestEventsTabPagesBack: the events tab shows a bounded page; a page
// before an event holds only older ones, is not followed live, and links
// back to the newest.
func TestEventsTabPagesBack(t *testing.T) {
	srv := testenv.StartServer(t, "")
	daemonFixture(t, srv)
	a := newBrowser(t, srv)
	a.signIn(adminKey, adminSecret)
	var ids []string
	waitFor(t, 30*time.Second, "two events of the cluster", func() bool {
		_, body := a.get("/console/cluster?name=apps&tab=events")
		ids = nil
		for _, m := range eventRowRe.FindAllStringSubmatch(body, -1) {
			ids = append(ids, m[1])
		}
		return len(ids) >= 2
	})
	resp, body := a.get("/console/cluster?name=apps&tab=events&before=" + ids[0])
	wantStatus(t, "events before the newest", resp, body, 200, `data-id="`+ids[1]+`"`, "before the page you came from", ">Newest</a>")
	if strings.Contains(body, `data-id="`+ids[0]+`"`) {
		t.Fatalf("the page before event %s shows it:\n%s", ids[0], body)
	}
	if liveSrcRe.MatchString(body) {
		t.Fatal("an older page is followed live")
	}
	resp, body = a.get("/console/cluster?name=apps&tab=events&before=" + ids[len(ids)-1])
	if strings.Contains(body, `data-id="`+ids[len(ids)-1]+`"`) {
		t.Fatalf("the page before the oldest event shows it:\n%s", body)
	}
	resp, body = a.get("/console/cluster?name=apps&tab=events&before=yesterday")
	wantStatus(t, "events before a bad ID", resp, body, 400, "before: must be an event ID")
}

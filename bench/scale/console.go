package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/codec"
	"github.com/capstanhq/capstan/internal/store"
)

// pages are K live daemon pages of the web console open during a rollout
// (-console-pages): each a session signed in as a browser does, holding
// the page's server-sent event stream. They measure the delay from a store
// change the page shows (the daemon's deployment or tasks, an instance of
// its cluster) to the page receiving its re-rendered part.
type pages struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	changes []time.Time // when changes the pages show were seen, in order
	delays  []time.Duration
	events  int
	bytes   int64 // of the events' data
	html    int   // events that sent the whole part (the rest are patches)
}

// openPages signs k sessions in and opens their daemon pages' streams.
func (h *harness) openPages(ctx context.Context, k int, daemonArn string) (*pages, error) {
	ctx, cancel := context.WithCancel(ctx)
	p := &pages{cancel: cancel}
	// Changes are timed as the server's store sees them, in its process.
	for _, prefix := range []string{"daemondeployments/" + clusterName + "/" + daemonName + "/", store.TaskPrefix(clusterName), store.ContainerInstancePrefix(clusterName)} {
		sub := h.srv.Store.Subscribe(prefix)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer sub.Close()
			for {
				changes, _, err := sub.Next(ctx)
				if err != nil {
					return
				}
				now := time.Now()
				shown := false
				for _, ch := range changes {
					if !strings.HasPrefix(ch.Key, "tasks/") || ch.Deleted {
						shown = true
						break
					}
					var g struct {
						Group string `json:"group"`
					}
					if codec.Unmarshal(ch.Value, &g) == nil && g.Group == "daemon:"+daemonName {
						shown = true
						break
					}
				}
				if shown {
					p.mu.Lock()
					p.changes = append(p.changes, now)
					p.mu.Unlock()
				}
			}
		}()
	}
	for i := range k {
		jar, _ := cookiejar.New(nil)
		c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		form := url.Values{"accessKeyId": {h.cfg.AdminKeyID}, "secretAccessKey": {h.cfg.AdminSecret}}
		resp, err := c.PostForm(h.url()+"/console/signin", form)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("console sign-in %d: %w", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			p.close()
			return nil, fmt.Errorf("console sign-in %d: HTTP %d", i, resp.StatusCode)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.url()+"/console/daemon/live?arn="+url.QueryEscape(daemonArn), nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err = c.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			p.close()
			return nil, fmt.Errorf("console live page %d: %v %v", i, err, resp)
		}
		p.wg.Add(1)
		go p.follow(resp)
	}
	return p, nil
}

// follow reads one page's stream: at each update (the whole part or a
// patch), the delay is from the first change the page had not shown yet.
func (p *pages) follow(resp *http.Response) {
	defer p.wg.Done()
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	shown := -1 // index of the last change before the previous event
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return
		}
		if strings.HasPrefix(line, "data: ") {
			p.mu.Lock()
			p.bytes += int64(len(line) - len("data: "))
			p.mu.Unlock()
			continue
		}
		if line != "event: html\n" && line != "event: patch\n" {
			continue
		}
		now := time.Now()
		p.mu.Lock()
		p.events++
		if line == "event: html\n" {
			p.html++
		}
		if shown >= 0 && shown+1 < len(p.changes) {
			p.delays = append(p.delays, now.Sub(p.changes[shown+1]))
		}
		shown = len(p.changes) - 1
		p.mu.Unlock()
	}
}

func (p *pages) close() {
	p.cancel()
	p.wg.Wait()
}

// report closes the pages and notes what they measured in r.
func (p *pages) report(r *Rollout, k int) {
	p.close()
	p.mu.Lock()
	defer p.mu.Unlock()
	r.ConsolePages, r.PageEvents, r.PageWholeEvents = k, p.events, p.html
	if p.events > 0 {
		r.PageBytesPerEvent = float64(p.bytes) / float64(p.events)
	}
	sort.Slice(p.delays, func(i, j int) bool { return p.delays[i] < p.delays[j] })
	r.PageDelayP50Ms = float64(pct(p.delays, 0.50)) / 1e6
	r.PageDelayP99Ms = float64(pct(p.delays, 0.99)) / 1e6
}

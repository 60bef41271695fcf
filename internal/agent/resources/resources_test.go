package resources

import (
	"errors"
	"testing"

	"github.com/capstanhq/capstan/internal/protocol"
)

func mem(n int) Need { return Need{MemoryMiB: n} }

func TestReserve(t *testing.T) {
	capacity := Capacity{CPU: 2048, MemoryMiB: 1124, ReservedMemoryMiB: 100}
	type step struct {
		op      string // reserve, release, releasing, force
		task    string
		need    Need
		wantErr string
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"fits", []step{{op: "reserve", task: "a", need: Need{CPU: 1024, MemoryMiB: 512}}}},
		{"memory after reserved memory", []step{
			{op: "reserve", task: "a", need: mem(724)},
			{op: "reserve", task: "b", need: mem(512), wantErr: "RESOURCE:MEMORY - task needs 512 MiB, 300 MiB free of 1024 MiB"},
		}},
		{"cpu", []step{
			{op: "reserve", task: "a", need: Need{CPU: 1024}},
			{op: "reserve", task: "b", need: Need{CPU: 2048}, wantErr: "RESOURCE:CPU - task needs 2048 CPU units, 1024 free of 2048"},
		}},
		{"release frees", []step{
			{op: "reserve", task: "a", need: mem(1024)},
			{op: "reserve", task: "b", need: mem(1), wantErr: "RESOURCE:MEMORY - task needs 1 MiB, 0 MiB free of 1024 MiB"},
			{op: "release", task: "a"},
			{op: "reserve", task: "b", need: mem(1024)},
		}},
		{"releasing still held", []step{
			{op: "reserve", task: "a", need: mem(1024)},
			{op: "releasing", task: "a"},
			{op: "reserve", task: "b", need: mem(1), wantErr: "RESOURCE:MEMORY"},
		}},
		{"idempotent", []step{
			{op: "reserve", task: "a", need: mem(1000)},
			{op: "reserve", task: "a", need: mem(1000)},
			{op: "release", task: "a"},
			{op: "release", task: "a"},
			{op: "reserve", task: "a", need: mem(1000)},
		}},
		{"reserved tcp port", []step{
			{op: "reserve", task: "a", need: Need{Ports: []Port{{22, "tcp"}}}, wantErr: "RESOURCE:PORTS - host port 22/tcp is reserved on this instance"},
			{op: "reserve", task: "a", need: Need{Ports: []Port{{22, "udp"}}}},
		}},
		{"port conflict", []step{
			{op: "reserve", task: "a", need: Need{Ports: []Port{{8080, ""}}}},
			{op: "reserve", task: "b", need: Need{Ports: []Port{{8080, "tcp"}}}, wantErr: "RESOURCE:PORTS - host port 8080/tcp is already used by another task"},
			{op: "reserve", task: "b", need: Need{Ports: []Port{{8080, "udp"}}}},
			{op: "reserve", task: "c", need: Need{Ports: []Port{{8080, "udp"}}}, wantErr: "RESOURCE:PORTS_UDP - host port 8080/udp is already used"},
		}},
		{"same port twice in one task", []step{
			{op: "reserve", task: "a", need: Need{Ports: []Port{{80, "tcp"}, {80, "tcp"}}}, wantErr: "RESOURCE:PORTS"},
		}},
		{"force overcommits", []step{
			{op: "force", task: "a", need: mem(2000)},
			{op: "reserve", task: "b", need: mem(1), wantErr: "RESOURCE:MEMORY - task needs 1 MiB, 0 MiB free of 1024 MiB"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New(capacity)
			for i, s := range tt.steps {
				var err error
				switch s.op {
				case "reserve":
					err = l.Reserve(s.task, s.need)
				case "release":
					l.Release(s.task)
				case "releasing":
					l.Releasing(s.task)
				case "force":
					l.Force(s.task, s.need)
				}
				if s.wantErr == "" {
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					continue
				}
				var sh *Shortage
				if !errors.As(err, &sh) {
					t.Fatalf("step %d: err = %v, want a shortage", i, err)
				}
				if got := err.Error(); len(got) < len(s.wantErr) || got[:len(s.wantErr)] != s.wantErr {
					t.Fatalf("step %d: err = %q, want prefix %q", i, got, s.wantErr)
				}
			}
		})
	}
}

func TestUnaccountedCapacity(t *testing.T) {
	l := New(Capacity{ReservedPorts: []int{}})
	if err := l.Reserve("a", Need{CPU: 1 << 20, MemoryMiB: 1 << 20, Ports: []Port{{22, "tcp"}}}); err != nil {
		t.Fatal(err)
	}
}

func TestAdmit(t *testing.T) {
	type holder struct {
		task      string
		need      Need
		releasing bool
	}
	tests := []struct {
		name    string
		held    []holder
		reqs    []Request
		want    []Verdict
		wantErr []string
	}{
		{
			name: "all fit",
			reqs: []Request{{Task: "a", Need: mem(300)}, {Task: "b", Need: mem(300)}},
			want: []Verdict{Admit, Admit},
		},
		{
			name: "too big rejected at once",
			reqs: []Request{{Task: "a", Need: mem(2000)}},
			want: []Verdict{Reject}, wantErr: []string{"RESOURCE:MEMORY - task needs 2000 MiB, 1000 MiB free of 1000 MiB"},
		},
		{
			name:    "held by running task: reject",
			held:    []holder{{"r", mem(700), false}},
			reqs:    []Request{{Task: "a", Need: mem(512)}},
			want:    []Verdict{Reject},
			wantErr: []string{"RESOURCE:MEMORY - task needs 512 MiB, 300 MiB free of 1000 MiB"},
		},
		{
			name: "held by stopping task: wait",
			held: []holder{{"s", mem(700), true}},
			reqs: []Request{{Task: "a", Need: mem(512)}},
			want: []Verdict{Wait},
		},
		{
			name: "daemon first even when it arrives last",
			reqs: []Request{
				{Task: "app", Kind: protocol.KindStandalone, Need: mem(600)},
				{Task: "svc", Kind: protocol.KindService, Need: mem(300)},
				{Task: "d", Kind: protocol.KindDaemon, Need: mem(600)},
			},
			// d and svc take 900; app waits this round (it fitted before
			// they were admitted) and is rejected on the next.
			want: []Verdict{Wait, Admit, Admit},
		},
		{
			name: "waiting daemon keeps its share from a later app",
			held: []holder{{"s", mem(800), true}},
			reqs: []Request{
				{Task: "app", Kind: protocol.KindStandalone, Need: mem(200)},
				{Task: "d", Kind: protocol.KindDaemon, Need: mem(900)},
			},
			// Free now 200, later 1000. d waits for 900 of later, leaving
			// 100: app (200) must wait although it fits now.
			want: []Verdict{Wait, Wait},
		},
		{
			name: "small app admitted beside a waiting daemon",
			held: []holder{{"s", mem(800), true}},
			reqs: []Request{
				{Task: "d", Kind: protocol.KindDaemon, Need: mem(850)},
				{Task: "app", Kind: protocol.KindStandalone, Need: mem(150)},
			},
			want: []Verdict{Wait, Admit},
		},
		{
			name: "already holding",
			held: []holder{{"a", mem(1000), false}},
			reqs: []Request{{Task: "a", Need: mem(1000)}},
			want: []Verdict{Admit},
		},
		{
			name: "port held by stopping task: wait; by running task: reject",
			held: []holder{
				{"s", Need{Ports: []Port{{80, "tcp"}}}, true},
				{"r", Need{Ports: []Port{{81, "tcp"}}}, false},
			},
			reqs: []Request{
				{Task: "a", Need: Need{Ports: []Port{{80, "tcp"}}}},
				{Task: "b", Need: Need{Ports: []Port{{81, "tcp"}}}},
				{Task: "c", Need: Need{Ports: []Port{{2375, "tcp"}}}},
			},
			want: []Verdict{Wait, Reject, Reject},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New(Capacity{CPU: 4096, MemoryMiB: 1000})
			for _, h := range tt.held {
				l.Force(h.task, h.need)
				if h.releasing {
					l.Releasing(h.task)
				}
			}
			got := l.Admit(tt.reqs)
			for i, d := range got {
				if d.Task != tt.reqs[i].Task {
					t.Fatalf("decision %d is for %s, want %s", i, d.Task, tt.reqs[i].Task)
				}
				if d.Verdict != tt.want[i] {
					t.Errorf("%s: %v (%v), want %v", d.Task, d.Verdict, d.Err, tt.want[i])
				}
				if d.Verdict == Admit != l.Holds(d.Task) {
					t.Errorf("%s: verdict %v but holds=%v", d.Task, d.Verdict, l.Holds(d.Task))
				}
				if i < len(tt.wantErr) && (d.Err == nil || d.Err.Error() != tt.wantErr[i]) {
					t.Errorf("%s: err %v, want %q", d.Task, d.Err, tt.wantErr[i])
				}
			}
		})
	}
}

// TestAdmitTrickle is the ECS agent's trickle test with priorities: three
// 512 MiB tasks on 1024 MiB start two now; the third, once nothing is
// stopping, is refused rather than left pending.
func TestAdmitTrickle(t *testing.T) {
	l := New(Capacity{MemoryMiB: 1024})
	reqs := []Request{{Task: "a", Need: mem(512)}, {Task: "b", Need: mem(512)}, {Task: "c", Need: mem(512)}}
	d := l.Admit(reqs)
	if d[0].Verdict != Admit || d[1].Verdict != Admit || d[2].Verdict != Wait {
		t.Fatalf("first round: %+v", d)
	}
	d = l.Admit(reqs[2:])
	if d[0].Verdict != Reject {
		t.Fatalf("second round: %+v", d)
	}
	// If a stops instead, c waits, then fits once a is released.
	l.Releasing("a")
	if d = l.Admit(reqs[2:]); d[0].Verdict != Wait {
		t.Fatalf("while a stops: %+v", d)
	}
	l.Release("a")
	if d = l.Admit(reqs[2:]); d[0].Verdict != Admit {
		t.Fatalf("after a stopped: %+v", d)
	}
	if u := l.Usage(); u.MemoryMiB != 1024 || u.Tasks != 2 {
		t.Fatalf("usage %+v", u)
	}
}

package admin_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/admin"
)

// recordingLane is a one-slot lane that logs what happens to it.
type recordingLane struct {
	mu   sync.Mutex
	held int
	log  []string
}

func (l *recordingLane) Acquire(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held++
	l.log = append(l.log, "acquire")
	return nil
}

func (l *recordingLane) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held--
	l.log = append(l.log, "release")
}

func (l *recordingLane) note(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held > 0 {
		s += " (lane held)"
	}
	l.log = append(l.log, s)
}

func (l *recordingLane) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.Join(l.log, ", ")
	l.log = nil
	return s
}

// laneRuntime notes each refresh in the lane's log.
type laneRuntime struct {
	admin.Runtime
	lane *recordingLane
}

func (r *laneRuntime) Refresh(ctx context.Context) error {
	r.lane.note("refresh")
	return r.Runtime.Refresh(ctx)
}

// A write holds the lane for its work but not across the snapshot refresh
// (which takes the lane itself, so writes arriving meanwhile can commit and
// share the next rebuild); reads do not take it.
func TestWritesHoldTheLaneExceptAcrossTheRefresh(t *testing.T) {
	lane := &recordingLane{}
	rt := &laneRuntime{lane: lane}
	e := setup(t, func(o *options) { o.lane, o.runtime = lane, rt })
	rt.Runtime = runtimeAdapter{e.rt}

	p := e.do("POST", "/admin/v1/principals", map[string]any{"name": "app", "kind": "machine"}).json(t)
	if got, want := lane.take(), "acquire, release, refresh, acquire, release"; got != want {
		t.Fatalf("create: %s, want %s", got, want)
	}
	if e.rt.Current().Principal(p["id"].(string)) == nil {
		t.Fatal("the created principal is not in the snapshot the write answered after")
	}
	id := p["id"].(string)
	if r := e.do("PATCH", "/admin/v1/principals/"+id, map[string]any{"allowed_models": []string{"*"}}); r.status != 200 {
		t.Fatalf("patch: %d %s", r.status, r.body)
	}
	if got, want := lane.take(), "acquire, release, refresh, acquire, release"; got != want {
		t.Fatalf("patch: %s, want %s", got, want)
	}
	// A refused write holds the lane and releases it; nothing is refreshed.
	if r := e.do("PATCH", "/admin/v1/principals/"+id, map[string]any{}); r.status != 400 {
		t.Fatalf("empty patch: %d", r.status)
	}
	if got, want := lane.take(), "acquire, release"; got != want {
		t.Fatalf("refused write: %s, want %s", got, want)
	}
	if r := e.do("GET", "/admin/v1/principals/"+id, nil); r.status != 200 {
		t.Fatalf("get: %d", r.status)
	}
	if got := lane.take(); got != "" {
		t.Fatalf("a read used the lane: %s", got)
	}
	// A write that waits on a provider does not hold up the others.
	e.do("POST", "/admin/v1/upstreams/up_missing/oauth/revoke", nil)
	if got := lane.take(); got != "" {
		t.Fatalf("an OAuth call used the lane: %s", got)
	}
}

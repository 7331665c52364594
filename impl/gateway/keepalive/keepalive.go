package keepalive

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/relay"
	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/service"
)

// Job types.
const (
	JobType    = "adaptive:cache_keepalive"
	CleanupJob = "keepalive_cleanup"
	// JobVersion is bound into the snapshot's associated data: a snapshot
	// sealed for another job version does not open.
	JobVersion = 1
)

// Outcomes of tracking a turn and of a refresh job (metric label values).
const (
	OutcomeScheduled       = "scheduled"
	OutcomeNotWaiting      = "not_waiting"
	OutcomeNoBreakpoint    = "no_breakpoint"
	OutcomeTooLarge        = "snapshot_too_large"
	OutcomeDropped         = "dropped"
	OutcomeRefreshed       = "refreshed"
	OutcomeCacheMiss       = "cache_miss"
	OutcomeStaleGeneration = "stale_generation"
	OutcomeDecryptFailed   = "decrypt_failed"
	OutcomeUnsupported     = "unsupported_provider"
	OutcomeDispatchError   = "dispatch_error"
	OutcomeDisabled        = "disabled"
	OutcomeBoundReached    = "bound_reached"
	OutcomeSessionGone     = "session_gone"
	// OutcomeRefreshRefused: the provider refused the upstream's OAuth
	// refresh grant; its token is revoked and is not sent.
	OutcomeRefreshRefused = "refresh_refused"
)

var trackOutcomes = []string{OutcomeScheduled, OutcomeNotWaiting, OutcomeNoBreakpoint, OutcomeTooLarge, OutcomeDropped, "error"}
var refreshOutcomes = []string{OutcomeRefreshed, OutcomeCacheMiss, OutcomeStaleGeneration, OutcomeDecryptFailed, OutcomeUnsupported,
	OutcomeDispatchError, OutcomeDisabled, OutcomeBoundReached, OutcomeSessionGone, OutcomeRefreshRefused}

// Metrics of keep-alive.
type Metrics struct {
	Tracked  *prometheus.CounterVec
	Refresh  *prometheus.CounterVec
	Sessions prometheus.Counter
}

// NewMetrics registers keep-alive's metrics with every label value.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Tracked: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svc_keepalive_turns_total",
			Help: "Turns of keep-alive principals by what tracking did."}, []string{"outcome"}),
		Refresh: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svc_keepalive_refresh_total",
			Help: "Keep-alive refresh jobs by outcome (terminal and no-op outcomes are not retried)."}, []string{"outcome"}),
	}
	reg.MustRegister(m.Tracked, m.Refresh)
	for _, o := range trackOutcomes {
		m.Tracked.WithLabelValues(o)
	}
	for _, o := range refreshOutcomes {
		m.Refresh.WithLabelValues(o)
	}
	return m
}

func (m *Metrics) track(o string) {
	if m != nil {
		m.Tracked.WithLabelValues(o).Inc()
	}
}

func (m *Metrics) refresh(o string) {
	if m != nil {
		m.Refresh.WithLabelValues(o).Inc()
	}
}

// Box seals and opens snapshots.
type Box interface {
	Seal(plaintext, associatedData []byte) ([]byte, error)
	Open(ciphertext, associatedData []byte) ([]byte, error)
}

// Enqueuer puts durable jobs in the scheduler, lists and deletes them.
type Enqueuer interface {
	Enqueue(ctx context.Context, e scheduler.Enqueue) (bool, int64, error)
	Family(ctx context.Context, jobType, prefix string) ([]scheduler.JobInfo, error)
	DeleteJobs(ctx context.Context, ids []int64) (int64, error)
}

// Service tracks turns and runs refreshes.
type Service struct {
	Store store.Store
	Box   Box
	Jobs  Enqueuer
	HTTP  *http.Client
	service.Base
	Metrics *Metrics
	// Upstream yields the request-path view of an upstream (opened
	// credential), nil when it cannot serve.
	Upstream func(id string) *snapshot.Upstream
	// Purged counts rows removed by cleanup
	// (svc_scheduler_prompt_cache_purge_rows_removed_total).
	Purged prometheus.Counter

	// queue is made on first use by Observe or Run, so turns observed
	// before the worker runs wait for it instead of being dropped.
	queueOnce sync.Once
	queue     chan relay.Exchange
}

func (s *Service) turns() chan relay.Exchange {
	s.queueOnce.Do(func() { s.queue = make(chan relay.Exchange, 1024) })
	return s.queue
}

// Run tracks the observed turns until ctx ends.
func (s *Service) Run(ctx context.Context) {
	queue := s.turns()
	for {
		select {
		case <-ctx.Done():
			return
		case x := <-queue:
			if err := s.Track(ctx, x); err != nil {
				s.Metrics.track("error")
				s.Logger.Warn("keep-alive tracking", "principal_id", x.PrincipalID, "error", err)
			}
		}
	}
}

// Observe implements relay.Observer: it never blocks the request path; when
// the queue is full the turn is not tracked.
func (s *Service) Observe(x relay.Exchange) {
	select {
	case s.turns() <- x:
	default:
		s.Metrics.track(OutcomeDropped)
	}
}

// AD is the associated data a snapshot is sealed with: principal, session
// hash, upstream, generation and job type/version. Changing any of them
// makes the snapshot undecryptable.
func AD(principalID, sessionHash, upstreamID string, generation int64) []byte {
	return []byte(fmt.Sprintf("keepalive-snapshot|%s|v%d|%s|%s|%s|%d", JobType, JobVersion, principalID, sessionHash, upstreamID, generation))
}

type payload struct {
	SessionID  string `json:"session_id"`
	Generation int64  `json:"generation"`
	Refresh    int64  `json:"refresh"`
	Version    int    `json:"version"`
}

// Key is the idempotency key of a session's refresh n of generation.
func Key(sessionID string, generation, n int64) string {
	return fmt.Sprintf("%s:%s:%d:%d", JobType, sessionID, generation, n)
}

// Track records a finished turn: a new generation of the conversation's
// session, its sealed refresh request, and the first refresh at anchor +
// TTL − lead, when the classifier says the user is awaited.
func (s *Service) Track(ctx context.Context, x relay.Exchange) error {
	cfg := ParseConfig(x.KeepAlive)
	if cfg == nil || x.Status != http.StatusOK {
		return nil
	}
	p, err := ParsePrompt(x.PrincipalID, x.Request)
	if err != nil {
		s.Metrics.track(OutcomeNoBreakpoint)
		return nil
	}
	if int64(len(p.Refresh)) > cfg.SnapshotMaxBytes {
		s.Metrics.track(OutcomeTooLarge)
		return nil
	}
	verdict := cfg.Classify(ReadAnswer(x.Body, x.SSE))
	budget := cfg.MaxRefreshesPerSession
	switch verdict {
	case Ambiguous:
		budget = min(budget, 1)
	case NotWaiting:
		budget = 0
	}
	anchor := x.Anchor
	if anchor.IsZero() {
		anchor = s.Clock.Now()
	}
	// The session row comes first: its generation is bound into the seal.
	sess, err := s.Store.UpsertKeepAliveSession(ctx, store.KeepAliveSession{PrincipalID: x.PrincipalID, SessionHash: p.Hash,
		UpstreamID: x.UpstreamID, Model: p.Model, TTL: p.TTL, TurnStartedAt: anchor, AnchorAt: anchor, ExpiresAt: anchor.Add(p.TTL),
		RefreshBudget: budget, Snapshot: []byte{0}})
	if err != nil {
		return err
	}
	if budget == 0 {
		s.Metrics.track(OutcomeNotWaiting)
		_, err := s.Store.StopKeepAliveSession(ctx, sess.ID, sess.Generation, OutcomeNotWaiting, s.Clock.Now())
		return err
	}
	sealed, err := s.Box.Seal(p.Refresh, AD(x.PrincipalID, p.Hash, x.UpstreamID, sess.Generation))
	if err != nil {
		return err
	}
	sess.Snapshot = sealed
	// Same generation, now with the sealed snapshot.
	if sess, err = s.storeSnapshot(ctx, sess); err != nil {
		return err
	}
	at := anchor.Add(p.TTL - cfg.Lead(p.TTL))
	if err := s.enqueue(ctx, sess, 1, at); err != nil {
		return err
	}
	s.Metrics.track(OutcomeScheduled)
	return nil
}

// storeSnapshot writes the sealed snapshot of the session's current
// generation (a second upsert would start a new generation).
func (s *Service) storeSnapshot(ctx context.Context, sess *store.KeepAliveSession) (*store.KeepAliveSession, error) {
	if err := s.Store.SetKeepAliveSnapshot(ctx, sess.ID, sess.Generation, sess.Snapshot); err != nil {
		return nil, err
	}
	return sess, nil
}

func (s *Service) enqueue(ctx context.Context, sess *store.KeepAliveSession, n int64, at time.Time) error {
	b, _ := json.Marshal(payload{SessionID: sess.ID, Generation: sess.Generation, Refresh: n, Version: JobVersion})
	_, _, err := s.Jobs.Enqueue(ctx, scheduler.Enqueue{Type: JobType, IdempotencyKey: Key(sess.ID, sess.Generation, n), Payload: b, RunAt: at})
	return err
}

// Types registers the refresh job (max_attempts 1) and the cleanup.
func (s *Service) Types(cleanupEvery time.Duration) []scheduler.Type {
	return []scheduler.Type{
		{Name: JobType, Class: scheduler.KeepAlive, Timeout: time.Minute, Handler: s.refreshJob},
		{Name: CleanupJob, Class: scheduler.Maintenance, Every: cleanupEvery, Timeout: time.Minute, Handler: s.cleanup},
	}
}

// refreshJob replays the cached prefix. Every outcome but success is
// terminal or a no-op: nothing is retried.
func (s *Service) refreshJob(ctx context.Context, j scheduler.Job) (scheduler.Outcome, error) {
	out, outcome := s.refresh(ctx, j)
	s.Metrics.refresh(outcome)
	return out, nil
}

func (s *Service) refresh(ctx context.Context, j scheduler.Job) (scheduler.Outcome, string) {
	var p payload
	if json.Unmarshal(j.Payload, &p) != nil || p.SessionID == "" || p.Version != JobVersion {
		return scheduler.OutcomeNoop, OutcomeStaleGeneration
	}
	sess, err := s.Store.GetKeepAliveSession(ctx, p.SessionID)
	if err != nil {
		return scheduler.OutcomeNoop, OutcomeSessionGone
	}
	if sess.Generation != p.Generation || sess.State != "active" {
		return scheduler.OutcomeNoop, OutcomeStaleGeneration
	}
	stop := func(reason string) (scheduler.Outcome, string) {
		_, _ = s.Store.StopKeepAliveSession(ctx, sess.ID, sess.Generation, reason, s.Clock.Now())
		return scheduler.OutcomeSkip, reason
	}
	pr, err := s.Store.GetPrincipal(ctx, sess.PrincipalID)
	if err != nil || !pr.Enabled {
		return stop(OutcomeDisabled)
	}
	cfg := ParseConfig(pr.CacheKeepalive)
	if cfg == nil {
		return stop(OutcomeDisabled)
	}
	now := s.Clock.Now()
	if sess.Refreshes >= sess.RefreshBudget || now.Sub(sess.TurnStartedAt) > time.Duration(cfg.MaxTotalDurationSecs)*time.Second {
		return stop(OutcomeBoundReached)
	}
	up := s.Upstream(sess.UpstreamID)
	if up != nil && up.RefreshRefused {
		return stop(OutcomeRefreshRefused)
	}
	if up == nil || !up.Routable() || (up.Kind != store.KindVendorAPIKey && up.Kind != store.KindVendorOAuth) {
		return stop(OutcomeUnsupported)
	}
	body, err := s.Box.Open(sess.Snapshot, AD(sess.PrincipalID, sess.SessionHash, sess.UpstreamID, sess.Generation))
	if err != nil {
		s.Logger.Warn("keep-alive snapshot does not decrypt", "session_id", sess.ID)
		return stop(OutcomeDecryptFailed)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, up.MessagesURL, bytes.NewReader(body))
	if err != nil {
		return stop(OutcomeDispatchError)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	credential.Set(req.Header, up.CredentialKind, up.Credential)
	resp, err := credential.Client(s.HTTP, time.Minute).Do(req)
	if err != nil {
		return stop(OutcomeDispatchError)
	}
	anchor := s.Clock.Now()
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		s.Logger.Info("keep-alive refresh refused", "session_id", sess.ID, "status", resp.StatusCode)
		return stop(OutcomeDispatchError)
	}
	var u struct {
		Usage struct {
			CacheReadInputTokens int64 `json:"cache_read_input_tokens"`
		} `json:"usage"`
	}
	_ = json.Unmarshal(rb, &u)
	if u.Usage.CacheReadInputTokens == 0 {
		// The cache had expired: this request wrote it anew. Stop; the
		// next turn of the conversation starts over.
		return stop(OutcomeCacheMiss)
	}
	ok, err := s.Store.RecordKeepAliveRefresh(ctx, sess.ID, sess.Generation, anchor, anchor.Add(sess.TTL))
	if err != nil || !ok {
		return scheduler.OutcomeNoop, OutcomeStaleGeneration
	}
	next := anchor.Add(sess.TTL - cfg.Lead(sess.TTL))
	done := sess.Refreshes + 1
	if done >= sess.RefreshBudget || next.Sub(sess.TurnStartedAt) > time.Duration(cfg.MaxTotalDurationSecs)*time.Second {
		_, _ = s.Store.StopKeepAliveSession(ctx, sess.ID, sess.Generation, OutcomeBoundReached, s.Clock.Now())
		return scheduler.OutcomeDone, OutcomeRefreshed
	}
	if err := s.enqueue(ctx, sess, p.Refresh+1, next); err != nil {
		s.Logger.Warn("schedule next keep-alive refresh", "session_id", sess.ID, "error", err)
	}
	return scheduler.OutcomeDone, OutcomeRefreshed
}

// cleanup deletes expired sessions, terminal keep-alive job rows and old
// Pending keep-alive rows (stale generation or session gone). Queued and
// Running rows are never deleted: DeleteJobs refuses those states.
func (s *Service) cleanup(ctx context.Context, _ scheduler.Job) (scheduler.Outcome, error) {
	now := s.Clock.Now()
	n, err := s.Store.DeleteExpiredKeepAliveSessions(ctx, now.Add(-time.Hour))
	if err != nil {
		return "", err
	}
	jobs, err := s.Jobs.Family(ctx, JobType, JobType+":")
	if err != nil {
		return "", err
	}
	var ids []int64
	for _, j := range jobs {
		switch j.State {
		case scheduler.StateDone, scheduler.StateFailed, scheduler.StateKilled:
			ids = append(ids, j.ID)
		case scheduler.StatePending:
			if s.stalePending(ctx, j) {
				ids = append(ids, j.ID)
			}
		}
	}
	removed, err := s.Jobs.DeleteJobs(ctx, ids)
	if err != nil {
		return "", err
	}
	total := n + removed
	if s.Purged != nil {
		s.Purged.Add(float64(total))
	}
	if total == 0 {
		return scheduler.OutcomeNoop, nil
	}
	s.Logger.Info("keep-alive cleanup", "sessions", n, "job_rows", removed)
	return scheduler.OutcomeDone, nil
}

// stalePending: a Pending refresh whose session is gone or moved on.
func (s *Service) stalePending(ctx context.Context, j scheduler.JobInfo) bool {
	var sessionID string
	var gen int64
	var n int64
	// Key: adaptive:cache_keepalive:{session}:{generation}:{n}
	rest := j.IdempotencyKey[len(JobType)+1:]
	if _, err := fmt.Sscanf(replaceColons(rest), "%s %d %d", &sessionID, &gen, &n); err != nil {
		return false
	}
	sess, err := s.Store.GetKeepAliveSession(ctx, sessionID)
	if errors.Is(err, store.ErrNotFound) {
		return true
	}
	return err == nil && (sess.Generation != gen || sess.State != "active")
}

func replaceColons(s string) string {
	b := []byte(s)
	for i := range b {
		if b[i] == ':' {
			b[i] = ' '
		}
	}
	return string(b)
}

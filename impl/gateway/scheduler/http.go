package scheduler

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// RecurringJob is one periodic job type in the status response.
// NextRunAt is the earliest run time of the type's queued jobs in the job
// table (null when nothing is queued: no producer pushed its ticks);
// OverdueSecs is how long that run is past due (0 when in the future): a
// growing value is a stalled cron.
type RecurringJob struct {
	JobType           string     `json:"job_type"`
	RetryClass        string     `json:"retry_class"`
	EverySecs         int64      `json:"every_secs"`
	NextRunAt         *time.Time `json:"next_run_at"`
	NextRunAtUnixSecs *int64     `json:"next_run_at_unix_secs"`
	OverdueSecs       int64      `json:"overdue_secs"`
}

// Status is the body of GET /admin/scheduler/status.
type Status struct {
	RecurringJobs []RecurringJob `json:"recurring_jobs"`
	// JobTypes lists every registered job type with its retry class.
	JobTypes []JobTypeInfo `json:"job_types"`
	// States counts the most recent jobs (up to 1000) by seed state, so a
	// stall shows as a growing Pending/Queued count.
	States map[string]int `json:"states"`
	// Oldest due job still waiting, when any: an operator sees a stall here.
	OldestQueuedAt *time.Time `json:"oldest_queued_at"`
}

// JobTypeInfo describes a registered job type.
type JobTypeInfo struct {
	JobType     string `json:"job_type"`
	RetryClass  string `json:"retry_class"`
	MaxAttempts int    `json:"max_attempts"`
}

// Failure is one failure ticket: a job in state Failed or Killed.
type Failure struct {
	ID             int64     `json:"id"`
	JobType        string    `json:"job_type"`
	IdempotencyKey string    `json:"idempotency_key"`
	State          string    `json:"state"`
	Attempt        int       `json:"attempt"`
	MaxAttempts    int       `json:"max_attempts"`
	LastError      string    `json:"last_error"`
	FailedAt       time.Time `json:"failed_at"`
}

// JobView is one job in GET /admin/scheduler/jobs.
type JobView struct {
	ID                  int64     `json:"id"`
	JobType             string    `json:"job_type"`
	IdempotencyKey      string    `json:"idempotency_key"`
	State               string    `json:"state"`
	Attempt             int       `json:"attempt"`
	MaxAttempts         int       `json:"max_attempts"`
	ScheduledAt         time.Time `json:"scheduled_at"`
	ScheduledAtUnixSecs int64     `json:"scheduled_at_unix_secs"`
}

// listLimit bounds one listing; the newest rows are the interesting ones.
const listLimit = 1000

// StatusNow computes the scheduler status.
func (s *Scheduler) StatusNow(r *http.Request) (*Status, error) {
	st := &Status{States: map[string]int{}, RecurringJobs: []RecurringJob{}, JobTypes: []JobTypeInfo{}}
	next, err := s.NextRunAt(r.Context())
	if err != nil {
		return nil, err
	}
	now := s.Clock.Now()
	for _, t := range s.Types() {
		st.JobTypes = append(st.JobTypes, JobTypeInfo{JobType: t.Name, RetryClass: t.Class.Name, MaxAttempts: t.Class.MaxAttempts})
		if t.Every > 0 {
			rj := RecurringJob{JobType: t.Name, RetryClass: t.Class.Name, EverySecs: int64(t.Every / time.Second)}
			if n, ok := next[t.Name]; ok {
				n = n.UTC()
				unix := n.Unix()
				rj.NextRunAt, rj.NextRunAtUnixSecs = &n, &unix
				if late := now.Sub(n); late > 0 {
					rj.OverdueSecs = int64(late / time.Second)
				}
			}
			st.RecurringJobs = append(st.RecurringJobs, rj)
		}
	}
	res, err := s.client.JobList(r.Context(), river.NewJobListParams().Kinds(Kind).First(listLimit).
		OrderBy(river.JobListOrderByTime, river.SortOrderDesc).
		States(allStates...))
	if err != nil {
		return nil, err
	}
	for _, j := range res.Jobs {
		st.States[StateOf(j.State)]++
		if (j.State == rivertype.JobStateAvailable || j.State == rivertype.JobStateRetryable) && !j.ScheduledAt.After(now) {
			if st.OldestQueuedAt == nil || j.ScheduledAt.Before(*st.OldestQueuedAt) {
				t := j.ScheduledAt.UTC()
				st.OldestQueuedAt = &t
			}
		}
	}
	return st, nil
}

// Failures lists the newest failure tickets (at most listLimit), newest
// first, optionally of one job type. Order and filter are in the query, so
// old tickets of other types never crowd out the ones asked for.
func (s *Scheduler) Failures(r *http.Request, jobType string) ([]Failure, error) {
	p := river.NewJobListParams().Kinds(Kind).First(listLimit).
		States(rivertype.JobStateDiscarded, rivertype.JobStateCancelled).
		// "time" of finalized states is finalized_at (River refuses an
		// explicit finalized_at order with only finalized states).
		OrderBy(river.JobListOrderByTime, river.SortOrderDesc)
	if jobType != "" {
		p = p.Where(`args ->> 'job_type' = @job_type`, river.NamedArgs{"job_type": jobType})
	}
	res, err := s.client.JobList(r.Context(), p)
	if err != nil {
		return nil, err
	}
	out := []Failure{}
	for _, j := range res.Jobs {
		var a Args
		_ = json.Unmarshal(j.EncodedArgs, &a)
		f := Failure{ID: j.ID, JobType: a.JobType, IdempotencyKey: a.IdempotencyKey, State: StateOf(j.State),
			Attempt: j.Attempt, MaxAttempts: j.MaxAttempts}
		if n := len(j.Errors); n > 0 {
			f.LastError = Redact(j.Errors[n-1].Error)
			f.FailedAt = j.Errors[n-1].At.UTC()
		}
		if j.FinalizedAt != nil {
			f.FailedAt = j.FinalizedAt.UTC()
		}
		out = append(out, f)
	}
	return out, nil
}

// Handler serves GET /admin/scheduler/status and /admin/scheduler/failures.
// Mount it behind the admin authentication.
func (s *Scheduler) Handler() http.Handler {
	if s.down != nil {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { s.serveDown(w) })
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/scheduler/status", func(w http.ResponseWriter, r *http.Request) {
		st, err := s.StatusNow(r)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
	// Jobs of one type, optionally one cycle-key family: where an operator
	// sees what a watchdog sees (state, key, when due).
	mux.HandleFunc("GET /admin/scheduler/jobs", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("job_type") == "" {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{
				"code": "invalid_request", "message": "job_type is required"}})
			return
		}
		js, err := s.Family(r.Context(), q.Get("job_type"), q.Get("key_prefix"))
		if err != nil {
			writeErr(w, err)
			return
		}
		out := make([]JobView, 0, len(js))
		for _, j := range js {
			out = append(out, JobView{ID: j.ID, JobType: j.Type, IdempotencyKey: j.IdempotencyKey, State: j.State,
				Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, ScheduledAt: j.ScheduledAt.UTC(), ScheduledAtUnixSecs: j.ScheduledAt.Unix()})
		}
		writeJSON(w, http.StatusOK, map[string]any{"jobs": out})
	})
	mux.HandleFunc("GET /admin/scheduler/failures", func(w http.ResponseWriter, r *http.Request) {
		fs, err := s.Failures(r, r.URL.Query().Get("job_type"))
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"failures": fs})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, err error) {
	writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": map[string]string{
		"code": "storage_unavailable", "message": Redact(err.Error())}})
}

package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// ErrUnavailable is returned by a scheduler that failed to start on this
// replica: nothing is enqueued, listed or run here.
var ErrUnavailable = errors.New("the durable scheduler is not running on this replica")

// Down returns a scheduler that failed to start because of cause: the
// replica keeps serving proxy traffic without it. svc_scheduler_init_failure
// is set to 1; Enqueue and the listings fail with ErrUnavailable (callers
// log and go on, as with any enqueue failure), the admin endpoints answer
// 503 scheduler_unavailable with the cause. Restarting the replica after
// fixing the cause starts the scheduler; other replicas' schedulers run
// the jobs meanwhile.
func Down(types []Type, o Options, cause error) *Scheduler {
	s, err := newScheduler(types, o)
	if err != nil {
		s, _ = newScheduler(nil, o) // the types were the cause; still report it
	}
	s.client = downClient{}
	s.down = cause
	if o.Metrics != nil {
		o.Metrics.InitFailure.Set(1)
	}
	return s
}

// Unavailable returns the reason the scheduler is down, or nil.
func (s *Scheduler) Unavailable() error { return s.down }

// serveDown answers every scheduler endpoint of a down scheduler.
func (s *Scheduler) serveDown(w http.ResponseWriter) {
	writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": map[string]string{
		"code":    "scheduler_unavailable",
		"message": Redact(fmt.Sprintf("the durable scheduler failed to start on this replica (svc_scheduler_init_failure 1): %v", s.down)),
	}})
}

// downClient stands in for River on a replica whose scheduler did not start.
type downClient struct{}

func (downClient) Start(context.Context) error { return ErrUnavailable }
func (downClient) Stop(context.Context) error  { return nil }
func (downClient) Insert(context.Context, river.JobArgs, *river.InsertOpts) (*rivertype.JobInsertResult, error) {
	return nil, ErrUnavailable
}
func (downClient) JobList(context.Context, *river.JobListParams) (*river.JobListResult, error) {
	return nil, ErrUnavailable
}
func (downClient) JobGet(context.Context, int64) (*rivertype.JobRow, error) {
	return nil, ErrUnavailable
}
func (downClient) JobCancel(context.Context, int64) (*rivertype.JobRow, error) {
	return nil, ErrUnavailable
}
func (downClient) JobDeleteMany(context.Context, *river.JobDeleteManyParams) (*river.JobDeleteManyResult, error) {
	return nil, ErrUnavailable
}

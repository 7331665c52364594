package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// AdminLoad is one run of admin writes: principals created and patched by
// concurrent workers, each write timed.
type AdminLoad struct {
	Creates, Patches []time.Duration
	Elapsed          time.Duration
}

// PerSecond is writes of one kind over the run's time.
func (a AdminLoad) PerSecond(n int) float64 {
	if a.Elapsed <= 0 {
		return 0
	}
	return float64(n) / a.Elapsed.Seconds()
}

// HammerAdmin runs workers that each create a principal, then patch it
// (its allowed models), until total writes are done; worker w sends to
// admins[w % len(admins)] (replicas share the load). Any failed write ends
// the run with an error. prefix keeps names unique across runs.
func HammerAdmin(ctx context.Context, admins []string, token, prefix string, workers, total int) (AdminLoad, error) {
	var (
		mu    sync.Mutex
		out   AdminLoad
		first error
		next  atomic.Int64
		wg    sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	defer c.CloseIdleConnections()
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		cancel()
	}
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := admins[w%len(admins)] + "/admin/v1/principals"
			for i := 0; ; i++ {
				if next.Add(2) > int64(total)+1 {
					return
				}
				t0 := time.Now()
				m, err := adminDo(ctx, c, http.MethodPost, base, token, map[string]any{
					"name": fmt.Sprintf("%s-%d-%d", prefix, w, i), "kind": "machine", "allowed_models": []string{"claude-*"}})
				if err != nil {
					fail(err)
					return
				}
				t1 := time.Now()
				id, _ := m["id"].(string)
				if _, err := adminDo(ctx, c, http.MethodPatch, base+"/"+id, token, map[string]any{"allowed_models": []string{"*"}}); err != nil {
					fail(err)
					return
				}
				t2 := time.Now()
				mu.Lock()
				out.Creates = append(out.Creates, t1.Sub(t0))
				out.Patches = append(out.Patches, t2.Sub(t1))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	out.Elapsed = time.Since(start)
	return out, first
}

func adminDo(ctx context.Context, c *http.Client, method, url, token string, body any) (map[string]any, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		return nil, fmt.Errorf("%s %s: %d %s", method, url, res.StatusCode, out)
	}
	var m map[string]any
	return m, json.Unmarshal(out, &m)
}

// Slowdown compares a latency series under load with one without:
// loaded ÷ quiet at a percentile.
func Slowdown(quiet, loaded []time.Duration, p float64) float64 {
	q := Percentile(quiet, p)
	if q <= 0 {
		return 0
	}
	return float64(Percentile(loaded, p)) / float64(q)
}

// Stalled reports whether any request took longer than limit: a proxy
// path waiting on an admin write (a lock held across a rebuild, a
// database writer it queues behind) shows as such outliers rather than in
// the median.
func Stalled(loaded []time.Duration, limit time.Duration) bool {
	for _, d := range loaded {
		if d > limit {
			return true
		}
	}
	return false
}

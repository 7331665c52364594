package limits_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/money"
)

func TestParseBudget(t *testing.T) {
	ls := parse(t, `[{"kind":"usd","window_secs":86400,"limit":"25.00"},{"kind":"usd","window_secs":86400,"limit":"10.5"}]`)
	if len(ls) != 1 || ls[0] != (limits.Limit{Kind: limits.USD, Window: 24 * time.Hour, Max: 10_500_000_000}) {
		t.Fatalf("parsed %+v", ls)
	}
	if s := ls[0].String(); s != "budget of 10.50 USD per 86400s" {
		t.Fatalf("String %q", s)
	}
	for in, want := range map[string]string{
		`[{"kind":"usd","window_secs":60,"limit":"0"}]`:              "limit: must be more than 0",
		`[{"kind":"usd","window_secs":60,"limit":"-1"}]`:             "default_limits[0].limit",
		`[{"kind":"usd","window_secs":60,"limit":"1.0000000001"}]`:   "decimals",
		`[{"kind":"usd","window_secs":60,"limit":25}]`:               "default_limits",
		`[{"kind":"usd","window_secs":60}]`:                          `"limit"`,
		`[{"kind":"usd","window_secs":60,"max":5}]`:                  `"limit"`,
		`[{"kind":"usd","window_secs":60,"limit":"1","max":5}]`:      `no "max"`,
		`[{"kind":"tokens","window_secs":60,"max":5,"limit":"1"}]`:   "only a usd budget",
		`[{"kind":"usd","window_secs":0,"limit":"1"}]`:               "window_secs",
		`[{"kind":"usd","window_secs":60,"limit":"99999999999.00"}]`: "too large",
	} {
		if _, err := limits.Parse(json.RawMessage(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %s", in, err, want)
		}
	}
}

// A budget refuses once the window's spend reached it, with a message that
// says budget, and costs count only against usd limits.
func TestBudgetRefusesWhenSpent(t *testing.T) {
	clk := newClock()
	l := limits.New(limits.Options{Clock: clk})
	ls := parse(t, `[{"kind":"usd","window_secs":3600,"limit":"1.00"},{"kind":"tokens","window_secs":3600,"max":1000000}]`)
	l.AddCost("pr_a", ls, money.PerDollar-1)
	if r := l.Admit("pr_a", ls); r != nil {
		t.Fatalf("refused one nano-dollar under budget: %+v", r)
	}
	l.AddCost("pr_a", ls, 1)
	r := l.Admit("pr_a", ls)
	if r == nil || r.Limit.Kind != limits.USD {
		t.Fatalf("admitted with the budget spent: %+v", r)
	}
	if msg := r.Message(); !strings.Contains(msg, "budget") || strings.Contains(msg, "rate") || !strings.Contains(msg, "1.00 USD") {
		t.Fatalf("message %q", msg)
	}
	// The whole budget was spent at the window's start: the sliding
	// estimate falls under it just after the next window starts.
	if r.RetryAfter < time.Hour || r.RetryAfter > time.Hour+5*time.Second {
		t.Fatalf("retry after %v", r.RetryAfter)
	}
	// Tokens never reach a budget, and the tokens limit is untouched by cost.
	l2 := limits.New(limits.Options{Clock: clk})
	l2.AddTokens("pr_a", ls, 5_000_000_000)
	if r := l2.Admit("pr_a", ls); r == nil || r.Limit.Kind != limits.Tokens {
		t.Fatalf("tokens: %+v", r)
	}
	l3 := limits.New(limits.Options{Clock: clk})
	l3.AddCost("pr_a", parse(t, `[{"kind":"tokens","window_secs":3600,"max":1}]`), money.PerDollar)
	if l3.Admit("pr_a", parse(t, `[{"kind":"tokens","window_secs":3600,"max":1}]`)) != nil {
		t.Fatal("a cost counted against a tokens limit")
	}
}

// Cost is known only when a request finishes, so the requests admitted
// while the budget still had room all run: the overshoot is bounded by
// what those in-flight requests cost, and nothing more is admitted after.
func TestBudgetOvershootBoundedByInFlight(t *testing.T) {
	clk := newClock()
	l := limits.New(limits.Options{Clock: clk})
	ls := parse(t, `[{"kind":"usd","window_secs":3600,"limit":"1.00"}]`)
	const inFlight, each = 8, 300_000_000 // $0.30 each
	var admitted sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for i := 0; i < inFlight; i++ {
		admitted.Add(1)
		go func() {
			defer admitted.Done()
			if l.Admit("pr_a", ls) == nil {
				mu.Lock()
				n++
				mu.Unlock()
			}
		}()
	}
	admitted.Wait()
	if n != inFlight {
		t.Fatalf("%d of %d admitted before any cost was known", n, inFlight)
	}
	var finished sync.WaitGroup
	for i := 0; i < inFlight; i++ {
		finished.Add(1)
		go func() { defer finished.Done(); l.AddCost("pr_a", ls, each) }()
	}
	finished.Wait()
	// Spent $2.40 of $1.00: over by the in-flight requests, and refused now.
	if r := l.Admit("pr_a", ls); r == nil || r.Limit.Kind != limits.USD {
		t.Fatalf("admitted past the budget: %+v", r)
	}
}

// A budget is cluster-wide like a tokens limit: spend synced by one
// replica refuses on another.
func TestBudgetSharedBetweenReplicas(t *testing.T) {
	st := openSQLite(t)
	clk := newClock()
	a := limits.New(limits.Options{Store: st, Clock: clk})
	b := limits.New(limits.Options{Store: st, Clock: clk})
	ls := parse(t, `[{"kind":"usd","window_secs":86400,"limit":"25.00"}]`)
	ctx := context.Background()
	a.AddCost("pr_a", ls, 20*money.PerDollar)
	b.AddCost("pr_a", ls, 5*money.PerDollar)
	for _, l := range []*limits.Limiter{a, b, a} {
		if err := l.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for name, l := range map[string]*limits.Limiter{"a": a, "b": b} {
		if r := l.Admit("pr_a", ls); r == nil || r.Limit.Kind != limits.USD {
			t.Fatalf("replica %s admitted past the shared budget: %+v", name, r)
		}
	}
}

// BudgetUsed reports the fullest budget's share as Admit's estimate has it,
// reaching 1 exactly when the next request is refused, and nothing for a
// principal with only non-budget limits.
func TestBudgetUsedIsTheFullestBudgetsShare(t *testing.T) {
	clk := newClock()
	l := limits.New(limits.Options{Clock: clk})
	ls := parse(t, `[{"kind":"usd","window_secs":3600,"limit":"10.00"},{"kind":"usd","window_secs":86400,"limit":"4.00"},{"kind":"requests","window_secs":60,"max":1}]`)
	if r, ok := l.BudgetUsed("pr_a", ls); !ok || r != 0 {
		t.Fatalf("unspent: %v %v", r, ok)
	}
	l.AddCost("pr_a", ls, 3*money.PerDollar)
	if r, ok := l.BudgetUsed("pr_a", ls); !ok || r != 0.75 {
		t.Fatalf("3 of the 4.00 day budget spent: %v %v, want 0.75", r, ok)
	}
	l.AddCost("pr_a", ls, money.PerDollar)
	if r, _ := l.BudgetUsed("pr_a", ls); r != 1 || l.Admit("pr_a", ls) == nil {
		t.Fatalf("day budget spent: ratio %v, and Admit must refuse", r)
	}
	if r, ok := l.BudgetUsed("pr_b", parse(t, `[{"kind":"tokens","window_secs":60,"max":5}]`)); ok || r != 0 {
		t.Fatalf("no budget: %v %v", r, ok)
	}
}

package storetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

// DeltaReadsAgree checks that two stores over one database read the same
// deltas: after every one of a random sequence of admin mutations (made
// through st, driven by clk), from the previous generation, from one
// several generations back, from the current one and from one past it;
// and, at the end, where the change log cannot vouch for the span. A
// driver with a second way of reading deltas (PostgreSQL's batch) runs it
// against the store reading one statement at a time. Keys are compared in
// no order (neither read orders them); everything else, nil and empty
// lists included, must be equal.
func DeltaReadsAgree(t *testing.T, st, other store.Store, clk *fakeclock.Clock) {
	b := &bundle{st: st, clk: clk, ctx: context.Background()}
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(failure); ok {
				t.Fatal(string(f))
			}
			panic(r)
		}
	}()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	m := &mutator{b: b, rng: rand.New(rand.NewPCG(seed, seed>>1))}
	compare := func(step int, op string, since int64) {
		t.Helper()
		got, gerr := st.LoadConfigDelta(b.ctx, since)
		want, werr := other.LoadConfigDelta(b.ctx, since)
		if gerr != nil || werr != nil {
			if !errors.Is(gerr, store.ErrDeltaUnavailable) || !errors.Is(werr, store.ErrDeltaUnavailable) {
				t.Fatalf("step %d (%s, seed %d): delta since %d: errors %v and %v", step, op, seed, since, gerr, werr)
			}
			return
		}
		if diff := deltaDiff(got, want); diff != "" {
			t.Fatalf("step %d (%s, seed %d): delta since %d differs:%s", step, op, seed, since, diff)
		}
	}
	prev := must(st.ConfigGeneration(b.ctx))
	lagging := prev
	for step := 0; step < deltaSteps; step++ {
		op := m.step()
		gen := must(st.ConfigGeneration(b.ctx))
		compare(step, op, prev)
		compare(step, op, gen)
		compare(step, op, gen+1)
		if step%7 == 6 {
			compare(step, op, lagging)
			lagging = gen
		}
		prev = gen
	}
	t.Logf("ops: %v", m.done)

	// Spans the change log cannot vouch for: a generation bumped without a
	// log row, then one logged as "*".
	db, ok := st.(interface{ DB() *sql.DB })
	if !ok {
		t.Fatalf("%T exposes no database handle", st)
	}
	gen := must(st.ConfigGeneration(b.ctx))
	must(db.DB().ExecContext(b.ctx, "UPDATE config_generation SET generation = generation + 1 WHERE id = 1"))
	compare(deltaSteps, "unlogged generation", gen)
	must(st.CreatePrincipal(b.ctx, principal("after-gap")))
	compare(deltaSteps, "past an unlogged generation", gen)
	compare(deltaSteps, "past an unlogged generation", gen+1)
	gen = must(st.ConfigGeneration(b.ctx))
	must(db.DB().ExecContext(b.ctx, "UPDATE config_generation SET generation = generation + 1 WHERE id = 1"))
	must(db.DB().ExecContext(b.ctx, fmt.Sprintf("INSERT INTO config_changes (generation, kind, id) VALUES (%d, '*', '*')", gen+1)))
	compare(deltaSteps, "a change logged as *", gen)
}

// deltaDiff names the fields in which two deltas differ, keys compared in
// no order.
func deltaDiff(got, want *store.ConfigDelta) string {
	sorted := func(d *store.ConfigDelta) store.ConfigDelta {
		c := *d
		if c.Keys != nil {
			c.Keys = slices.Clone(c.Keys)
			slices.SortFunc(c.Keys, func(a, b store.Key) int { return strings.Compare(a.ID, b.ID) })
		}
		return c
	}
	g, w := sorted(got), sorted(want)
	var b strings.Builder
	gv, wv := reflect.ValueOf(g), reflect.ValueOf(w)
	for i := range gv.NumField() {
		if a, c := gv.Field(i).Interface(), wv.Field(i).Interface(); !reflect.DeepEqual(a, c) {
			fmt.Fprintf(&b, "\n%s:\n got  %#v\n want %#v", gv.Type().Field(i).Name, a, c)
		}
	}
	return b.String()
}

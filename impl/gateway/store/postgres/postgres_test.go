package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pillarhq/pillar/impl/gateway/notify"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/postgres"
	"github.com/pillarhq/pillar/impl/gateway/store/storetest"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
	"github.com/pillarhq/pillar/impl/testing/pgtest"
)

func TestExercise(t *testing.T) {
	pgtest.URL(t) // skips (or fails in CI) before any subtest starts
	storetest.Exercise(t, func(t *testing.T, clk *fakeclock.Clock) store.Store {
		st, err := postgres.Open(context.Background(), pgtest.Schema(t), postgres.Options{Clock: clk, MaxConns: 8})
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}

// Replicas starting at once migrate once: the advisory lock serialises them.
func TestConcurrentMigrations(t *testing.T) {
	t.Parallel()
	u := pgtest.Schema(t)
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() {
			st, err := postgres.Open(context.Background(), u, postgres.Options{})
			if err == nil {
				st.Close()
			}
			errs <- err
		}()
	}
	for i := 0; i < 4; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// Time columns are timestamps on PostgreSQL (unix seconds on SQLite).
func TestTimeColumnsAreTimestamps(t *testing.T) {
	t.Parallel()
	u := pgtest.Schema(t)
	st, err := postgres.Open(context.Background(), u, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var typ string
	if err := st.DB().QueryRow("SELECT data_type FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'upstreams' AND column_name = 'updated_at'").Scan(&typ); err != nil {
		t.Fatal(err)
	}
	if typ != "timestamp with time zone" {
		t.Fatalf("updated_at is %s", typ)
	}
}

// P-RUNTIME-3: every configuration transaction announces its new generation
// on the configuration channel when it commits; background writes, request
// events and rolled-back (stale) mutations announce nothing. Notifications
// arrive in commit order, so the payloads must be exactly 1, 2, 3.
func TestConfigChangesNotify(t *testing.T) {
	t.Parallel()
	u := pgtest.Database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := postgres.Open(ctx, u, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+notify.Channel); err != nil {
		t.Fatal(err)
	}

	up, err := st.CreateUpstream(ctx, store.UpstreamSpec{Name: "n", Kind: store.KindVendorOAuth, BaseURL: "https://x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetUpstreamStatus(ctx, up.ID, store.UpstreamStatus{}); err != nil {
		t.Fatal(err)
	}
	name := "stale"
	if _, err := st.PatchUpstream(ctx, up.ID, up.SpecRevision+1, store.UpstreamPatch{Name: &name}); err == nil {
		t.Fatal("stale patch applied")
	}
	if _, err := st.SetUpstreamCredential(ctx, up.ID, "oauth", []byte("sealed")); err != nil {
		t.Fatal(err)
	}
	if err := st.InsertRequestEvents(ctx, []store.RequestEvent{{At: time.Now(), UpstreamID: up.ID}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreatePrincipal(ctx, store.Principal{Name: "p", Kind: "machine", Enabled: true}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1", "2", "3"} {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("waiting for generation %s: %v", want, err)
		}
		if n.Channel != notify.Channel || n.Payload != want {
			t.Fatalf("notification %s %q, want %s %q", n.Channel, n.Payload, notify.Channel, want)
		}
	}
}

package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// storageCommand runs offline storage operations: `proxy storage <op>`.
// They write the database directly, as an operator's maintenance step, and
// bump what replicas watch so running replicas pick the change up.
func storageCommand(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	usage := "usage: proxy storage disable-oauth-warmup|rotate-master-key [--database-url URL] [--old-key-file F --new-key-file F]"
	if len(args) == 0 {
		return errors.New(usage)
	}
	op, rest := args[0], args[1:]
	fs := flag.NewFlagSet("proxy storage "+op, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbURL := fs.String("database-url", "", "database (default: $PROXY_DATABASE_URL or sqlite://proxy.db)")
	// rotate-master-key (server area)
	oldFile := fs.String("old-key-file", "", "rotate-master-key: file holding the current master key (default: $PROXY_MASTER_KEY, or the SQLite key file)")
	newFile := fs.String("new-key-file", "", "rotate-master-key: file holding the new master key (default: $PROXY_NEW_MASTER_KEY)")
	if err := fs.Parse(rest); err != nil {
		return err
	}
	u := *dbURL
	if u == "" {
		u = getenv("PROXY_DATABASE_URL")
	}
	if u == "" {
		u = "sqlite://proxy.db"
	}
	db, err := ParseDatabaseURL(u)
	if err != nil {
		return err
	}
	var oldKey, newKey []byte
	var keyFile string
	if op == "rotate-master-key" {
		// Keys first: a missing or malformed key changes nothing.
		if oldKey, newKey, keyFile, err = rotationKeys(db, *oldFile, *newFile, getenv); err != nil {
			return err
		}
	}
	cfg := defaults()
	st, err := openStore(ctx, &cfg, db, slog.New(slog.DiscardHandler))
	if err != nil {
		return fmt.Errorf("open %s database: %w", db.Driver, err)
	}
	defer st.Close()
	switch op {
	case "disable-oauth-warmup":
		// P-WARM-R3: every non-deleted vendor_oauth upstream, spec_revision
		// and updated time bumped in one statement.
		n, err := st.DisableWarmupForOAuthUpstreams(store.WithActor(ctx, "storage-cli"))
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "disabled warm-up on %d vendor_oauth upstream(s)\n", n)
		return nil
	case "rotate-master-key":
		return rotateMasterKey(ctx, st, oldKey, newKey, keyFile, stderr)
	}
	return fmt.Errorf("unknown storage operation %q; %s", op, usage)
}

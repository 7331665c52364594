package postgres_test

import (
	"context"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/store/postgres"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlstore"
	"github.com/pillarhq/pillar/impl/gateway/store/storetest"
	"github.com/pillarhq/pillar/impl/service"
	"github.com/pillarhq/pillar/impl/testing/pgtest"
)

// BenchmarkAdminWrites is an admin client's create and patch and the delta
// read they cause, with statements left to pgx's own per-connection cache
// (as it runs) and, for the ratio, also prepared by the store.
func BenchmarkAdminWrites(b *testing.B) {
	for _, storePrepared := range []bool{false, true} {
		name := "pgx-cache"
		if storePrepared {
			name = "store-prepared"
		}
		b.Run(name, func(b *testing.B) {
			st, err := postgres.Open(context.Background(), pgtest.Schema(b), postgres.Options{MaxConns: 8})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			d := *postgres.Dialect
			d.SkipPrepare = !storePrepared
			storetest.BenchAdminWrites(b, sqlstore.New(st.DB(), &d, service.Options{}))
		})
	}
}

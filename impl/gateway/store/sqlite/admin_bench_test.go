package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlstore"
	"github.com/pillarhq/pillar/impl/gateway/store/storetest"
)

// BenchmarkAdminWrites is an admin client's create and patch and the delta
// read they cause, on the default database, with the store's statements
// prepared (as it runs) and, for the ratio, unprepared (parsed every run,
// as before issue 22.5).
func BenchmarkAdminWrites(b *testing.B) {
	for _, prepared := range []bool{true, false} {
		name := "prepared"
		if !prepared {
			name = "unprepared"
		}
		b.Run(name, func(b *testing.B) {
			st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "proxy.db"), sqlite.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			d := *sqlite.Dialect
			d.SkipPrepare = !prepared
			storetest.BenchAdminWrites(b, sqlstore.New(st.DB(), &d, nil, nil))
		})
	}
}

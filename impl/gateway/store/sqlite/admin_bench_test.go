package sqlite_test

import (
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlstore"
	"github.com/pillarhq/pillar/impl/gateway/store/storetest"
	"github.com/pillarhq/pillar/impl/service"
)

// BenchmarkAdminWrites is an admin client's create and patch and the delta
// read they cause, on the default database, with the store's statements
// prepared (as it runs) and, for the ratio, unprepared (parsed every run,
// as the store ran before it prepared them).
func BenchmarkAdminWrites(b *testing.B) {
	for _, prepared := range []bool{true, false} {
		name := "prepared"
		if !prepared {
			name = "unprepared"
		}
		b.Run(name, func(b *testing.B) {
			st := openTemp(b)
			d := *sqlite.Dialect
			d.SkipPrepare = !prepared
			storetest.BenchAdminWrites(b, sqlstore.New(st.DB(), &d, service.Options{}))
		})
	}
}

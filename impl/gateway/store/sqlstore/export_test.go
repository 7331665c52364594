package sqlstore

import (
	"context"
	"strings"
)

// ClassifyForTest exposes error classification to the external tests.
func ClassifyForTest(err error) error { return (&Dialect{}).classify(err) }

// PreparedForTest is how many statements the store keeps prepared.
func PreparedForTest(s *Store) int {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	return len(s.stmts)
}

// MaxPreparedForTest is the bound of PreparedForTest.
const MaxPreparedForTest = maxPrepared

// QueryIntForTest runs q (one integer result) through the store's pool.
func QueryIntForTest(ctx context.Context, s *Store, q string, args ...any) (int64, error) {
	var n int64
	err := s.pool.QueryRowContext(ctx, q, args...).Scan(&n)
	return n, err
}

// SetBesideHook makes f run before every second read transaction of a
// full configuration read begins; the returned function removes it.
func SetBesideHook(f func()) func() {
	besideHook = f
	return func() { besideHook = nil }
}

// BesideUsed counts the full reads whose keys came from a second
// transaction.
func BesideUsed() int64 { return besideUsed.Load() }

// JoinedUsed counts the joined reads used (joined.go).
func JoinedUsed() int64 { return joinedUsed.Load() }

// JoinSpecsForTest names, by table, the columns of the joined reads and
// their kinds ("text", "int", "null", "blob"; " counted" added for a
// column counted apart).
func JoinSpecsForTest() map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, sp := range []*joinSpec{keyJoin, principalJoin, chainJoin} {
		table, _, _ := strings.Cut(sp.from, " ")
		cols := map[string]string{}
		for i, c := range sp.cols {
			cols[c] = [...]string{joinText: "text", joinInt: "int", joinNull: "null"}[sp.kinds[i]]
		}
		for _, c := range sp.counted {
			cols[c] += " counted"
		}
		if sp.blob != "" {
			cols[sp.blob] = "blob"
		}
		out[table] = cols
	}
	return out
}

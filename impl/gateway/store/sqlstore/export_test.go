package sqlstore

import "context"

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

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

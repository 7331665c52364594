package sqlstore

// ClassifyForTest exposes error classification to the external tests.
func ClassifyForTest(err error) error { return (&Dialect{}).classify(err) }

// SetBesideHook makes f run before every second read transaction of a
// full configuration read begins; the returned function removes it.
func SetBesideHook(f func()) func() {
	besideHook = f
	return func() { besideHook = nil }
}

// BesideUsed counts the full reads whose keys came from a second
// transaction.
func BesideUsed() int64 { return besideUsed.Load() }

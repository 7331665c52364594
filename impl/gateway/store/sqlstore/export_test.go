package sqlstore

// ClassifyForTest exposes error classification to the external tests.
func ClassifyForTest(err error) error { return (&Dialect{}).classify(err) }

package sqlite

// DSNBusy is DSN with another busy timeout, for tests that contend on the
// write lock without waiting the production 10 s.
var DSNBusy = dsn

// Package faults_test is the gateway's fault-injection suite: every spec
// drives the real binaries (bin/proxy, bin/sim), injects one fault (through the
// simulator, a signal, a cut TCP link or a slow client) and asserts both what
// the client saw and what the operator sees (status fields, the failures
// endpoint, metrics). Specs whose outcome depends on storage run once per
// driver. Each area keeps its specs in its own file.
package faults_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

func TestFaults(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Fault injection (real binaries, SQLite and PostgreSQL)")
}

// driver is one storage backend a spec runs against: url returns a fresh
// database URL ("" is the default fresh SQLite file of the harness).
type driver struct {
	name string
	url  func() string
}

var drivers = []driver{
	{"sqlite", func() string { return "" }},
	{"postgres", h.FreshSchema},
}

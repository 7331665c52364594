package agent

import "testing"

func TestExportIDRoundTrip(t *testing.T) {
	for _, c := range []struct{ pool, name string }{{"tank", "pvc-1"}, {"pool:with:colons", "v.1"}, {"vg0", "a-b_c"}} {
		p, n, ok := SplitExportID(ExportID(c.pool, c.name))
		if !ok || p != c.pool || n != c.name {
			t.Errorf("%q/%q came back as %q/%q (%v)", c.pool, c.name, p, n, ok)
		}
	}
	for _, bad := range []string{"", "nocolon", ":name", "pool:"} {
		if _, _, ok := SplitExportID(bad); ok {
			t.Errorf("%q split", bad)
		}
	}
}

package bench_test

import (
	"strings"
	"testing"

	"github.com/pillarhq/pillar/conformance/bench"
)

const microOutput = `goos: linux
goarch: amd64
pkg: github.com/pillarhq/pillar/conformance/bench
cpu: Test CPU
BenchmarkProxyPath/gateway/message-2         	  187959	      6000 ns/op	    3810 B/op	      35 allocs/op
BenchmarkProxyPath/bare/message-2            	   73676	      5000 ns/op	    3397 B/op	      30 allocs/op
BenchmarkProxyPath/gateway/message-2         	  187959	     30000 ns/op	    3810 B/op	      35 allocs/op
BenchmarkProxyPath/bare/message-2            	   73676	      4000 ns/op	    3397 B/op	      30 allocs/op
BenchmarkProxyPath/gateway/message-2         	  187959	      7000 ns/op	    3811 B/op	      35 allocs/op
BenchmarkProxyPath/bare/message-2            	   73676	      6000 ns/op	    3397 B/op	      30 allocs/op
BenchmarkScanRequest1MB-2   	    1190	   1102523 ns/op	 897.09 MB/s	      16 B/op	       1 allocs/op
PASS
ok  	github.com/pillarhq/pillar/conformance/bench	8.532s
`

func TestMicroTableTakesMediansAndPairsGatewayWithBare(t *testing.T) {
	t.Parallel()
	ms, err := bench.ParseMicro(strings.NewReader(microOutput))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 || ms[0].Name != "BenchmarkProxyPath/gateway/message-2" || len(ms[0].NsOp) != 3 {
		t.Fatalf("parsed %+v", ms)
	}
	table := bench.MicroTable(ms)
	for _, want := range []string{
		// The 30 µs run is an outlier the median ignores: 7000 ÷ 5000.
		"| ProxyPath/gateway/message-2 | 3 | 7000 | 3811 | 35 | 1.40x |  |",
		"| ProxyPath/bare/message-2 | 3 | 5000 | 3397 | 30 |  |  |",
		"| ScanRequest1MB-2 | 1 | 1102523 | 16 | 1 |  | 897.09 MB/s |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if (bench.Micro{NsOp: []float64{4, 1, 3, 2}}).Median() != 2.5 {
		t.Error("median of an even count")
	}
}

package money

import "testing"

func TestParseUSD(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Nanos{"25": 25 * PerDollar, "25.00": 25 * PerDollar, "0.000000001": 1, "1.5": 1_500_000_000, "0.1": 100_000_000} {
		if got, err := ParseUSD(in); err != nil || got != want {
			t.Errorf("ParseUSD(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "1.", ".5", "1e3", " 1", "1.0000000001", "99999999999", "1,00", "+1"} {
		if got, err := ParseUSD(bad); err == nil {
			t.Errorf("ParseUSD(%q) = %d, want an error", bad, got)
		}
	}
}

func TestNanosString(t *testing.T) {
	t.Parallel()
	for n, want := range map[Nanos]string{0: "0.00", 25 * PerDollar: "25.00", 123: "0.000000123", 1_500_000_000: "1.50", -1_500_000_000: "-1.50"} {
		if got := n.String(); got != want {
			t.Errorf("%d: %q, want %q", int64(n), got, want)
		}
		if n >= 0 {
			if back, err := ParseUSD(n.String()); err != nil || back != n {
				t.Errorf("round trip of %d: %d %v", int64(n), back, err)
			}
		}
	}
}

// Catalog prices are read from their decimal text exactly: 0.3 dollars
// per million tokens is 300000 pico-dollars per token, not a float's
// 299999.99…
func TestRateFromPerMillion(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Rate{"3": 3_000_000, "0.30": 300_000, "3.75": 3_750_000, "1e-1": 100_000, "0.0000005": 1, "0.0000004": 0} {
		if got, err := RateFromPerMillion(in); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"-1", "x", "20000"} {
		if _, err := RateFromPerMillion(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestPicosRoundHalfUp(t *testing.T) {
	t.Parallel()
	if Picos(1499).Nanos() != 1 || Picos(1500).Nanos() != 2 || Picos(499).Nanos() != 0 {
		t.Fatal("rounding")
	}
}

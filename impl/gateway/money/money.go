// Package money holds amounts of US dollars as integer nano-dollars
// (1e-9 USD), so stored costs, sums and budgets are exact: no float ever
// reaches storage or a comparison. int64 nano-dollars reach $9.2 billion,
// far beyond any sum the gateway keeps. Prices are finer still (see Rate):
// a cache read of a cheap model costs a fraction of a nano-dollar per token.
package money

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// Nanos is an amount in nano-dollars.
type Nanos int64

// PerDollar is the number of Nanos in one dollar.
const PerDollar Nanos = 1_000_000_000

// Scale is the number of decimal places of Nanos.
const Scale = 9

// ParseUSD reads a decimal dollar amount such as "25", "25.00" or
// "0.000001": digits, an optional point and at most 9 decimals, no sign,
// exponent or spaces. An amount past what Nanos holds is an error.
func ParseUSD(s string) (Nanos, error) {
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" || (dot && frac == "") || !digits(whole) || !digits(frac) {
		return 0, fmt.Errorf("%q is not a decimal amount of dollars such as \"25.00\"", s)
	}
	if len(frac) > Scale {
		return 0, fmt.Errorf("%q has more than %d decimals", s, Scale)
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > int64(maxNanos/PerDollar)-1 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	f := int64(0)
	if frac != "" {
		f, _ = strconv.ParseInt(frac+strings.Repeat("0", Scale-len(frac)), 10, 64)
	}
	return Nanos(w)*PerDollar + Nanos(f), nil
}

const maxNanos = Nanos(1<<63 - 1)

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String formats n as dollars with at least two decimals and no trailing
// zeros past them: "25.00", "0.000123", "-1.50".
func (n Nanos) String() string {
	sign := ""
	u := uint64(n)
	if n < 0 {
		sign, u = "-", uint64(-n) // -minInt64 wraps to its own magnitude as uint64
	}
	frac := fmt.Sprintf("%09d", u%uint64(PerDollar))
	frac = strings.TrimRight(frac, "0")
	for len(frac) < 2 {
		frac += "0"
	}
	return sign + strconv.FormatUint(u/uint64(PerDollar), 10) + "." + frac
}

// Dollars is n as a float, for Prometheus counters only (never stored).
func (n Nanos) Dollars() float64 { return float64(n) / float64(PerDollar) }

// Rate is a price per token in pico-dollars (1e-12 USD). A catalog price
// of P dollars per million tokens is P×1e6 pico-dollars per token, so any
// price with up to 6 decimals is held exactly.
type Rate int64

// RateFromPerMillion converts a price in dollars per million tokens, given
// as JSON number text ("3", "0.30", "3.75", "1e-1"), exactly; a price
// finer than 1e-6 dollars per million tokens is rounded half up.
func RateFromPerMillion(num string) (Rate, error) {
	r, ok := new(big.Rat).SetString(num)
	if !ok || r.Sign() < 0 {
		return 0, fmt.Errorf("price %q is not a non-negative number", num)
	}
	r.Mul(r, big.NewRat(1_000_000, 1))
	// Round half up: floor(r + 1/2).
	r.Add(r, big.NewRat(1, 2))
	q := new(big.Int).Quo(r.Num(), r.Denom())
	if !q.IsInt64() || q.Int64() > 1e10 {
		// Over $10,000 per million tokens is not a price; the cap keeps
		// tokens × rate of any real request far inside int64.
		return 0, fmt.Errorf("price %q is out of range", num)
	}
	return Rate(q.Int64()), nil
}

// Picos is an amount in pico-dollars, the unit a cost is summed in before
// it is rounded to Nanos once per request.
type Picos int64

// Cost is tokens × r.
func (r Rate) Cost(tokens int64) Picos { return Picos(tokens * int64(r)) }

// Nanos rounds p to nano-dollars, half up.
func (p Picos) Nanos() Nanos { return Nanos((p + 500) / 1000) }

package scheduler

import (
	"math/rand/v2"
	"time"
)

// RetryClass is one of the seed's retry classes. Delays grow exponentially
// from Base, doubling per attempt, capped at Max, with ±10% jitter.
type RetryClass struct {
	Name        string
	MaxAttempts int
	Base, Max   time.Duration
}

// The seed's retry classes. MaxAttempts counts every attempt, the first
// included, so Probe retries twice (after 1s and 2s) and Maintenance never;
// the curve's later values (Probe's 4s, Entity's 480s) are where the
// doubling would go next and are never reached within the attempt limit.
var (
	Probe       = RetryClass{Name: "probe", MaxAttempts: 3, Base: time.Second, Max: 5 * time.Second}
	Entity      = RetryClass{Name: "entity", MaxAttempts: 5, Base: 30 * time.Second, Max: 600 * time.Second}
	Maintenance = RetryClass{Name: "maintenance", MaxAttempts: 1, Base: 60 * time.Second, Max: 60 * time.Second}
	// KeepAlive jobs run once: a missed refresh is not retried.
	KeepAlive = RetryClass{Name: "keepalive", MaxAttempts: 1, Base: time.Second, Max: time.Second}
)

// JitterFraction is the ± jitter applied to every delay.
const JitterFraction = 0.10

// Delay is the un-jittered wait after the given failed attempt (1-based).
func (c RetryClass) Delay(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := c.Base
	for i := 1; i < attempt && d < c.Max; i++ {
		d *= 2
	}
	return min(d, c.Max)
}

// JitteredDelay applies ±10% jitter to Delay; u is a uniform sample in [0,1).
func (c RetryClass) JitteredDelay(attempt int, u float64) time.Duration {
	d := float64(c.Delay(attempt))
	return time.Duration(d * (1 - JitterFraction + 2*JitterFraction*u))
}

// NextDelay is JitteredDelay with a random sample.
func (c RetryClass) NextDelay(attempt int) time.Duration {
	return c.JitteredDelay(attempt, rand.Float64())
}

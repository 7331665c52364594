//go:build race

package relay

// raceEnabled: the race detector drops sync.Pool items, so allocation
// counts mean nothing under it.
const raceEnabled = true

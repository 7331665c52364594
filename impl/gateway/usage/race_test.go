//go:build race

package usage

// raceEnabled: the race detector drops sync.Pool items, so allocation
// counts mean nothing under it.
const raceEnabled = true

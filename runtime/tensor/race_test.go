//go:build race

package tensor

// raceEnabled: sync.Pool randomly drops items under the race detector, so
// allocation counts of nil-pool products are not meaningful.
const raceEnabled = true

package expert

import (
	"fmt"
	"strings"
)

// Mode is how the store schedules expert reads.
type Mode int

// The modes of the LES ladder, from the naive baseline to the oracle bound.
const (
	// OnDemand reads each missing expert synchronously, one read at a
	// time, when the router picks it: one read of a packed blob per
	// expert, the baseline of the LES modes.
	OnDemand Mode = iota
	// OnDemandParallel reads all missing experts of a layer in parallel;
	// compute waits for all of them.
	OnDemandParallel
	// Lookahead adds speculative prefetch of the experts the next layer's
	// router predicts from the current hidden state.
	Lookahead
	// Scheduled is Lookahead plus ready-first compute: resident experts
	// first, missing ones in the order their reads complete.
	Scheduled
	// OracleMode replays a recorded routing trace with Belady eviction and
	// perfect prefetch: the upper bound.
	OracleMode
	// Naive loads experts as mmap does: page-sized synchronous faults of
	// the unpacked file, one at a time, with the profile's read-ahead and
	// an LRU page cache (naive.go). The first row of the ladder.
	Naive
)

var modeNames = [...]string{"on-demand", "on-demand-parallel", "lookahead", "scheduled", "oracle", "naive"}

// String returns the mode's CLI name, e.g. "on-demand-parallel".
func (m Mode) String() string {
	if m >= 0 && int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// Modes returns the ladder's modes in order (without the oracle).
func Modes() []Mode { return []Mode{Naive, OnDemand, OnDemandParallel, Lookahead, Scheduled} }

// ParseMode returns the mode named s.
func ParseMode(s string) (Mode, error) {
	for i, n := range modeNames {
		if strings.EqualFold(s, n) {
			return Mode(i), nil
		}
	}
	return 0, fmt.Errorf("expert: unknown mode %q (want one of %s)", s, strings.Join(modeNames[:], ", "))
}

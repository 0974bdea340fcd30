package dispatch

import (
	"sync"
	"time"

	"github.com/lesfarm/lesfarm/protocol"
)

// factsCache keeps the model facts of recent assignments by sha256, so an
// assignment does not wait for a database read of them: at 1,000 agents
// that read was one round trip per assignment, on a database busy with
// telemetry, between the grant and the push. Facts read from an analysed
// artifact are kept (they are facts of the content, which its sha256
// names); "no facts" (no such artifact yet, or not analysable) is kept for
// factsMissTTL only, since the artifact may be uploaded meanwhile.
type factsCache struct {
	mu sync.Mutex
	m  map[string]factsEntry
}

type factsEntry struct {
	facts *protocol.ModelFacts
	until time.Time // zero: for good
}

// factsMissTTL is how long a sha256 without facts is not asked again.
const factsMissTTL = 5 * time.Second

// factsCacheMax bounds the cache (it is cleared when full).
const factsCacheMax = 1024

func (f *factsCache) get(sha string, now time.Time) (*protocol.ModelFacts, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.m[sha]
	if !ok || (!e.until.IsZero() && now.After(e.until)) {
		return nil, false
	}
	return e.facts, true
}

func (f *factsCache) put(sha string, facts *protocol.ModelFacts, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil || len(f.m) >= factsCacheMax {
		f.m = map[string]factsEntry{}
	}
	e := factsEntry{facts: facts}
	if facts == nil {
		e.until = now.Add(factsMissTTL)
	}
	f.m[sha] = e
}

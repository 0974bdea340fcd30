package dispatch

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Assignment phases, the labels of lesfarm_assign_phase_seconds: where the
// time between an agent's result and its next assignment goes, and what a
// placement round costs.
const (
	// PhaseResultQueued: the result stored in its stream → a result
	// worker picks it up (ingest).
	PhaseResultQueued = "result_queued"
	// PhaseResultCommit: the result's transaction (ingest).
	PhaseResultCommit = "result_commit"
	// PhaseWakeToRound: the first wake-up since the last round began →
	// the next placement round begins (a round in progress delays it).
	PhaseWakeToRound = "wake_to_round"
	// PhaseRoundQueries: the reads of a placement pass (queued runs, idle
	// devices, suite load, queue head).
	PhaseRoundQueries = "round_queries"
	// PhaseClaim: the batch claim statement of a pass.
	PhaseClaim = "claim"
	// PhaseFreedToGrant: a result committed → the device's next lease
	// granted (by this coordinator).
	PhaseFreedToGrant = "freed_to_grant"
	// PhaseGrantToPublish: a lease granted → its signed assignment
	// published (model facts, signing, scheduling of the sender).
	PhaseGrantToPublish = "grant_to_publish"
	// PhaseAgentReply: the assignment published → the agent's reply.
	PhaseAgentReply = "agent_reply"
	// PhaseAckCommit: the acknowledgement's update (lease renewed).
	PhaseAckCommit = "ack_commit"
)

// phases times the assignment path (lesfarm_assign_phase_seconds) and
// remembers when each device was freed by a result, until its next grant.
type phases struct {
	hist *prometheus.HistogramVec

	mu    sync.Mutex
	freed map[string]time.Time
	woke  time.Time // first wake-up not yet served by a round
}

func newPhases() *phases {
	return &phases{freed: map[string]time.Time{}, hist: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "lesfarm_assign_phase_seconds",
		Help:    "Time spent in each phase of the result → next assignment path (see dispatch.Phase*).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18), // 0.5 ms .. 65 s
	}, []string{"phase"})}
}

func (p *phases) observe(phase string, d time.Duration) {
	p.hist.WithLabelValues(phase).Observe(d.Seconds())
}

// freedAt records that a result freed device id at t.
func (p *phases) freedAt(id string, t time.Time) {
	if id == "" {
		return
	}
	p.mu.Lock()
	if len(p.freed) < 1<<16 {
		p.freed[id] = t
	}
	p.mu.Unlock()
}

// granted observes freed → grant for device id, if a result freed it.
func (p *phases) granted(id string, at time.Time) {
	p.mu.Lock()
	t, ok := p.freed[id]
	delete(p.freed, id)
	p.mu.Unlock()
	if ok {
		p.observe(PhaseFreedToGrant, at.Sub(t))
	}
}

// woken records a wake-up (the first since the last round began counts).
func (p *phases) woken(t time.Time) {
	p.mu.Lock()
	if p.woke.IsZero() {
		p.woke = t
	}
	p.mu.Unlock()
}

// roundStarts observes wake → round for the wake-up a round now serves.
func (p *phases) roundStarts(t time.Time) {
	p.mu.Lock()
	w := p.woke
	p.woke = time.Time{}
	p.mu.Unlock()
	if !w.IsZero() {
		p.observe(PhaseWakeToRound, t.Sub(w))
	}
}

// Phase records that a step of the result → next assignment path took d
// (ingest's "result_queued", "result_commit", ...), in the same histogram
// as the dispatcher's own phases.
func (dp *Dispatcher) Phase(phase string, d time.Duration) { dp.phases.observe(phase, d) }

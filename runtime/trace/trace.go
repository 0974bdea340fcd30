// Package trace defines the events the LES runtime emits while it runs and
// the Sink interface that receives them. The model, the expert store and the
// generation loop emit events; the bench command, the agent's telemetry
// aggregator and tests consume them. The runtime never imports farm code:
// this package is the only seam between them.
//
// Emitting must be cheap. Events are plain structs passed by pointer; a sink
// must not retain the pointer or the slices inside after the call returns
// (copy what it keeps). A nil Sink is valid and means "discard".
package trace

import "time"

// Sink receives runtime events. Implementations must be safe for concurrent
// use: the expert store may emit from its I/O workers.
type Sink interface {
	// Token is called once per generated or prefilled batch step.
	Token(ev *TokenEvent)
	// Layer is called once per (step, layer) after the layer's experts ran.
	Layer(ev *LayerEvent)
	// Read is called once per completed expert read.
	Read(ev *ReadEvent)
}

// Phase says whether a step processed the prompt or decoded a token.
type Phase uint8

// Phases of a forward step.
const (
	Prefill Phase = iota + 1
	Decode
	Verify // speculative verification pass
)

func (p Phase) String() string {
	switch p {
	case Prefill:
		return "prefill"
	case Decode:
		return "decode"
	case Verify:
		return "verify"
	}
	return "unknown"
}

// TokenEvent describes one forward step (one decoded token, or a prefill
// batch of Tokens positions).
type TokenEvent struct {
	Step     int           // 0-based step index within the generation
	Phase    Phase         // prefill, decode or verify
	Pos      int           // position of the first token of the step
	Tokens   int           // number of positions processed in this step
	Duration time.Duration // wall time of the step
	Stall    time.Duration // time compute waited on expert I/O during the step
	// BytesRead is the number of expert bytes read from storage during the step.
	BytesRead int64
	// CacheBytes is the expert cache occupancy at the end of the step.
	CacheBytes int64
}

// LayerEvent describes one layer of one step. Expert ids are per-layer
// indices. Slices are only valid during the call.
type LayerEvent struct {
	Step  int
	Layer int
	// Selected is the union of experts the router chose for the tokens of the
	// step, in ascending id order.
	Selected []int
	// Predicted is the set of experts the lookahead predictor prefetched for
	// this layer (nil when lookahead is off).
	Predicted []int
	Hits      int // selected experts that were resident when demanded
	Misses    int // selected experts that had to be read on demand
	// Missed lists the selected experts that were not resident when
	// demanded (len(Missed) == Misses; nil when the expert store does not
	// report it). Every other selected expert was a hit.
	Missed []int
	// PrefetchUsed counts prefetched experts that were then selected;
	// PrefetchWasted counts prefetched experts that were not.
	PrefetchUsed   int
	PrefetchWasted int
	Stall          time.Duration // compute waiting on reads in this layer
	Compute        time.Duration // wall time of the layer
}

// ReadEvent describes one completed expert read.
type ReadEvent struct {
	Layer       int
	Expert      int
	Bytes       int64
	Latency     time.Duration // from issue to completion
	Speculative bool          // issued by the lookahead predictor
	Err         error
}

package expert

import (
	"context"

	"github.com/lesfarm/lesfarm/runtime/moe"
)

// strategy is one mode's way of serving a Use: whether it prefetches,
// how it issues the missing reads and in which order it computes experts.
// The experts used and their weights never depend on it. Its methods
// other than serve are called with the store's lock held. Adding a mode
// means adding a strategy (and its name in mode.go).
type strategy interface {
	// serve serves one Use of a valid layer with at least one expert,
	// without the store's lock: the cache modes run the store's demand
	// loop (demandLoop), the naive mode faults pages in (naive.go). Under
	// device time the store's clock wraps it (useClocked).
	serve(ctx context.Context, s *Store, layer int, experts []int, fn func(int, moe.Weights) error) error
	// speculative reports whether Prefetch queues reads of the predicted
	// experts (and PredictK asks the model for predictions).
	speculative() bool
	// serial reports whether a Use reads one missing expert at a time,
	// in order, each only after the earlier ones are computed.
	serial() bool
	// pick returns the index of the expert to compute next, or -1 to wait
	// for reads. firstReady is the first ready expert not computed yet,
	// inOrder the same but only if every expert before it is computed (else
	// -1), allReady whether all the remaining experts are ready.
	pick(firstReady, inOrder int, allReady bool) int
	// scheduleLocked issues the mode's own planned reads (the oracle's).
	// The store calls it before each round of a Use's demand loop and
	// after each Use that succeeds.
	scheduleLocked(s *Store)
	// planned reports whether the mode's own schedule reads the experts,
	// so a Use must wait for it instead of issuing demanded reads.
	planned() bool
	// abandon drops the mode's own schedule, which no longer matches the
	// store, and reports whether there was one.
	abandon() bool
	// err returns why the mode cannot serve the run, or nil.
	err() error
}

// newStrategy returns the strategy of mode; the oracle mode replays plan
// with oracle, the other modes ignore both.
func newStrategy(mode Mode, oracle *Oracle, plan *OraclePlan) strategy {
	switch mode {
	case OnDemand:
		return onDemandStrategy{}
	case OnDemandParallel:
		return parallelStrategy{}
	case Lookahead:
		return lookaheadStrategy{}
	case Scheduled:
		return scheduledStrategy{}
	case OracleMode:
		return &oracleStrategy{oracle: oracle, plan: plan}
	case Naive:
		return naiveStrategy{}
	}
	panic("expert: no strategy for " + mode.String()) // New validated the mode
}

// demandLoop is the serve of the cache modes: the store's demand loop
// (Store.serveDemand), which asks the rest of the strategy what to read
// and what to compute.
type demandLoop struct{}

func (demandLoop) serve(ctx context.Context, s *Store, layer int, experts []int, fn func(int, moe.Weights) error) error {
	return s.serveDemand(ctx, layer, experts, fn)
}

// noSchedule is the part of a strategy for modes without a schedule of
// their own; it serves a Use with the demand loop.
type noSchedule struct{ demandLoop }

func (noSchedule) scheduleLocked(*Store) {}
func (noSchedule) planned() bool         { return false }
func (noSchedule) abandon() bool         { return false }
func (noSchedule) err() error            { return nil }

// onDemandStrategy reads each missing expert synchronously, one at a time,
// and computes in the router's order.
type onDemandStrategy struct{ noSchedule }

func (onDemandStrategy) speculative() bool               { return false }
func (onDemandStrategy) serial() bool                    { return true }
func (onDemandStrategy) pick(_, inOrder int, _ bool) int { return inOrder }

// parallelStrategy reads all missing experts of a layer at once and
// computes, in order, once all of them are there.
type parallelStrategy struct{ noSchedule }

func (parallelStrategy) speculative() bool { return false }
func (parallelStrategy) serial() bool      { return false }
func (parallelStrategy) pick(_, inOrder int, allReady bool) int {
	return whenAllReady(inOrder, allReady)
}

// lookaheadStrategy is parallelStrategy plus speculative prefetch of the
// predicted experts of the next layer.
type lookaheadStrategy struct{ noSchedule }

func (lookaheadStrategy) speculative() bool { return true }
func (lookaheadStrategy) serial() bool      { return false }
func (lookaheadStrategy) pick(_, inOrder int, allReady bool) int {
	return whenAllReady(inOrder, allReady)
}

// scheduledStrategy is lookaheadStrategy with ready-first compute: resident
// experts first, missing ones in the order their reads complete.
type scheduledStrategy struct{ noSchedule }

func (scheduledStrategy) speculative() bool                  { return true }
func (scheduledStrategy) serial() bool                       { return false }
func (scheduledStrategy) pick(firstReady, _ int, _ bool) int { return firstReady }

func whenAllReady(inOrder int, allReady bool) int {
	if allReady {
		return inOrder
	}
	return -1
}

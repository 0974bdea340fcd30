package expert

// withoutLookahead is a mode's strategy with its lookahead prefetch turned
// off (Options.NoLookahead): the store asks the model for no predictions
// and queues no speculative reads, so every expert is read when demanded.
// The rest of the mode is kept: lookahead then reads like
// on-demand-parallel, and scheduled keeps its ready-first compute over the
// demanded reads. Greedy output is unchanged (prefetch never changes
// routing).
type withoutLookahead struct{ strategy }

func (withoutLookahead) speculative() bool { return false }

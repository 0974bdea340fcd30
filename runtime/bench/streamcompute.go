package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/les"
	"github.com/lesfarm/lesfarm/runtime/measure"
	"github.com/lesfarm/lesfarm/runtime/units"
)

// StreamedCPUPerToken returns the process CPU time per decoded token of
// model with its experts served by the store: the on-demand mode from
// experts (the packed file, or the model when empty) with a budget that
// holds every expert, so after the first repetition (the warm-up, which
// reads them in) nothing is read, over reps repetitions of tokens tokens.
// Against a resident decode's CPU per token it is what the streamed path
// costs the compute (experts computed from the store's buffers, the
// store's bookkeeping around each expert), which a device running the
// runtime pays as well; CPU time, so the host's load does not enter.
func StreamedCPUPerToken(ctx context.Context, model, experts string, threads, reps, tokens int) (time.Duration, error) {
	if reps < 1 || tokens < 2 {
		return 0, errors.New("bench: the streamed compute needs a repetition of two tokens or more")
	}
	s, err := measure.OpenSession(measure.Config{Model: model, ExpertsPath: experts, Mode: expert.OnDemand, Budget: units.Budget{Fraction: 1}, Threads: max(threads, 1)})
	if err != nil {
		return 0, fmt.Errorf("bench: streamed compute: %w", err)
	}
	defer s.Close()
	var cpu time.Duration
	steps := 0
	for i := range reps + 1 {
		var first, last time.Duration
		n := 0
		rp := les.RepParams{Prompts: [][]int{ladderPrompt(4, s.Model.Vocab)}, MaxTokens: tokens}
		rp.OnToken = func(int) error {
			if n++; n == 1 {
				first = processCPU()
			}
			last = processCPU()
			return nil
		}
		if _, err := s.Repetition(ctx, rp); err != nil {
			return 0, fmt.Errorf("bench: streamed compute: %w", err)
		}
		if i > 0 && n > 1 {
			cpu += last - first
			steps += n - 1
		}
	}
	if steps == 0 || cpu <= 0 {
		return 0, errors.New("bench: streamed compute: the decode measured no CPU time")
	}
	return cpu / time.Duration(steps), nil
}

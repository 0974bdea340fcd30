package bench

import (
	"context"
	"fmt"
	"slices"

	"github.com/lesfarm/lesfarm/runtime/les"
)

// measureAlone runs a loaded rung's measured repetitions back to back
// (LadderConfig.OneAtATime), checking each against the reference tokens
// ref, and records its peak RSS over them.
func measureAlone(ctx context.Context, cfg LadderConfig, name string, s *les.Session, one les.RepParams, ref []int, r *ladderRun, progress func(string, ...any)) error {
	for i := range cfg.Repetitions {
		rep, err := s.Repetition(ctx, one)
		if err != nil {
			return fmt.Errorf("bench: %s: %w", name, err)
		}
		r.identical = r.identical && slices.Equal(rep.Tokens[0], ref)
		r.reps = append(r.reps, rep)
		progress("%-18s repetition %d/%d done", name, i+1, cfg.Repetitions)
	}
	r.peakRSS = max(r.peakRSS, s.PeakRSS())
	return nil
}

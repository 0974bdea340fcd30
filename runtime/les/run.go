package les

import (
	"context"
	"errors"
)

// Plan is a measurement: Warmup unmeasured repetitions, then Repetitions
// measured ones, of RepParams.
type Plan struct {
	RepParams
	Warmup, Repetitions int
	// DiscardOutliers drops outlier repetitions (MeasureOptions).
	DiscardOutliers bool
	// Pin pins the measuring goroutine's OS thread (the token loop, and
	// with one thread all compute) to DefaultPinCPU for the run (see Pin).
	Pin bool
	// Before, if set, runs before each repetition (rep < 0 for warm-up
	// ones, 0.. for measured ones), e.g. a cool-down or thermal gate; an
	// error stops the run. After, if set, sees each repetition's Rep.
	Before func(ctx context.Context, rep int) error
	After  func(rep int, r *Rep)
}

// Run measures p: it returns the Result of the measured repetitions, and
// their Reps. It returns ctx's error when cancelled.
func (s *Session) Run(ctx context.Context, p Plan) (*Result, []Rep, error) {
	if p.Repetitions < 1 || p.Warmup < 0 {
		return nil, nil, errors.New("les: a plan needs at least 1 repetition and no negative warm-up")
	}
	if p.Pin {
		unpin, err := Pin(DefaultPinCPU())
		if err != nil {
			return nil, nil, err
		}
		defer unpin()
	}
	reps := make([]Rep, 0, p.Repetitions)
	for i := -p.Warmup; i < p.Repetitions; i++ {
		if err := ctx.Err(); err != nil {
			return nil, reps, err
		}
		if p.Before != nil {
			if err := p.Before(ctx, i); err != nil {
				return nil, reps, err
			}
		}
		r, err := s.Repetition(ctx, p.RepParams)
		if err != nil {
			return nil, reps, err
		}
		if p.After != nil {
			p.After(i, &r)
		}
		if i >= 0 {
			reps = append(reps, r)
		}
	}
	res := s.Measure(reps, p.DiscardOutliers, p.Warmup)
	return &res, reps, nil
}

// Measure is the package's Measure with the session's store kind and its
// peak RSS now.
func (s *Session) Measure(reps []Rep, discardOutliers bool, warmup int) Result {
	res := Measure(reps, MeasureOptions{DiscardOutliers: discardOutliers, Warmup: warmup, Resident: s.Store == nil})
	res.PeakRSSBytes = s.PeakRSS()
	return res
}

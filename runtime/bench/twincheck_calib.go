package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/runtime/expert"
)

// TwinCalibration measures the disk for a twin check (bench --ladder
// --twin-check measure): the cells of the twin's table the store's reads
// fall in, measured now. The twin check calls it before and after each
// direct repetition of each row and prices the twin's repetition by the
// profile's table with those cells replaced by the mean of the two. A
// shared disk's speed drifts from one minute to the next, so a table
// measured before the run prices the twin by another minute's disk; the
// calibration prices it by the disk direct storage met.
type TwinCalibration func(ctx context.Context) ([]TwinCalCell, error)

// TwinCalCell is one cell a calibration measured: US is the mean of the
// measurements before and after the direct run (Before, After).
type TwinCalCell struct {
	Size    int64   `json:"size"`
	Depth   int     `json:"depth"`
	Pattern string  `json:"pattern"`
	US      float64 `json:"us"` // mean µs per read
	Before  float64 `json:"before_us,omitempty"`
	After   float64 `json:"after_us,omitempty"`
}

// calibrateAround measures the disk (cal), runs direct, measures it
// again, and returns base with the measured cells replaced by the means,
// and the cells.
func calibrateAround(ctx context.Context, cal TwinCalibration, base *expert.ServiceTimes, direct func() error) (*expert.ServiceTimes, []TwinCalCell, error) {
	if base == nil {
		return nil, nil, fmt.Errorf("bench: the twin check's calibration needs a twin with a measured service-time table")
	}
	before, err := cal(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: the twin check's calibration: %w", err)
	}
	if err := direct(); err != nil {
		return nil, nil, err
	}
	after, err := cal(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: the twin check's calibration: %w", err)
	}
	if len(after) != len(before) {
		return nil, nil, fmt.Errorf("bench: the twin check's calibration measured %d cells, then %d", len(before), len(after))
	}
	times := map[expert.ServiceCell]time.Duration{}
	cells := make([]TwinCalCell, len(before))
	for i, b := range before {
		a := after[i]
		if a.Size != b.Size || a.Depth != b.Depth || b.US <= 0 || a.US <= 0 {
			return nil, nil, fmt.Errorf("bench: the twin check's calibration measured %+v, then %+v", b, a)
		}
		c := b
		c.Before, c.After, c.US = b.US, a.US, (b.US+a.US)/2
		cells[i] = c
		times[expert.ServiceCell{Size: c.Size, Depth: c.Depth}] = max(time.Duration(c.US*1e3).Round(time.Microsecond), time.Microsecond)
	}
	st, err := base.Remeasured(times)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: the twin check's calibration: %w", err)
	}
	return st, cells, nil
}

// writeCalibration writes each row's calibrations: per cell, the µs per
// read measured before each repetition.
func (r *TwinReport) writeCalibration(b *strings.Builder) {
	have := false
	for _, row := range r.Rows {
		have = have || len(row.Calibrations) > 0
	}
	if !have {
		return
	}
	b.WriteString("\nThe disk around each direct repetition of each row (the cells re-measured for the twin's table: the mean of before and after prices the twin's repetition), µs per read, repetition 1 / 2 / ... as before–after:\n\n| mode | cells |\n| --- | --- |\n")
	for _, row := range r.Rows {
		if len(row.Calibrations) == 0 {
			continue
		}
		var parts []string
		for k, c := range row.Calibrations[0] {
			s := fmt.Sprintf("%s %s × QD %d:", sizeLabel(float64(c.Size)), c.Pattern, c.Depth)
			for i, cal := range row.Calibrations {
				if k < len(cal) {
					sep := " / "
					if i == 0 {
						sep = " "
					}
					s += fmt.Sprintf("%s%.0f–%.0f", sep, cal[k].Before, cal[k].After)
				}
			}
			parts = append(parts, s)
		}
		fmt.Fprintf(b, "| %s | %s |\n", row.Mode, strings.Join(parts, "; "))
	}
}

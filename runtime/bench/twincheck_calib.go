package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/lesfarm/lesfarm/runtime/expert"
)

// TwinCalibration re-measures the disk for a twin check (bench --ladder
// --twin-check measure): called before each repetition of each row, it
// returns the table the twin is priced by in that repetition (the
// profile's, with the cells the store's reads fall in measured now) and
// those cells. A shared disk's speed drifts from one minute to the next,
// so a table measured before the run prices the twin by another minute's
// disk; the calibration prices it by the disk direct storage meets in the
// same repetition.
type TwinCalibration func(ctx context.Context) (*expert.ServiceTimes, []TwinCalCell, error)

// TwinCalCell is one cell a calibration measured.
type TwinCalCell struct {
	Size    int64   `json:"size"`
	Depth   int     `json:"depth"`
	Pattern string  `json:"pattern"`
	US      float64 `json:"us"` // mean µs per read
}

// calibrate runs cal (when set) and gives the twin's store its table. It
// returns the cells measured and the table to price direct storage's
// reads by (the twin's own when cal is nil).
func calibrateTwin(ctx context.Context, cal TwinCalibration, twin *expert.Store, base *expert.ServiceTimes) (*expert.ServiceTimes, []TwinCalCell, error) {
	if cal == nil {
		return base, nil, nil
	}
	st, cells, err := cal(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: the twin check's calibration: %w", err)
	}
	if st == nil || !twin.SetServiceTimes(st) {
		return nil, nil, fmt.Errorf("bench: the twin check's calibration needs a twin priced by a measured table in device time")
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
	b.WriteString("\nThe disk before each repetition of each row (the cells re-measured for the twin's table), µs per read, repetition 1 / 2 / ...:\n\n| mode | cells |\n| --- | --- |\n")
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
					s += fmt.Sprintf("%s%.0f", sep, cal[k].US)
				}
			}
			parts = append(parts, s)
		}
		fmt.Fprintf(b, "| %s | %s |\n", row.Mode, strings.Join(parts, "; "))
	}
}

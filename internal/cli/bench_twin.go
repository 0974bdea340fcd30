package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/runtime/bench"
	"github.com/lesfarm/lesfarm/runtime/calibrate"
	"github.com/lesfarm/lesfarm/runtime/expert"
)

// runTwinCheck is bench --ladder --storage direct --twin-check PROFILE:
// every mode on direct storage and on the twin, interleaved, compared per
// row (bench.RunTwinCheck). With --twin-check measure the twin is this
// host measured in the run, its disk re-measured before every repetition
// of every row (measureTwin).
func runTwinCheck(env *Env, lf *ladderFlags, lc bench.LadderConfig, format string) error {
	switch {
	case !lc.Direct:
		return usagef("--twin-check compares the real disk with its twin: give --storage direct")
	case lf.replay != 0 || lf.mixed != "" || lf.record != "":
		return usagef("--twin-check runs the expert modes only: drop --replay-compute, --mixed and --record-trace")
	case lf.timeBase != "":
		return usagef("--twin-check chooses the time base itself (device time when the twin has a compute section): drop --time")
	case !slices.Contains(bench.TwinFormats, format):
		return usagef("--twin-check writes --format %s", strings.Join(bench.TwinFormats, " or "))
	}
	before := loadAverage()
	var twin *expert.Profile
	var cal bench.TwinCalibration
	if lf.twin == twinMeasure {
		var err error
		if twin, cal, err = measureTwin(env, lc); err != nil {
			if env.Ctx.Err() != nil {
				return fmt.Errorf("bench: interrupted")
			}
			return err
		}
	} else {
		var err error
		if twin, err = profile.Load(lf.twin); err != nil {
			return usagef("--twin-check: %v", err)
		}
	}
	rep, err := bench.RunTwinCheck(env.Ctx, lc, twin, cal)
	if err != nil {
		if errors.Is(err, expert.ErrBudgetTooSmall) {
			return usagef("--expert-budget: %v", err)
		}
		if env.Ctx.Err() != nil {
			return fmt.Errorf("bench: interrupted")
		}
		return err
	}
	if after := loadAverage(); after != "" && before != "" {
		rep.Load = []string{before, after}
	}
	return rep.Write(env.Stdout, format)
}

// twinMeasure is --twin-check's value that measures the twin in the run.
const twinMeasure = "measure"

// Calibration cells: the packed expert read at these depths and naive's
// page runs at depth 1, each read for twinCalCell before and after every
// direct repetition.
var twinCalDepths = []int{1, 2, 4, 8}

const (
	twinGridCell = 200 * time.Millisecond
	twinCalCell  = 150 * time.Millisecond
)

// measureTwin is --twin-check measure: this host's profile measured now
// (profile measure on the files the store reads: the packed experts for
// the expert rows, the model for naive's page runs, the model's decode for
// compute), and a calibration that re-measures the expert row at
// twinCalDepths and the page rows at depth 1 around each direct
// repetition.
func measureTwin(env *Env, lc bench.LadderConfig) (*expert.Profile, bench.TwinCalibration, error) {
	experts := lc.ExpertsPath
	if experts == "" {
		experts = lc.Model
	}
	cfg := calibrate.Config{Name: "this-host-now", Dir: filepath.Dir(experts), Model: lc.Model, ReadFile: experts, PageFile: lc.Model, Experts: experts, CellTime: twinGridCell, Threads: max(lc.Threads, 1)}
	if lc.Progress != nil {
		cfg.Progress = func(line string) { lc.Progress("twin: " + line) }
	}
	res, err := calibrate.Measure(env.Ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: --twin-check measure: %w", err)
	}
	base := res.Profile.Service
	if base == nil || res.Profile.Compute == nil {
		return nil, nil, fmt.Errorf("bench: --twin-check measure: the measurement gave no service-time table or compute")
	}
	var specs []calibrate.CellSpec
	for i, n := range base.Sizes {
		switch base.Pattern(i) {
		case expert.PatternLayer:
			for _, q := range twinCalDepths {
				specs = append(specs, calibrate.CellSpec{Block: n, QD: q, Pattern: expert.PatternLayer})
			}
		case expert.PatternPages:
			specs = append(specs, calibrate.CellSpec{Block: n, QD: 1, Pattern: expert.PatternPages})
		}
	}
	cal := func(ctx context.Context) ([]bench.TwinCalCell, error) {
		cells, err := calibrate.Cells(ctx, experts, lc.Model, lc.Model, twinCalCell, specs)
		if err != nil {
			return nil, err
		}
		out := make([]bench.TwinCalCell, len(cells))
		for i, c := range cells {
			out[i] = bench.TwinCalCell{Size: c.Block, Depth: c.QD, Pattern: c.Pattern, US: float64(c.MeanLatency.Nanoseconds()) / 1e3}
		}
		return out, nil
	}
	return res.Profile, cal, nil
}

// loadAverage is the host's 1-minute load average, or "" where unknown.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/les"
	"github.com/lesfarm/lesfarm/runtime/measure"
	"github.com/lesfarm/lesfarm/runtime/units"
)

// The twin check (bench --ladder --storage direct --twin-check PROFILE):
// does a device's emulated twin, a profile measured on it (lesfarm profile
// measure), predict the ladder the device runs on its real storage? Tok/s
// alone cannot say on a shared host, where the compute speed moves several
// times between runs, so the check loads every mode twice, on direct
// storage and on the twin, runs their repetitions interleaved (direct then
// twin, then twin then direct, ...), and compares per row the parts a
// token's time is made of:
//
//   - bytes and reads per token: what the mode reads (the twin must read
//     what direct storage reads; the flash model prices it);
//   - stall per token: the host's time waiting on reads on direct storage,
//     the device clock's stall on the twin (its flash model);
//   - compute per token: the host's decode time less its stall on direct
//     storage, and its CPU time (which the host's load does not inflate);
//     the profile's compute model on the twin, beside the host's own
//     compute time measured in the same twin run.
//
// Per row it gives the twin's error in tok/s and in each part, and the
// flash-only error: the twin's stall added to the compute direct storage
// measured, against direct storage's time, which leaves the host's compute
// noise out of the flash model's error. All times are per decoded token
// over the kept repetitions (Σ time / Σ tokens), tok/s their inverse.

// TwinSide is one side (direct storage or the twin) of a twin-check row.
type TwinSide struct {
	DecodeTokensPerSecond float64 `json:"decode_tokens_per_second"` // 1000 / ms_per_token
	CV                    float64 `json:"cv"`                       // of the per-repetition decode tok/s
	MSPerToken            float64 `json:"ms_per_token"`             // decode time per token
	StallMSPerToken       float64 `json:"stall_ms_per_token"`
	ComputeMSPerToken     float64 `json:"compute_ms_per_token"`
	// HostComputeMSPerToken is the host's time in the compute segments,
	// measured by the twin's device clock (twin in device time only).
	HostComputeMSPerToken float64 `json:"host_compute_ms_per_token,omitempty"`
	// CPUMSPerToken is the process's CPU time (all threads) per decoded
	// token: the compute the host did, whatever share of the CPU it got.
	CPUMSPerToken     float64 `json:"cpu_ms_per_token"`
	BytesReadPerToken float64 `json:"bytes_read_per_token"`
	ReadsPerToken     float64 `json:"reads_per_token"`
	HitRate           float64 `json:"hit_rate"`
	IdenticalOutput   bool    `json:"identical_output"`
	// IO is direct storage's read histogram in decode (twinIO); the
	// twin's reads come from the page cache and are not listed.
	IO []TwinIOCell `json:"io,omitempty"`
}

// TwinRow is one mode's comparison. Errors are twin ÷ direct − 1.
type TwinRow struct {
	Mode   string   `json:"mode"`
	Direct TwinSide `json:"direct"`
	Twin   TwinSide `json:"twin"`
	// Error is the twin's decode tok/s error.
	Error float64 `json:"error"`
	// StallError, ComputeError and BytesError are the errors of the parts.
	StallError   float64 `json:"stall_error"`
	ComputeError float64 `json:"compute_error"`
	// ComputeCPUError compares the twin's device compute with direct
	// storage's CPU time per token instead of its wall time: on a loaded
	// host the wall time measures the load.
	ComputeCPUError float64 `json:"compute_cpu_error"`
	BytesError      float64 `json:"bytes_error"`
	// FlashOnlyError is the tok/s error of direct's compute plus the
	// twin's stall: the flash model's error without the host's compute
	// noise.
	FlashOnlyError float64 `json:"flash_only_error"`
	// Calibrations are the cells measured before each repetition, with a
	// calibration (--twin-check measure); the twin was priced by them.
	Calibrations [][]TwinCalCell `json:"calibrations,omitempty"`
}

// TwinReport is the result of RunTwinCheck.
type TwinReport struct {
	Model       string    `json:"model"`
	Twin        string    `json:"twin"`
	BudgetBytes int64     `json:"budget_bytes"`
	TimeBase    string    `json:"time_base"` // the twin's: device or host
	Repetitions int       `json:"repetitions"`
	Rows        []TwinRow `json:"rows"`
	// Load is the host's load average before and after, when the caller
	// knows it (the CLI reads /proc/loadavg).
	Load []string `json:"load,omitempty"`
	// Limit is the error bound the summary counts rows against (0.15).
	Limit float64 `json:"limit"`
}

// TwinLimit is the per-row error the twin check aims for.
const TwinLimit = 0.15

// RunTwinCheck runs cfg's ladder (its modes and the oracle, no speculative
// or mixed rung) on direct storage and on the profile twin, interleaved,
// and compares them row by row. cfg.Direct must be set and cfg.Profile
// nil; the twin runs in device time when it has a compute section. With
// cal, the disk is re-measured before each repetition of each row and
// the twin priced by that (TwinCalibration).
func RunTwinCheck(ctx context.Context, cfg LadderConfig, twin *expert.Profile, cal TwinCalibration) (*TwinReport, error) {
	if twin == nil {
		return nil, errors.New("bench: the twin check needs the twin's profile")
	}
	if !cfg.Direct || cfg.Profile != nil {
		return nil, errors.New("bench: the twin check compares direct storage with the twin: give --storage direct and the twin's profile")
	}
	if cfg.Mixed != "" || cfg.RecordTrace != "" {
		return nil, errors.New("bench: the twin check runs the expert modes only (no --mixed, no --record-trace)")
	}
	cfg.DeviceTime, cfg.NoSpeculative = false, true
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	tc := cfg
	tc.Direct, tc.Profile = false, twin
	tc.DeviceTime, _ = (&measure.Config{Profile: twin}).DeviceTime() // the farm's rule for an emulated device
	rep := &TwinReport{Model: cfg.Model, Twin: twin.Name, TimeBase: "host", Repetitions: cfg.Repetitions, Limit: TwinLimit}
	if tc.DeviceTime {
		rep.TimeBase = "device"
	}
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			cfg.Progress(fmt.Sprintf(format, args...))
		}
	}
	lr := &LadderReport{}
	ref, prompt, err := ladderReference(ctx, cfg, lr)
	if err != nil {
		return nil, err
	}
	rep.BudgetBytes = cfg.Budget.Resolve(lr.ExpertBytes)
	budget := units.Budget{Bytes: rep.BudgetBytes}

	type side struct {
		s         *les.Session
		reps      []les.Rep
		tables    []*expert.ServiceTimes // pricing each repetition's reads
		cals      [][]TwinCalCell
		cpu       time.Duration // process CPU time over the decodes
		identical bool
	}
	type pair struct {
		name         string
		direct, twin *side
	}
	var pairs []*pair
	defer func() {
		for _, p := range pairs {
			for _, sd := range []*side{p.direct, p.twin} {
				if sd != nil {
					sd.s.Close()
				}
			}
		}
	}()
	les.FreeMemory()
	base := les.CurrentRSS()
	one := les.RepParams{Prompts: [][]int{prompt}, MaxTokens: cfg.GenTokens}
	var recorded *expert.RoutingTrace
	open := func(c LadderConfig, mode expert.Mode) (*side, error) {
		s, err := openMode(c, mode, budget, base, recorded == nil && mode != expert.OracleMode, recorded)
		if err != nil {
			return nil, err
		}
		sd := &side{s: s, identical: true}
		for i := range cfg.Warmup {
			r, err := s.Repetition(ctx, one)
			if err != nil {
				s.Close()
				return nil, err
			}
			if i == 0 && recorded == nil && mode != expert.OracleMode {
				recorded = s.Store.Meter().Recorded()
			}
			sd.identical = sd.identical && slices.Equal(r.Tokens[0], ref)
		}
		return sd, nil
	}
	modes := slices.Clone(cfg.Modes)
	if !cfg.NoOracle {
		modes = append(modes, expert.OracleMode)
	}
	for _, mode := range modes {
		if mode == expert.OracleMode && recorded == nil {
			return nil, errors.New("bench: the oracle needs a warm-up run of another mode to record the routing (--warmup 1)")
		}
		p := &pair{name: mode.String()}
		pairs = append(pairs, p)
		if p.direct, err = open(cfg, mode); err != nil {
			return nil, fmt.Errorf("bench: %s, direct: %w", mode, err)
		}
		if p.twin, err = open(tc, mode); err != nil {
			return nil, fmt.Errorf("bench: %s, twin: %w", mode, err)
		}
		progress("%-18s loaded and warmed up on direct storage and on the twin (%d runs each)", p.name, cfg.Warmup)
	}
	// run runs one repetition of one side.
	run := func(p *pair, sd *side) error {
		// The decode's CPU time: from the first token sampled to the last.
		var first, last time.Duration
		n := 0
		rp := one
		rp.OnToken = func(int) error {
			if n++; n == 1 {
				first = processCPU()
			}
			last = processCPU()
			return nil
		}
		r, err := sd.s.Repetition(ctx, rp)
		if err != nil {
			return fmt.Errorf("bench: %s: %w", p.name, err)
		}
		sd.cpu += last - first
		sd.identical = sd.identical && slices.Equal(r.Tokens[0], ref)
		sd.reps = append(sd.reps, r)
		return nil
	}
	for i := range cfg.Repetitions {
		for _, p := range pairs {
			if cal != nil {
				// The disk before and after the direct run prices the
				// twin's (in device time the twin does not depend on
				// the host's load, so it need not alternate).
				st, cells, err := calibrateAround(ctx, cal, twin.Service, func() error { return run(p, p.direct) })
				if err != nil {
					return nil, err
				}
				if !p.twin.s.Store.Clock().SetServiceTimes(st) {
					return nil, errors.New("bench: the twin check's calibration needs a twin priced by a measured table in device time")
				}
				p.direct.tables = append(p.direct.tables, st)
				p.twin.cals = append(p.twin.cals, cells)
				if err := run(p, p.twin); err != nil {
					return nil, err
				}
				continue
			}
			p.direct.tables = append(p.direct.tables, twin.Service)
			order := []*side{p.direct, p.twin}
			if i%2 == 1 {
				order[0], order[1] = order[1], order[0]
			}
			for _, sd := range order {
				if err := run(p, sd); err != nil {
					return nil, err
				}
			}
		}
		progress("repetition %d/%d done", i+1, cfg.Repetitions)
	}
	for _, p := range pairs {
		row := TwinRow{Mode: p.name, Direct: twinSide(p.direct.reps, p.direct.cpu, p.direct.identical, false), Twin: twinSide(p.twin.reps, p.twin.cpu, p.twin.identical, tc.DeviceTime)}
		row.Direct.IO = twinIO(p.direct.reps, p.direct.tables)
		row.Calibrations = p.twin.cals
		d, t := &row.Direct, &row.Twin
		row.ComputeCPUError = relErr(t.ComputeMSPerToken, d.CPUMSPerToken)
		row.Error = relErr(t.DecodeTokensPerSecond, d.DecodeTokensPerSecond)
		row.StallError = relErr(t.StallMSPerToken, d.StallMSPerToken)
		row.ComputeError = relErr(t.ComputeMSPerToken, d.ComputeMSPerToken)
		row.BytesError = relErr(t.BytesReadPerToken, d.BytesReadPerToken)
		if ms := d.ComputeMSPerToken + t.StallMSPerToken; ms > 0 {
			row.FlashOnlyError = relErr(1e3/ms, d.DecodeTokensPerSecond)
		}
		rep.Rows = append(rep.Rows, row)
		progress("%-18s direct %.2f, twin %.2f tok/s (%+.0f%%); stall %.1f / %.1f ms, compute %.1f / %.1f ms, %.1f / %.1f MB per token", p.name,
			d.DecodeTokensPerSecond, t.DecodeTokensPerSecond, 100*row.Error, d.StallMSPerToken, t.StallMSPerToken, d.ComputeMSPerToken, t.ComputeMSPerToken, d.BytesReadPerToken/1e6, t.BytesReadPerToken/1e6)
	}
	return rep, nil
}

// twinSide sums one side's repetitions. In device time decode, stall and
// compute are the device clock's; otherwise the host's wall time, the
// store's wait on reads, and their difference.
func twinSide(reps []les.Rep, cpu time.Duration, identical, deviceTime bool) TwinSide {
	res := les.Measure(reps, les.MeasureOptions{})
	st := res.Expert
	var decode time.Duration
	for _, r := range reps {
		decode += r.Decode
	}
	stall := st.Stall
	if deviceTime {
		stall = st.DeviceStall
	}
	compute := max(decode-stall, 0)
	tok := float64(max(res.DecodeTokens, 1))
	ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 / tok }
	sd := TwinSide{
		CV: res.DecodeTPS.CV, MSPerToken: ms(decode), CPUMSPerToken: ms(cpu), StallMSPerToken: ms(stall), ComputeMSPerToken: ms(compute),
		BytesReadPerToken: float64(st.BytesRead) / tok, ReadsPerToken: float64(st.Reads) / tok, HitRate: res.HitRate, IdenticalOutput: identical,
	}
	if deviceTime {
		sd.ComputeMSPerToken = ms(st.DeviceCompute)
		sd.HostComputeMSPerToken = ms(st.HostCompute)
	}
	if sd.MSPerToken > 0 {
		sd.DecodeTokensPerSecond = 1e3 / sd.MSPerToken
	}
	return sd
}

// relErr is got ÷ want − 1, or 0 when want is 0.
func relErr(got, want float64) float64 {
	if want == 0 {
		return 0
	}
	return got/want - 1
}

// Within counts the rows whose tok/s error is within the limit.
func (r *TwinReport) Within() int {
	n := 0
	for _, row := range r.Rows {
		if row.Error >= -r.Limit && row.Error <= r.Limit {
			n++
		}
	}
	return n
}

package bench

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/pack"
	"github.com/lesfarm/lesfarm/runtime/tensor"
	"github.com/lesfarm/lesfarm/runtime/units"
)

// twinProfileUS is the flat time of every read in the test twin's
// profile table, and twinReadUS the flat time of the table its
// calibration measures before each repetition (a disk twice as slow as
// the profile's), so a synchronous mode's device stall is its reads times
// twinReadUS, and a twin priced by the profile instead is caught.
const (
	twinProfileUS = 125
	twinReadUS    = 250
)

// twinProfile is a measured-style profile (service_times table, compute)
// whose read-ahead is the one direct storage uses for dir, as profile
// measure records it.
func twinProfile(t *testing.T, dir string) *expert.Profile {
	t.Helper()
	ra := int64(expert.DirectReadAhead)
	if r, ok := expert.DeviceReadAhead(dir); ok {
		ra = r
	}
	ra = max(ra, 4096) / 4096 * 4096
	y := fmt.Sprintf(`name: test-twin
bandwidth: 1GB/s
latency: 100us
max_in_flight: 4
page_size: 4KiB
read_ahead: %d
service_times:
  queue_depths: [1, 4]
  reads:
    - {size: 4096, times: [%[2]dus, %[2]dus]}
    - {size: 1048576, times: [%[2]dus, %[2]dus]}
    - {size: 67108864, times: [%[2]dus, %[2]dus]}
compute:
  weight_bandwidth: 2GB/s
  throughput: 100GFLOP/s
`, ra, twinProfileUS)
	p, err := profile.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTwinCheckStructure is the twin check's bounded CI form on a small
// model: the twin reads exactly the bytes direct storage reads in every
// mode that reads on demand (naive, on-demand, on-demand-parallel), its synchronous modes' stall is the measured
// table applied to those reads, every output is the resident one, and the
// errors are the stated ratios of the parts. It runs with a calibration
// (as --twin-check measure does), called before and after every direct
// repetition of every row: the twin is priced by the mean of the two, not
// by the profile's table, and the report lists what it measured.
func TestTwinCheckStructure(t *testing.T) {
	c := model.SynthConfig{Layers: 3, Experts: 16, ExpertsUsed: 4, Hidden: 256, ExpertFFN: 256, Heads: 4, KVHeads: 2, Vocab: 512, Context: 128, Type: tensor.Q4_K, Seed: 5}
	p := writeSynth(t, c)
	packed := filepath.Join(filepath.Dir(p), "m.packed.gguf")
	if err := pack.Pack(context.Background(), p, packed, pack.Options{}); err != nil {
		t.Fatal(err)
	}
	twin := twinProfile(t, filepath.Dir(p))
	// The disk measures 1.5× the twin's read time before each direct
	// run and 0.5× after: the twin is priced by the mean of the two, the
	// calibration's flat table, not the profile's.
	calls := 0
	cal := func(context.Context) ([]TwinCalCell, error) {
		calls++
		f := 1.5
		if calls%2 == 0 {
			f = 0.5
		}
		var cells []TwinCalCell
		for _, n := range twin.Service.Sizes {
			for _, q := range twin.Service.QueueDepths {
				cells = append(cells, TwinCalCell{Size: n, Depth: q, Pattern: expert.PatternLayer, US: f * twinReadUS})
			}
		}
		return cells, nil
	}
	const reps = 2
	rep, err := RunTwinCheck(context.Background(), LadderConfig{
		Model: p, ExpertsPath: packed, Direct: true, Budget: units.Budget{Fraction: 0.3}, Threads: 1, Repetitions: reps, Warmup: 1, PromptTokens: 4, GenTokens: 10,
		Modes: []expert.Mode{expert.Naive, expert.OnDemand, expert.OnDemandParallel},
	}, twin, cal)
	if err != nil {
		t.Fatal(err)
	}
	if rep.TimeBase != "device" || len(rep.Rows) != 4 || rep.Rows[3].Mode != "oracle" {
		t.Fatalf("report %+v", rep)
	}
	if calls != 2*reps*len(rep.Rows) {
		t.Errorf("the calibration ran %d times, want before and after each repetition of each row (%d)", calls, 2*reps*len(rep.Rows))
	}
	for _, row := range rep.Rows {
		if len(row.Calibrations) != reps || len(row.Calibrations[0]) != 6 || row.Calibrations[1][0].US != twinReadUS || row.Calibrations[1][0].Before != 1.5*twinReadUS {
			t.Errorf("%s: calibrations %+v, want the cells measured around each of %d repetitions", row.Mode, row.Calibrations, reps)
		}
		d, tw := row.Direct, row.Twin
		t.Logf("%s: direct %.1f tok/s, %.0f B/token, %.2f reads, stall %.3f ms; twin %.1f tok/s, %.0f B/token, %.2f reads, stall %.3f ms, compute %.3f ms (host %.3f)",
			row.Mode, d.DecodeTokensPerSecond, d.BytesReadPerToken, d.ReadsPerToken, d.StallMSPerToken, tw.DecodeTokensPerSecond, tw.BytesReadPerToken, tw.ReadsPerToken, tw.StallMSPerToken, tw.ComputeMSPerToken, tw.HostComputeMSPerToken)
		if !d.IdenticalOutput || !tw.IdenticalOutput {
			t.Errorf("%s: output differs from the resident run", row.Mode)
		}
		// The oracle prefetches, and whether a prefetch is still wanted
		// when its read would start depends on timing: only the modes
		// that read on demand must match to the byte.
		exact := row.Mode != "oracle"
		if d.BytesReadPerToken <= 0 || tw.BytesReadPerToken <= 0 || exact && (tw.BytesReadPerToken != d.BytesReadPerToken || tw.ReadsPerToken != d.ReadsPerToken || row.BytesError != 0) {
			t.Errorf("%s: twin reads %.0f B in %.2f reads per token, direct %.0f B in %.2f", row.Mode, tw.BytesReadPerToken, tw.ReadsPerToken, d.BytesReadPerToken, d.ReadsPerToken)
		}
		if tw.ComputeMSPerToken <= 0 || tw.HostComputeMSPerToken <= 0 || d.ComputeMSPerToken <= 0 || d.StallMSPerToken <= 0 || d.CPUMSPerToken <= 0 {
			t.Errorf("%s: parts not measured: %+v / %+v", row.Mode, d, tw)
		}
		if math.Abs(d.StallMSPerToken+d.ComputeMSPerToken-d.MSPerToken) > 1e-6*d.MSPerToken || math.Abs(tw.StallMSPerToken+tw.ComputeMSPerToken-tw.MSPerToken) > 1e-6*tw.MSPerToken {
			t.Errorf("%s: stall + compute is not the token's time: %+v / %+v", row.Mode, d, tw)
		}
		if want := tw.ComputeMSPerToken/d.CPUMSPerToken - 1; math.Abs(row.ComputeCPUError-want) > 1e-9 {
			t.Errorf("%s: compute error (CPU) %v, want %v", row.Mode, row.ComputeCPUError, want)
		}
		if want := 1e3/(d.ComputeMSPerToken+tw.StallMSPerToken)/d.DecodeTokensPerSecond - 1; math.Abs(row.FlashOnlyError-want) > 1e-9 {
			t.Errorf("%s: flash-only error %v, want %v", row.Mode, row.FlashOnlyError, want)
		}
		// One read at a time (a page run, or a packed blob), each at the
		// table's flat QD-1 time.
		if row.Mode == "naive" || row.Mode == "on-demand" {
			want := tw.ReadsPerToken * twinReadUS / 1e3
			if math.Abs(tw.StallMSPerToken/want-1) > 0.01 {
				t.Errorf("%s: twin stall %.4f ms per token, want %.2f reads × %d µs = %.4f ms", row.Mode, tw.StallMSPerToken, tw.ReadsPerToken, twinReadUS, want)
			}
		}
		// on-demand-parallel issues a layer's misses together: the table
		// is flat up to QD 4 (the model's top-4), so each batch of reads
		// takes one QD-1 time, not one per read.
		if row.Mode == "on-demand-parallel" {
			one := tw.ReadsPerToken * twinReadUS / 1e3
			if tw.StallMSPerToken > one*1.01 || tw.StallMSPerToken < one/4*0.99 {
				t.Errorf("%s: twin stall %.4f ms per token, want between a quarter and all of %.2f reads × %d µs", row.Mode, tw.StallMSPerToken, tw.ReadsPerToken, twinReadUS)
			}
		}
		// Direct storage's read histogram covers its reads, and the
		// modes that read one expert or page run at a time read at QD 1.
		var reads float64
		for _, c := range d.IO {
			reads += c.ReadsPerToken
			// Flat to QD 4, then QD 4's throughput. Each repetition prices
			// the cell at its own mean depth, and the price is convex in
			// depth, so the cell's price is at least the price at the
			// pooled mean depth and at most the price at the top of the
			// cell's depth range (depths round to the cell).
			lo := twinReadUS * max(1, c.MeanDepth/4)
			hi := twinReadUS * max(1, (float64(c.Depth)+0.5)/4)
			if c.TableUS < lo-1 || c.TableUS > hi+1 || c.MeanUS <= 0 || c.MeanBytes <= 0 {
				t.Errorf("%s: read histogram cell %+v: want the table's %.0f–%.0f µs beside a measured time", row.Mode, c, lo, hi)
			}
			if (row.Mode == "naive" || row.Mode == "on-demand") && c.Depth != 1 {
				t.Errorf("%s: %.2f reads per token at depth %d; one read at a time is depth 1", row.Mode, c.ReadsPerToken, c.Depth)
			}
		}
		// (A read in flight when a decode's counters are taken is in one
		// count and not yet in the other: the oracle prefetches across
		// tokens.)
		if exact && math.Abs(reads-d.ReadsPerToken) > 1e-9*d.ReadsPerToken {
			t.Errorf("%s: histogram holds %.3f reads per token, the store counted %.3f", row.Mode, reads, d.ReadsPerToken)
		}
	}
	var md strings.Builder
	if err := rep.Write(&md, "md"); err != nil || !strings.Contains(md.String(), "| naive |") || !strings.Contains(md.String(), "rows within ±15%") || !strings.Contains(md.String(), "× QD 1:") ||
		!strings.Contains(md.String(), "1.00 MiB layer × QD 1: 375–125 / 375–125") {
		t.Fatalf("md: %v\n%s", err, md.String())
	}
}

// TestTwinCheckBadInput: one-line errors for a twin check that cannot run.
func TestTwinCheckBadInput(t *testing.T) {
	p := writeSynth(t, model.SynthConfig{Layers: 1, Experts: 4, ExpertsUsed: 2, Hidden: 64, ExpertFFN: 64, Heads: 2, Vocab: 300, Context: 64, Type: tensor.F32})
	twin := twinProfile(t, filepath.Dir(p))
	for _, tc := range []struct {
		cfg  LadderConfig
		twin *expert.Profile
		want string
	}{
		{LadderConfig{Model: p, Direct: true, Budget: units.Budget{Fraction: 0.5}}, nil, "needs the twin's profile"},
		{LadderConfig{Model: p, Profile: twin, Budget: units.Budget{Fraction: 0.5}}, twin, "--storage direct"},
		{LadderConfig{Model: p, Direct: true, Budget: units.Budget{Fraction: 0.5}, Mixed: p}, twin, "expert modes only"},
		{LadderConfig{Model: p, Direct: true, Budget: units.Budget{Fraction: 0.5}, Warmup: 0, Repetitions: 1, Modes: []expert.Mode{expert.OnDemand}}, twin, ""},
	} {
		_, err := RunTwinCheck(context.Background(), tc.cfg, tc.twin, nil)
		if tc.want == "" {
			if err == nil || !strings.Contains(err.Error(), "warm-up") || strings.Contains(err.Error(), "\n") {
				t.Errorf("no warm-up: err = %v, want one line asking for a warm-up", err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("err = %v, want one line mentioning %q", err, tc.want)
		}
	}
}

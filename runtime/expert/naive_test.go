package expert_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/generate"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// synthModel writes a small random-weight qwen3moe model the repo owns (no
// shared fixture needed) and returns its path.
func synthModel(t testing.TB, typ tensor.Type) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "synth.gguf")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	c := model.SynthConfig{Layers: 3, Experts: 16, ExpertsUsed: 4, Hidden: 128, ExpertFFN: 256, Heads: 4, KVHeads: 2, Vocab: 512, Context: 256, Type: typ, Seed: 7}
	if err := model.WriteSynthetic(f, c); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func testProfile(t testing.TB, extra string) *expert.Profile {
	t.Helper()
	p, err := profile.Parse([]byte("name: test\nbandwidth: 2GB/s\nlatency: 20us\nmax_in_flight: 8\n" + extra))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const testCompute = "compute:\n  weight_bandwidth: 2GB/s\n  throughput: 50GFLOP/s\n"

func greedyWith(t *testing.T, path string, src func(*gguf.File, []moe.LayerShape) (moe.Source, error)) []int {
	t.Helper()
	m, err := model.Load(path, model.Options{Threads: 1, Experts: src})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := generate.Run(context.Background(), m, generate.Params{PromptIDs: []int{5, 17, 99, 3, 250}, MaxTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	return res.TokenIDs
}

// TestNaiveMatchesResident is the exactness contract for the naive mode:
// at a tight budget, with 4 KiB and 16 KiB pages, with and without
// read-ahead, emulated and on direct storage, greedy output equals the
// all-resident run, memory stays within budget, and what is read is
// deterministic.
func TestNaiveMatchesResident(t *testing.T) {
	path := synthModel(t, tensor.Q8_0)
	want := greedyWith(t, path, nil)
	for _, pc := range []struct{ name, yaml string }{
		{"4KiB", "page_size: 4KiB\n"},
		{"16KiB+ra64KiB", "page_size: 16KiB\nread_ahead: 64KiB\n"},
		{"4KiB+ra128KiB+device-time", "page_size: 4KiB\nread_ahead: 128KiB\n" + testCompute},
	} {
		for _, direct := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/direct=%v", pc.name, direct), func(t *testing.T) {
				prof := testProfile(t, pc.yaml)
				var reads [2]expert.Stats
				for run := range 2 {
					var s *expert.Store
					opts := expert.Options{Mode: expert.Naive, Profile: prof, Direct: direct, DeviceTime: prof.Compute != nil}
					if direct {
						opts.Profile = nil
						opts.DeviceTime = false
					}
					got := greedyWith(t, path, storeSource(t, path, "", opts, 0.3, &s))
					if !slices.Equal(got, want) {
						t.Fatalf("naive: %v, want %v", got, want)
					}
					st := s.Meter().Stats()
					budget := int64(0.3 * float64(totalExpertBytes(t, path)))
					if st.PeakBytes > budget || st.CacheBytes > budget {
						t.Fatalf("peak %d / cache %d bytes over the budget %d", st.PeakBytes, st.CacheBytes, budget)
					}
					// On direct storage the window is the disk's
					// read-ahead (8 MiB on some VMs), which at this
					// budget thrashes as a mapping would: no hits.
					if st.Misses == 0 || st.Reads == 0 || (!direct && st.Hits == 0) {
						t.Fatalf("implausible stats %+v", st)
					}
					if opts.DeviceTime && (st.DeviceCompute <= 0 || st.Dilation() <= 0 || st.DeviceStall <= 0) {
						t.Fatalf("device time not accounted: %+v", st)
					}
					reads[run] = st
				}
				if reads[0].Reads != reads[1].Reads || reads[0].BytesRead != reads[1].BytesRead || reads[0].Hits != reads[1].Hits {
					t.Fatalf("not deterministic: %d reads / %d bytes / %d hits, then %d / %d / %d", reads[0].Reads, reads[0].BytesRead, reads[0].Hits, reads[1].Reads, reads[1].BytesRead, reads[1].Hits)
				}
			})
		}
	}
}

// TestNaiveReadsPages checks the fault arithmetic: with no read-ahead,
// each fault reads one page, and a larger read-ahead reads more per fault
// and faults less.
func TestNaiveReadsPages(t *testing.T) {
	path := synthModel(t, tensor.Q8_0)
	var perFault [2]float64
	var faults [2]int64
	for i, ra := range []string{"", "read_ahead: 64KiB\n"} {
		var s *expert.Store
		greedyWith(t, path, storeSource(t, path, "", expert.Options{Mode: expert.Naive, Profile: testProfile(t, "page_size: 4KiB\n"+ra)}, 0.3, &s))
		st := s.Meter().Stats()
		perFault[i] = float64(st.BytesRead) / float64(st.Reads)
		faults[i] = st.Reads
	}
	if perFault[0] != 4096 {
		t.Fatalf("no read-ahead: %.0f bytes per fault, want 4096", perFault[0])
	}
	if perFault[1] <= 4096 || faults[1] >= faults[0] {
		t.Fatalf("read-ahead: %.0f bytes per fault over %d faults, without %d faults", perFault[1], faults[1], faults[0])
	}
}

func totalExpertBytes(t *testing.T, path string) int64 {
	t.Helper()
	m, err := model.Load(path, model.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	return m.ExpertBytes
}

// TestDeviceTimeErrors: device time asked of a profile without a compute
// section, absurd compute speeds and slowdowns get one-line errors.
func TestDeviceTimeErrors(t *testing.T) {
	path := synthModel(t, tensor.F32)
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	shapes := []moe.LayerShape{}
	m, err := model.Load(path, model.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range m.Layers {
		shapes = append(shapes, l.Shape)
	}
	m.Close()
	for _, tc := range []struct {
		name string
		opts expert.Options
		want string
	}{
		{"no compute", expert.Options{Profile: testProfile(t, ""), DeviceTime: true}, "compute"},
		{"direct", expert.Options{Direct: true, DeviceTime: true}, "device profile"},
		{"slowdown", expert.Options{Profile: testProfile(t, testCompute), ComputeSlowdown: 0.5}, "slowdown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Budget = 1 << 30
			_, err := expert.Open(path, f, shapes, "", tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %v, want one line mentioning %q", err, tc.want)
			}
		})
	}
	for _, y := range []string{
		"compute:\n  weight_bandwidth: 0GB/s\n  throughput: 1TFLOP/s\n",
		"compute:\n  weight_bandwidth: 60GB/s\n  throughput: 0FLOP/s\n",
		"compute:\n  weight_bandwidth: 1EB/s\n  throughput: 1TFLOP/s\n",
		"compute:\n  weight_bandwidth: 60GB/s\n  throughput: 1e30FLOP/s\n",
		"compute:\n  weight_bandwidth: 60GB/s\n",
		"compute:\n  weight_bandwidth: fast\n  throughput: 1TFLOP/s\n",
		"compute:\n  weight_bandwidth: 60GB/s\n  throughput: 1TFLOP/s\n  page_cost: 1s\n",
		"compute:\n  weight_bandwidth: 60GB/s\n  throughput: 1TFLOP/s\n  page_cost: -1ns\n",
		"compute:\n  weight_bandwidth: 60GB/s\n  throughput: 1TFLOP/s\n  page_cost: cheap\n",
		"page_size: 3000\n",
		"read_ahead: 1GiB\n",
	} {
		_, err := profile.Parse([]byte("name: x\nbandwidth: 1GB/s\nlatency: 1us\nmax_in_flight: 4\n" + y))
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: err = %v, want a one-line error", y, err)
		}
	}
}

// TestProfileRoundTrip: MarshalProfile's YAML parses back to the same
// profile, compute section and naive parameters included.
func TestProfileRoundTrip(t *testing.T) {
	for _, name := range profile.Builtin() {
		p, err := profile.Load(name)
		if err != nil {
			t.Fatal(err)
		}
		p.RAMBudget = 12345678
		p.ReadAhead = 128 << 10
		q, err := profile.Parse(expert.MarshalProfile(p, "measured\nby a test"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		pc, qc := p.Compute, q.Compute
		p.Compute, q.Compute = nil, nil
		if *p != *q || (pc == nil) != (qc == nil) || (pc != nil && *pc != *qc) {
			t.Fatalf("%s: round trip\n%+v %+v\n%+v %+v", name, *p, pc, *q, qc)
		}
	}
}

// TestDeviceTimeMatchesResident: under device time every mode gives the
// all-resident tokens within budget, and the device time of the modes
// without speculation is deterministic (it depends on the device clock
// only, not on the host).
func TestDeviceTimeMatchesResident(t *testing.T) {
	path := synthModel(t, tensor.Q8_0)
	want := greedyWith(t, path, nil)
	prof := testProfile(t, "read_ahead: 32KiB\n"+testCompute)
	var rec *expert.Store
	greedyWith(t, path, storeSource(t, path, "", expert.Options{Mode: expert.OnDemand, Record: true}, 1, &rec))
	tr := rec.Meter().Recorded()
	for _, mode := range append(expert.Modes(), expert.OracleMode) {
		t.Run(mode.String(), func(t *testing.T) {
			var dev [2]expert.Stats
			for run := range 2 {
				var s *expert.Store
				opts := expert.Options{Mode: mode, Profile: prof, DeviceTime: true, Trace: tr}
				got := greedyWith(t, path, storeSource(t, path, "", opts, 0.3, &s))
				if !slices.Equal(got, want) {
					t.Fatalf("tokens %v, want %v", got, want)
				}
				st := s.Meter().Stats()
				if st.DeviceCompute <= 0 || st.HostCompute <= 0 || st.DeviceTime() < st.DeviceCompute {
					t.Fatalf("device time not accounted: %+v", st)
				}
				if budget := int64(0.3 * float64(totalExpertBytes(t, path))); st.PeakBytes > budget {
					t.Fatalf("peak %d over budget %d", st.PeakBytes, budget)
				}
				dev[run] = st
			}
			if mode == expert.Naive || mode == expert.OnDemand || mode == expert.OnDemandParallel {
				if dev[0].DeviceTime() != dev[1].DeviceTime() || dev[0].BytesRead != dev[1].BytesRead {
					t.Fatalf("device time %v then %v, bytes %d then %d: not deterministic", dev[0].DeviceTime(), dev[1].DeviceTime(), dev[0].BytesRead, dev[1].BytesRead)
				}
			}
		})
	}
}

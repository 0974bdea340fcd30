package expert

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	fx "github.com/lesfarm/lesfarm/internal/fixture"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/moe"
)

var update = flag.Bool("update", false, "rewrite testdata/traces/replay.golden")

func equalSizes(layers int, size int64) []int64 {
	s := make([]int64, layers)
	for i := range s {
		s[i] = size
	}
	return s
}

// TestReplayMINIsOptimal: on random traces and budgets MIN's plan reads no
// more than any policy, the horizon bound with an unbounded horizon is MIN,
// and every replay accounts for each demand.
func TestReplayMINIsOptimal(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		tr := randomTrace(seed, 50, 4, 32, 4)
		sizes := equalSizes(4, 100)
		for _, slots := range []int64{4, 9, 24, 80} {
			budget := slots * 100
			min, err := ReplayMIN(tr, sizes, budget)
			if err != nil {
				t.Fatal(err)
			}
			inf, err := ReplayCache(tr, sizes, NewHorizonOracle(tr, 1<<30), budget)
			if err != nil {
				t.Fatal(err)
			}
			if inf.Reads != min.Reads {
				t.Fatalf("seed %d budget %d: unbounded horizon reads %d, MIN %d", seed, budget, inf.Reads, min.Reads)
			}
			for _, name := range append(PolicyNames(), "horizon-0", "horizon-4") {
				var p Policy
				if h, ok := strings.CutPrefix(name, "horizon-"); ok {
					var n int
					fmt.Sscan(h, &n)
					p = NewHorizonOracle(tr, n)
				} else {
					p, _ = NewPolicy(name)
				}
				r, err := ReplayCache(tr, sizes, p, budget)
				if err != nil {
					t.Fatal(err)
				}
				if r.Hits+r.Reads != r.Demands || r.Demands != int64(tr.Len()) || r.BytesRead != 100*r.Reads {
					t.Fatalf("%s: hits %d + reads %d != demands %d (trace %d), bytes %d", name, r.Hits, r.Reads, r.Demands, tr.Len(), r.BytesRead)
				}
				if r.BytesRead < min.BytesRead {
					t.Fatalf("seed %d budget %d: %s read %d bytes, fewer than MIN's %d", seed, budget, name, r.BytesRead, min.BytesRead)
				}
			}
		}
	}
}

func TestRankPrecision(t *testing.T) {
	t.Parallel()
	tr := &RoutingTrace{Calls: []TraceCall{
		{Layer: 0, Experts: []int{1, 2}, Prefetch: true},
		{Layer: 0, Experts: []int{1, 3}},
		{Layer: 1, Experts: []int{0, 1, 2, 3}, Prefetch: true}, // a union: not ranked
		{Layer: 1, Experts: []int{0}},
		{Layer: 0, Experts: []int{2, 1}, Prefetch: true},
		{Layer: 0, Experts: []int{2, 1}},
		{Layer: 0, Experts: []int{2, 1}}, // no prediction
	}}
	hits, seen := tr.RankPrecision(2, 2)
	if want := [][]int64{{2, 1}, nil}; !reflect.DeepEqual(hits, want) {
		t.Fatalf("hits %v, want %v", hits, want)
	}
	if want := [][]int64{{2, 2}, nil}; !reflect.DeepEqual(seen, want) {
		t.Fatalf("seen %v, want %v", seen, want)
	}
}

func TestReplayBadInput(t *testing.T) {
	t.Parallel()
	tr := randomTrace(1, 4, 2, 8, 4)
	if _, err := ReplayCache(tr, equalSizes(2, 100), newLFU(), 50); err == nil || !strings.Contains(err.Error(), "needs more than") {
		t.Fatalf("a call larger than the budget: %v", err)
	}
	if _, err := ReplayMIN(tr, equalSizes(1, 100), 1000); err == nil || !strings.Contains(err.Error(), "names layer 1") {
		t.Fatalf("a trace with more layers than sizes: %v", err)
	}
	p := NewLayeredPolicy([]int64{600, 600})
	if _, err := ReplayCache(tr, equalSizes(2, 100), p, 1000); err == nil || !strings.Contains(err.Error(), "over the 1000-byte budget") {
		t.Fatalf("per-layer budgets over the budget: %v", err)
	}
	if _, err := NewPolicy("belady2"); err == nil || !strings.Contains(err.Error(), "unknown cache policy") {
		t.Fatalf("unknown policy: %v", err)
	}
}

// traceFiles are the recorded traces the repo keeps (bench --ladder
// --record-trace, prompt 16 + 64 generated tokens, scheduled mode): the
// phone-shaped synthetic model, the golden fixture and the trained model.
var traceFiles = []string{"phone-q4k.trace.gz", "golden-q4_k_m.trace.gz", "trained-kjv-f16.trace.gz"}

// replayTable replays every recorded trace three times over (as the ladder
// repeats its prompt) through each policy and the bounds at 10, 20 and 40%
// budgets.
func replayTable(t *testing.T) string {
	var b strings.Builder
	fmt.Fprintln(&b, "# trace budget policy hits demands hit_rate bytes bytes_vs_min")
	for _, name := range traceFiles {
		tf, err := ReadTraceFile(filepath.Join("testdata", "traces", name))
		if err != nil {
			t.Fatal(err)
		}
		sizes := make([]int64, len(tf.Model.Layers))
		for l := range sizes {
			sizes[l] = tf.Model.ExpertBytes(l)
		}
		tr := tf.Trace.Repeat(3)
		for _, pct := range []int64{10, 20, 40} {
			budget := tf.Model.TotalExpertBytes() * pct / 100
			min, err := ReplayMIN(tr, sizes, budget)
			if err != nil {
				t.Fatal(err)
			}
			row := func(r CacheReplay) {
				fmt.Fprintf(&b, "%s %d%% %s %d %d %.4f %d %.3f\n", name, pct, r.Policy, r.Hits, r.Demands, r.HitRate(), r.BytesRead, float64(r.BytesRead)/float64(min.BytesRead))
			}
			for _, pn := range PolicyNames() {
				p, _ := NewPolicy(pn)
				r, err := ReplayCache(tr, sizes, p, budget)
				if err != nil {
					t.Fatal(err)
				}
				row(r)
			}
			for _, h := range []int{0, 1, 24} {
				o := NewHorizonOracle(tr, h)
				r, err := ReplayCache(tr, sizes, o, budget)
				if err != nil {
					t.Fatal(err)
				}
				r.Policy = o.Name()
				row(r)
			}
			row(min)
		}
	}
	return b.String()
}

// TestRecordedTraceReplay replays the repo's recorded traces and compares
// hits and bytes with testdata/traces/replay.golden, so a policy change
// shows its byte cost (go test -run TestRecordedTraceReplay -update
// rewrites it; review the diff).
func TestRecordedTraceReplay(t *testing.T) {
	t.Parallel()
	if raceBuild {
		t.Skip("cache-only replay is single-goroutine code; it runs in full without -race (10x slower under it)")
	}
	got := replayTable(t)
	golden := filepath.Join("testdata", "traces", "replay.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gl), len(wl)) {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Errorf("replay changed:\n  was %s\n  now %s", w, g)
			}
		}
		t.Fatal("cache-only replay results changed; if intended, rerun with -update and commit the new golden")
	}
	// The best online policy never reads more than LFU, the baseline, on
	// these traces (within 1%).
	best := map[string]float64{}
	lfu := map[string]float64{}
	for _, line := range strings.Split(got, "\n") {
		f := strings.Fields(line)
		if len(f) != 8 || f[0] == "#" {
			continue
		}
		key := f[0] + " " + f[1]
		var ratio float64
		fmt.Sscan(f[7], &ratio)
		switch f[2] {
		case "lfu":
			lfu[key] = ratio
		case "nextuse":
			best[key] = ratio
		}
	}
	for k, r := range best {
		if r > lfu[k]*1.01 {
			t.Errorf("%s: nextuse reads %.3f× MIN, LFU %.3f×", k, r, lfu[k])
		}
	}
}

// TestRecordedTracesMatchTheirModels: each fixture trace names the model it
// came from, and matches it (the phone-shaped model is not kept; its trace
// is checked against its recorded geometry).
func TestRecordedTracesMatchTheirModels(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ trace, model string }{
		{"golden-q4_k_m.trace.gz", "golden/tiny-qwen3moe-q4_k_m.gguf"},
		{"trained-kjv-f16.trace.gz", "trained/tiny-moe-kjv-f16.gguf"},
	} {
		tf, err := ReadTraceFile(filepath.Join("testdata", "traces", tc.trace))
		if err != nil {
			t.Fatal(err)
		}
		path := fx.Shared(t, tc.model, "trace/model matching on the shared fixtures")
		m := modelTraceModel(t, path)
		if err := tf.Model.Match(m); err != nil {
			t.Fatalf("%s: %v", tc.trace, err)
		}
		other := "trained-kjv-f16.trace.gz"
		if tc.trace == other {
			other = "golden-q4_k_m.trace.gz"
		}
		of, err := ReadTraceFile(filepath.Join("testdata", "traces", other))
		if err != nil {
			t.Fatal(err)
		}
		if err := of.Model.Match(m); err == nil || !strings.Contains(err.Error(), "another model") {
			t.Fatalf("%s against %s: %v, want a mismatch", other, tc.model, err)
		}
	}
	tf, err := ReadTraceFile(filepath.Join("testdata", "traces", "phone-q4k.trace.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if len(tf.Model.Layers) != 24 || tf.Model.Layers[0].Experts != 128 || tf.Model.ExpertsUsed != 8 {
		t.Fatalf("phone trace model %s", tf.Model)
	}
}

// modelTraceModel loads the model at path far enough to learn its expert
// shapes.
func modelTraceModel(t *testing.T, path string) TraceModel {
	t.Helper()
	stop := errors.New("shapes read")
	var tm TraceModel
	_, err := model.Load(path, model.Options{Threads: 1, Experts: func(f *gguf.File, shapes []moe.LayerShape) (moe.Source, error) {
		tm = TraceModelOf(f, shapes)
		return nil, stop
	}})
	if !errors.Is(err, stop) {
		t.Fatalf("loading %s: %v", path, err)
	}
	return tm
}

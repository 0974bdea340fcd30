package cli_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/regress"
	"github.com/lesfarm/lesfarm/coordinator/regress/monitor"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
)

// TestRegressDetectPooledCLI: the offline detect judges a series named by
// its key with the noise pooled from its siblings, as the coordinator's
// monitor does — the siblings the monitor stored in the coordinator's
// database (--database-url) or those in the input file, and never another
// model's or metric's series. A 16-point series with a 5% drop is found
// with the pool and not on its own noise.
func TestRegressDetectPooledCLI(t *testing.T) {
	t.Parallel()
	dbURL := testenv.MigratedPostgresURL(t)
	st, err := store.Open(t.Context(), dbURL, store.Config{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	m, err := monitor.New(monitor.Config{Store: st, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}

	// Six siblings of the scored series (other configs, suites and
	// lineages of decode on phone-x) at a CV of 2.24%, recorded by the
	// coordinator's monitor, beside another model's and another metric's
	// noisier series; the same values go to a CSV file too.
	rng := rand.New(rand.NewPCG(5, 5))
	const cv = 0.0224
	base := regress.SeriesKey{Suite: "nightly", Config: "c0", Metric: regress.MetricDecodeTPS, DeviceModel: "phone-x", OSMajor: "android 14", Lineage: "main"}
	var obs []monitor.Observation
	var sibCSV strings.Builder
	add := func(k regress.SeriesKey, level, cv float64) {
		for i := range 30 {
			v := level * (1 + cv*rng.NormFloat64())
			obs = append(obs, monitor.Observation{Key: k, Seq: int64(i + 1), RunKey: fmt.Sprintf("r%d", i), Build: fmt.Sprintf("b%d", i+1), Value: v})
			fmt.Fprintf(&sibCSV, "%s,%d,%g\n", k, i+1, v)
		}
	}
	for i, c := range []string{"c1", "c2", "c3", "c4", "c5", "c6"} {
		k := base
		k.Config = c
		if i%2 == 1 {
			k.Suite, k.Lineage = "weekly", "release-3"
		}
		add(k, 10+float64(i)*5, cv)
	}
	other := base
	other.Config, other.DeviceModel = "c1", "phone-y"
	add(other, 20, 10*cv)
	prefill := base
	prefill.Config, prefill.Metric = "c1", regress.MetricPrefillTPS
	add(prefill, 50, 10*cv)
	// The scored series' own older points are stored too: the file's
	// version of a series replaces the database's, it is not its sibling.
	obs = append(obs, monitor.Observation{Key: base, Seq: 1, RunKey: "old", Value: 1000})
	if _, err := m.Observe(t.Context(), obs); err != nil {
		t.Fatal(err)
	}

	// The scored series: 10 results at 100, then 6 at 95 (decode 5%
	// slower).
	vals := []float64{100, 103, 97, 102, 98, 101, 99, 103, 97, 100, 95.5, 92.5, 97.5, 94, 97, 94.5}
	var scored strings.Builder
	scored.WriteString("series,seq,value\n")
	for i, v := range vals {
		fmt.Fprintf(&scored, "%s,%d,%g\n", base, i+1, v)
	}
	dir := t.TempDir()
	alone := filepath.Join(dir, "alone.csv")
	withSibs := filepath.Join(dir, "siblings.csv")
	if err := os.WriteFile(alone, []byte(scored.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(withSibs, []byte(scored.String()+sibCSV.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	type report struct {
		ChangePoints []struct {
			Series string `json:"series"`
			Seq    int64  `json:"seq"`
		} `json:"change_points"`
		Pooled []regress.PooledSeries `json:"pooled_noise"`
	}
	detect := func(args ...string) (int, report) {
		t.Helper()
		code, out, errOut := run(t, append([]string{"regress", "detect"}, args...)...)
		var rep report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%v: exit %d, output %q, stderr %q: %v", args, code, out, errOut, err)
		}
		return code, rep
	}
	scoredAt := func(rep report) int64 {
		for _, cp := range rep.ChangePoints {
			if cp.Series == base.String() {
				return cp.Seq
			}
		}
		return 0
	}
	for _, tc := range []struct {
		name           string
		args           []string
		at             int64
		siblings, from int
	}{
		{"own noise", []string{"--input", alone}, 0, 0, 0},
		{"siblings in the database", []string{"--input", alone, "--database-url", dbURL}, 11, 6, 6},
		{"siblings in the file", []string{"--input", withSibs}, 11, 6, 0},
		{"file's siblings first", []string{"--input", withSibs, "--database-url", dbURL}, 11, 6, 0},
		{"pooling off", []string{"--input", withSibs, "--database-url", dbURL, "--pool-siblings", "-1"}, 0, 0, 0},
		{"two siblings at most", []string{"--input", alone, "--database-url", dbURL, "--pool-siblings", "2"}, 11, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, rep := detect(tc.args...)
			if got := scoredAt(rep); got != tc.at || (code == 3) != (tc.at != 0) {
				t.Errorf("scored series changed at seq %d (exit %d), want %d (exit 3 when found)", got, code, tc.at)
			}
			var p *regress.PooledSeries
			for i := range rep.Pooled {
				if rep.Pooled[i].Series == base.String() {
					p = &rep.Pooled[i]
				}
			}
			switch {
			case tc.siblings == 0 && p != nil:
				t.Errorf("pooled %+v, want none", *p)
			case tc.siblings > 0 && (p == nil || p.Siblings != tc.siblings || p.Stored != tc.from || p.CV < 0.8*cv || p.CV > 1.2*cv):
				t.Errorf("pooled %+v, want %d siblings (%d stored) at CV about %g", p, tc.siblings, tc.from, cv)
			}
		})
	}
	if code, _, errOut := run(t, "regress", "detect", "--input", alone, "--database-url", "postgres://127.0.0.1:1/none?connect_timeout=2"); code != 1 || !strings.Contains(errOut, "regress") {
		t.Errorf("unreachable database: exit %d, %q", code, errOut)
	}
}

package monitor

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/regress"
)

// TestSiblingNoisePooled: the monitor pools the noise of a series'
// siblings — the same metric on the same device model, OS and emulation,
// whatever the suite, config or lineage — and not that of other models or
// metrics; with it, a short series' 5.5% step alerts where the series'
// own few points do not (the same values on a model without siblings
// raise nothing).
func TestSiblingNoisePooled(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	m := newMonitor(t, st, Config{})
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(5, 5))
	const cv = 0.0224 // a relative variance of 5·10⁻⁴
	var obs []Observation
	add := func(key regress.SeriesKey, n int, level, cv float64) {
		for i := range n {
			obs = append(obs, Observation{Key: key, Seq: int64(i + 1), RunKey: fmt.Sprintf("r%d", i), Build: fmt.Sprintf("b%d", i+1),
				Value: level * (1 + cv*rng.NormFloat64())})
		}
	}
	sib := regress.SeriesKey{Suite: "nightly", Metric: regress.MetricDecodeTPS, DeviceModel: "phone-x", OSMajor: "android 14", Lineage: "main"}
	for i, c := range []string{"c1", "c2", "c3", "c4", "c5", "c6"} {
		k := sib
		k.Config = c
		if i%2 == 1 {
			k.Suite, k.Lineage = "weekly", "release-3" // other suites and lineages are siblings too
		}
		add(k, 30, 10+float64(i)*5, cv)
	}
	other := sib
	other.Config, other.DeviceModel = "c1", "phone-y" // another model: 10x the noise, not a sibling
	add(other, 30, 20, 10*cv)
	prefill := sib
	prefill.Config, prefill.Metric = "c1", regress.MetricPrefillTPS // another metric: not a sibling
	add(prefill, 30, 50, 10*cv)
	if _, err := m.Observe(ctx, obs); err != nil {
		t.Fatal(err)
	}

	// The short series, one night at a time: 10 results at 100, then 6
	// at 105.5.
	vals := []float64{100, 103, 97, 102, 98, 101, 99, 103, 97, 100, 105, 108, 103, 107, 104, 106}
	alerts := map[string]int64{}
	for _, model := range []string{"phone-x", "phone-lonely"} {
		k := sib
		k.Config, k.DeviceModel = "c0", model
		for i, v := range vals {
			gs, err := m.Observe(ctx, []Observation{{Key: k, Seq: int64(i + 1), RunKey: "r", Build: fmt.Sprintf("b%d", i+1), Value: v}})
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range gs {
				for _, a := range g.Alerts {
					if a.Series.DeviceModel == model {
						alerts[model] = a.Seq
					}
				}
			}
		}
	}
	if alerts["phone-x"] != 11 || alerts["phone-lonely"] != 0 {
		t.Errorf("alerts at seq %v: want phone-x at 11 (pooled noise), none on phone-lonely (own noise)", alerts)
	}

	ss, err := st.ListRegressSeries(ctx, "nightly", "main", "c0")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if s.DeviceModel != "phone-x" || s.Metric != regress.MetricDecodeTPS {
			continue
		}
		prior, err := m.siblingNoise(ctx, s.ID, true)
		if err != nil {
			t.Fatal(err)
		}
		// Six siblings of 30 points: 174 degrees of freedom (fewer for a
		// bad run set aside), at about cv².
		if prior.DF < 165 || prior.DF > 174 || prior.RelVar < 0.75*cv*cv || prior.RelVar > 1.25*cv*cv {
			t.Errorf("pooled noise %+v, want about %g with 174 df", prior, cv*cv)
		}
		return
	}
	t.Fatal("series c0 on phone-x not stored")
}

package regress

import (
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	key := func(model, os string) SeriesKey {
		return SeriesKey{Suite: "s", Config: "c", Metric: MetricDecodeTPS, DeviceModel: model, OSMajor: os, Lineage: "main"}
	}
	mid, low, ip, ip2 := key("phone-mid", "android 14"), key("phone-low", "android 13"), key("iphone-15", "ios 18"), key("iphone-12", "ios 17")
	tests := []struct {
		name       string
		affected   []SeriesKey
		observed   []SeriesKey
		want       Scope
		wantDetail string
	}{
		{"one model of many", []SeriesKey{mid}, []SeriesKey{mid, low, ip}, ScopeDevice, "phone-mid"},
		{"only model observed", []SeriesKey{mid}, nil, ScopeDevice, "phone-mid"},
		{"all android, ios clean", []SeriesKey{mid, low}, []SeriesKey{mid, low, ip}, ScopePlatform, "android"},
		{"all ios, android clean", []SeriesKey{ip, ip2}, []SeriesKey{mid, ip, ip2}, ScopePlatform, "ios"},
		{"across platforms", []SeriesKey{mid, ip}, []SeriesKey{mid, low, ip}, ScopeGlobal, "iphone-15, phone-mid"},
		{"two android, nothing else observed", []SeriesKey{mid, low}, []SeriesKey{mid, low}, ScopeGlobal, "phone-low, phone-mid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, d := Classify(tc.affected, tc.observed)
			if s != tc.want || d != tc.wantDetail {
				t.Fatalf("Classify = %s %q, want %s %q", s, d, tc.want, tc.wantDetail)
			}
		})
	}
}

func TestAttribute(t *testing.T) {
	t.Parallel()
	// decode drops 9% at seq 125; recall drops in layers 10–17 only;
	// stall fraction rises; hit rate does not move.
	decode := series(1, 0.01, steps(100, 25, 91, 4)...)
	cps, err := Detect(decode, true, Config{})
	if err != nil || len(cps) != 1 {
		t.Fatalf("Detect = %+v, %v", cps, err)
	}
	sib := map[string][]Point{
		MetricDecodeTPS:     decode,
		MetricStallFraction: series(2, 0.03, steps(0.12, 25, 0.31, 4)...),
		MetricHitRate:       series(3, 0.01, steps(0.7, 29)...),
	}
	for l := 0; l < 24; l++ {
		lv := steps(0.82, 29)
		if l >= 10 && l <= 17 {
			lv = steps(0.82, 25, 0.64, 4)
		}
		sib["predictor_recall.l"+itoaInt(l)] = series(uint64(100+l), 0.01, lv...)
	}
	attrs := Attribute(cps[0], sib)
	if len(attrs) != 2 {
		t.Fatalf("attributions %+v, want stall fraction and predictor recall", attrs)
	}
	got := Summarize(Headline(MetricDecodeTPS, cps[0], "phone-mid"), attrs)
	for _, want := range []string{"decode −", "% on phone-mid", "predictor recall 0.82→0.64 in layers 10–17", "stall fraction 0.12→0.31"} {
		if !strings.Contains(got, want) {
			t.Errorf("summary %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "hit rate") {
		t.Errorf("summary %q names hit rate, which did not move", got)
	}
	if layerRanges([]int{3, 10, 11, 12, 5}) != "3, 5, 10–12" {
		t.Errorf("layerRanges = %q", layerRanges([]int{3, 10, 11, 12, 5}))
	}
}

func itoaInt(i int) string { return strings.TrimSpace(jsonNum(float64(i))) }

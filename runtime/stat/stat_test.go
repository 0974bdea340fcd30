package stat

import (
	"math"
	"testing"
)

func TestSummarize(t *testing.T) {
	t.Parallel()
	s := Summarize([]float64{4, 1, 3, 2})
	want := Summary{N: 4, Mean: 2.5, Median: 2.5, Stddev: math.Sqrt(5.0 / 3), Min: 1, Max: 4}
	want.CV = want.Stddev / want.Mean
	if s != want {
		t.Fatalf("Summarize = %+v, want %+v", s, want)
	}
	if (Summarize(nil) != Summary{}) {
		t.Fatal("Summarize(nil) is not the zero Summary")
	}
	if s := Summarize([]float64{7}); s.Stddev != 0 || s.CV != 0 || s.Median != 7 || s.N != 1 {
		t.Fatalf("one value: %+v", s)
	}
	if s := Summarize([]float64{-1, 1}); s.CV != 0 || s.Mean != 0 {
		t.Fatalf("zero mean: %+v", s)
	}
	xs := []float64{3, 1, 2}
	Summarize(xs)
	Median(xs)
	if xs[0] != 3 || xs[1] != 1 {
		t.Fatal("input was modified")
	}
}

func TestOutliers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		xs   []float64
		want []bool
	}{
		{"one slow repetition", []float64{100, 101, 99, 100.5, 60}, []bool{false, false, false, false, true}},
		{"both tails", []float64{10, 10.2, 9.9, 10.1, 9.8, 20, 2}, []bool{false, false, false, false, false, true, true}},
		{"normal spread", []float64{100, 104, 96, 102, 98}, []bool{false, false, false, false, false}},
		{"too few", []float64{1, 100}, []bool{false, false}},
		{"no spread", []float64{5, 5, 5, 9}, []bool{false, false, false, false}},
	} {
		got, n := Outliers(tc.xs, 0)
		count := 0
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: Outliers(%v) = %v, want %v", tc.name, tc.xs, got, tc.want)
				break
			}
			if got[i] {
				count++
			}
		}
		if n != count {
			t.Errorf("%s: count %d, flags %d", tc.name, n, count)
		}
	}
	// The rule's width: median 10, MAD 1 → limit 3·1.4826 = 4.45.
	xs := []float64{9, 10, 11, 10, 14.4, 5.6}
	if _, n := Outliers(xs, 3); n != 0 {
		t.Errorf("values inside 4.45 of the median dropped: %d", n)
	}
	xs[4] = 14.5
	if got, n := Outliers(xs, 3); n != 1 || !got[4] {
		t.Errorf("14.5 (beyond 4.45 of the median) kept: %v", got)
	}
}

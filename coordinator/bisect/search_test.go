package bisect

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/abtest"
	"github.com/lesfarm/lesfarm/jobs"
)

func builds(n int) []Build {
	out := make([]Build, n)
	for i := range out {
		out[i] = Build{ID: string(rune('a' + i)), GitSHA: strings.Repeat(string(rune('0'+i%10)), 40), Position: int64(i + 1)}
	}
	return out
}

// shift is a comparison whose change is c with interval [lo, hi].
func shift(v abtest.Verdict, c, lo, hi float64) abtest.Comparison {
	return abtest.Comparison{Verdict: v, NA: 6, NB: 6, P: 0.5, Shift: abtest.Shift{Change: c, Low: lo, High: hi, Level: 0.95}}
}

// TestSearchNarrows: the verify step, then midpoints against the newest
// good build, skipped builds left out, a recheck after an undecided step,
// and the culprit named with both shas; the state survives JSON.
func TestSearchNarrows(t *testing.T) {
	s, err := NewSearch(builds(9), -0.1, time.Hour, abtest.Plan{})
	if err != nil {
		t.Fatal(err)
	}
	p, ok := s.Next()
	if !ok || p != (Pair{A: 0, B: 8, Kind: KindVerify}) {
		t.Fatalf("first pair %+v", p)
	}
	bad := shift(abtest.Different, -0.1, -0.12, -0.08)
	good := shift(abtest.Same, 0.001, -0.01, 0.01)
	s.Record(p, bad, s.Judge(p, bad))
	if !s.Verified || s.Effect != -0.1 {
		t.Fatalf("not verified: %+v", s)
	}
	if o := s.Options(Pair{Kind: KindBisect}); o.MinEffect != 0.05 {
		t.Fatalf("min effect %v, want half the change", o.MinEffect)
	}
	s.Skip(4, "deleted mid-bisection")
	p, _ = s.Next()
	if p.A != 0 || p.B != 3 || p.Kind != KindBisect { // candidates 1,2,3,5,6,7 → 3 splits 7 possibilities 3|4
		t.Fatalf("mid %+v", p)
	}
	s.Record(p, good, s.Judge(p, good)) // 3 good
	p, _ = s.Next()
	if p.A != 3 || p.B != 6 {
		t.Fatalf("mid %+v", p)
	}
	// Undecided: recheck 6 against the first bad build.
	unk := shift(abtest.Unknown, -0.05, -0.09, -0.01)
	if j := s.Judge(p, unk); j != Undecided {
		t.Fatalf("straddling interval judged %s", j)
	}
	s.Record(p, unk, Undecided)
	p, _ = s.Next()
	if p != (Pair{A: 6, B: 8, Kind: KindRecheck}) {
		t.Fatalf("recheck %+v", p)
	}
	same := shift(abtest.Unknown, -0.002, -0.03, 0.02) // 8 vs 6: nearer 0 than −5%
	if j := s.Judge(p, same); j != Matches {
		t.Fatalf("recheck judged %s", j)
	}
	s.Record(p, same, Matches) // 6 bad
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Search
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	p, _ = back.Next()
	if p.A != 3 || p.B != 5 {
		t.Fatalf("after recheck %+v", p)
	}
	back.Record(p, bad, back.Judge(p, bad)) // 5 bad: 4 skipped between 3 and 5
	if back.State != StateCulprit || back.Lo != 3 || back.Hi != 5 || !strings.Contains(back.Reason, "first bad build f (5555") ||
		!strings.Contains(back.Reason, "e (deleted mid-bisection)") {
		t.Fatalf("end %s %q lo %d hi %d", back.State, back.Reason, back.Lo, back.Hi)
	}
	if _, ok := back.Next(); ok {
		t.Fatal("a pair after the end")
	}
}

func TestSearchEnds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		c     abtest.Comparison
		state string
		want  string
	}{
		{"same", shift(abtest.Same, 0, -0.01, 0.01), StateNotReproduced, "does not differ"},
		{"within half the alert", shift(abtest.Unknown, -0.01, -0.04, 0.02), StateNotReproduced, "does not differ"},
		{"other way", shift(abtest.Different, 0.08, 0.06, 0.1), StateNotReproduced, "changed the other way"},
		{"noise", shift(abtest.Unknown, -0.05, -0.09, 0.0), StateAmbiguous, "could not be told apart"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := NewSearch(builds(4), -0.1, time.Hour, abtest.Plan{})
			p, _ := s.Next()
			s.Record(p, tc.c, s.Judge(p, tc.c))
			if s.State != tc.state || !strings.Contains(s.Reason, tc.want) {
				t.Fatalf("%s %q", s.State, s.Reason)
			}
		})
	}
	s, _ := NewSearch(builds(4), -0.1, time.Hour, abtest.Plan{})
	s.Skip(0, "deleted mid-bisection")
	if s.State != StateFailed || !strings.Contains(s.Reason, "build a: deleted") {
		t.Fatalf("endpoint skipped: %s %q", s.State, s.Reason)
	}
	// Budget: 20 runs took 30 min; 12 more (45 min... 18 min) fit in an
	// hour, 40 more do not.
	s, _ = NewSearch(builds(4), -0.1, time.Hour, abtest.Plan{})
	if !s.Affords(12, 30*time.Minute, 20) || s.Affords(40, 30*time.Minute, 20) || s.More(6, Undecided, 58*time.Minute, 20) != 0 {
		t.Fatal("budget arithmetic")
	}
	if _, err := NewSearch(builds(1), -0.1, 0, abtest.Plan{}); err == nil {
		t.Fatal("a one-build range accepted")
	}
}

func TestRestrict(t *testing.T) {
	spec, err := jobs.Builtin("les-ladder")
	if err != nil {
		t.Fatal(err)
	}
	keys := spec.Expand()
	if len(keys) < 3 {
		t.Fatalf("les-ladder has %d configs", len(keys))
	}
	want := []string{keys[len(keys)-1].Key, keys[0].Key}
	got, missing := Restrict(spec, append(want, "no/such"))
	if got == nil || len(missing) != 1 {
		t.Fatalf("restrict: %v %v", got, missing)
	}
	have := map[string]bool{}
	for _, c := range got.Expand() {
		have[c.Key] = true
	}
	for _, k := range want {
		if !have[k] {
			t.Errorf("config %s lost: %v", k, have)
		}
	}
	if len(have) >= len(keys) {
		t.Errorf("restricted matrix has %d configs, the suite %d", len(have), len(keys))
	}
	if got, _ := Restrict(spec, []string{"no/such"}); got != nil {
		t.Error("an unknown first config accepted")
	}
}

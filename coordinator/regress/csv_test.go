package regress

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestParseCSV(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		series  int
		points  int
		wantErr string
	}{
		{"header", "series,seq,value\na,1,10\na,2,11\nb,1,5\n", 2, 3, ""},
		{"no header", "a,1,10\na,2,11\n", 1, 2, ""},
		{"reordered header with reps", "value,n,series,stddev,seq,extra\n10,5,a,0.5,1,x\n11,,a,,2,y\n", 1, 2, ""},
		{"comments and blanks", "# exported\nseries,seq,value\n\na,1,10\n", 1, 1, ""},
		{"bom", "\ufeffseries,seq,value\na,1,10\n", 1, 1, ""},
		{"empty", "", 0, 0, "no data rows"},
		{"header only", "series,seq,value\n", 0, 0, "no data rows"},
		{"missing column", "series,value\na,1\n", 0, 0, `lacks column "seq"`},
		{"bad seq", "series,seq,value\na,x1,10\n", 0, 0, "line 2: seq"},
		{"time seqs", "series,seq,value\na,2026-11-01,10\na,2026-11-02T03:04:05Z,11\n", 1, 2, ""},
		{"bad value", "series,seq,value\na,1,ten\n", 0, 0, "line 2: value"},
		{"nan value", "series,seq,value\na,1,NaN\n", 0, 0, "not finite"},
		{"negative stddev", "series,seq,value,stddev\na,1,1,-2\n", 0, 0, "stddev"},
		{"bad n", "series,seq,value,stddev,n\na,1,1,2,1.5\n", 0, 0, "line 2: n"},
		{"short row", "series,seq,value\na,1\n", 0, 0, "missing value"},
		{"empty series", "series,seq,value\n,1,2\n", 0, 0, "missing series"},
		{"duplicate column", "series,seq,value,value\na,1,2,3\n", 0, 0, "duplicate column"},
		{"bad quote", "series,seq,value\n\"a,1,2\n", 0, 0, "csv line"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseCSV(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Fatalf("error spans lines: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, s := range got {
				n += len(s.Points)
			}
			if len(got) != tc.series || n != tc.points {
				t.Fatalf("got %d series / %d points, want %d / %d", len(got), n, tc.series, tc.points)
			}
		})
	}
	got, _ := ParseCSV(strings.NewReader("value,n,series,stddev,seq\n10,5,a,0.5,1\n"))
	if p := got[0].Points[0]; p != (Point{Seq: 1, Value: 10, Stddev: 0.5, N: 5}) {
		t.Fatalf("point = %+v", p)
	}
}

func TestDetectAllJSONShape(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("series,seq,value\n")
	for _, p := range series(50, 0.01, steps(100, 20, 90, 5)...) {
		b.WriteString("dec," + itoa(p.Seq) + "," + ftoa(p.Value) + "\n")
	}
	ss, err := ParseCSV(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := DetectAll(ss, true, Config{}, Pool{})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(rep)
	var out struct {
		ChangePoints []map[string]any `json:"change_points"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out.ChangePoints) != 1 {
		t.Fatalf("json %s: %v", raw, err)
	}
	for _, k := range []string{"series", "seq", "direction", "relative_change", "p_value", "before_mean", "after_mean", "last_good_seq", "first_bad_seq"} {
		if _, ok := out.ChangePoints[0][k]; !ok {
			t.Errorf("json lacks %q: %s", k, raw)
		}
	}
	if out.ChangePoints[0]["direction"] != "regression" || out.ChangePoints[0]["series"] != "dec" {
		t.Errorf("json %s", raw)
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil || !strings.Contains(md.String(), "| dec | 120 | after 119, by 120 | regression | -") {
		t.Fatalf("markdown:\n%s", md.String())
	}
	empty, _ := json.Marshal(&Report{ChangePoints: []SeriesChangePoint{}})
	if string(empty) != `{"change_points":[]}` {
		t.Fatalf("empty report = %s", empty)
	}
}

func itoa(i int64) string {
	return strings.TrimSpace(strings.Replace(jsonNum(float64(i)), ".0", "", 1))
}
func ftoa(f float64) string { return jsonNum(f) }
func jsonNum(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}

func FuzzParseCSV(f *testing.F) {
	for _, s := range []string{
		"series,seq,value\na,1,10\na,2,11\n",
		"series,seq,value,stddev,n\na,1,10,0.5,5\nb,2,1e3,,\n",
		"a,1,10\n",
		"value,series,seq\n1,x,9223372036854775807\n",
		"\"a\"\"b\",1,2\n",
		"# c\n\n",
		"series,seq,value\na,1,Inf\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ss, err := ParseCSV(bytes.NewReader(data))
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		// Whatever parses must be analysable without panics.
		if _, err := DetectAll(ss, true, Config{}, Pool{}); err != nil {
			t.Fatalf("DetectAll: %v", err)
		}
	})
}

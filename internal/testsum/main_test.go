package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name       string
		in         string
		wantFailed bool
		want       []string
		notWant    []string
	}{
		{
			name: "pass and skip",
			in: `{"Action":"run","Package":"a","Test":"TestA"}
{"Action":"output","Package":"a","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"pass","Package":"a","Test":"TestA"}
{"Action":"output","Package":"a","Test":"TestB","Output":"    b_test.go:1: SKIPPING: fixture\n"}
{"Action":"skip","Package":"a","Test":"TestB"}
{"Action":"output","Package":"a","Output":"PASS\n"}
{"Action":"output","Package":"a","Output":"ok  \ta\t0.1s\n"}
{"Action":"pass","Package":"a"}
`,
			want:    []string{"ok  \ta\t0.1s", "testsum: 1 tests skipped in a (1)"},
			notWant: []string{"=== RUN", "SKIPPING"},
		},
		{
			name: "failure shows its output",
			in: `{"Action":"output","Package":"b","Test":"TestF","Output":"    f_test.go:9: boom\n"}
{"Action":"fail","Package":"b","Test":"TestF"}
{"Action":"output","Package":"b","Output":"FAIL\tb\t0.2s\n"}
{"Action":"fail","Package":"b"}
`,
			wantFailed: true,
			want:       []string{"boom", "FAIL\tb", "testsum: 0 tests skipped"},
		},
		{
			name: "build error passes through",
			in:   "# pkg/c\nc.go:1: syntax error\n",
			want: []string{"syntax error"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			failed, err := summarize(strings.NewReader(tc.in), &out)
			if err != nil {
				t.Fatal(err)
			}
			if failed != tc.wantFailed {
				t.Errorf("failed = %v, want %v", failed, tc.wantFailed)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(out.String(), w) {
					t.Errorf("output has %q:\n%s", w, out.String())
				}
			}
		})
	}
}

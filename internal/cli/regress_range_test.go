package cli

import (
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/api"
)

func TestAlertRange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		a    api.Alert
		want string
	}{
		{"no range", api.Alert{Seq: 5}, ""},
		{"builds", api.Alert{Seq: 5, LastGoodSeq: 4, FirstBadSeq: 6, LastGoodBuild: "ci-4", FirstBadBuild: "ci-6"}, "; changed after ci-4, by ci-6"},
		{"seqs", api.Alert{Seq: 5, LastGoodSeq: 4, FirstBadSeq: 5}, "; changed after seq 4, by seq 5"},
		{"from the first point", api.Alert{Seq: 2, FirstBadSeq: 3, FirstBadBuild: "ci-3"}, "; changed by ci-3"},
	} {
		if got := alertRange(&tc.a); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

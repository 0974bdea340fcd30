package scheduler

import (
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/fit"
)

func TestBuildMatch(t *testing.T) {
	t.Parallel()
	execAmd := &Device{ID: "a", ExecPlatform: "linux/amd64", EmbeddedBuild: "embedded-aaaaaaaaaaaa"}
	phoneApp := &Device{ID: "p", EmbeddedBuild: "embedded-bbbbbbbbbbbb"}
	arm := &Device{ID: "r", ExecPlatform: "linux/arm64", EmbeddedBuild: "embedded-cccccccccccc"}
	exe := &BuildNeeds{Platforms: []string{"linux/amd64", "android/arm64"}}
	emb := &BuildNeeds{Embedded: true}
	for _, tc := range []struct {
		name  string
		build string
		needs *BuildNeeds
		d     *Device
		want  bool
	}{
		{"no build runs anywhere", "", nil, phoneApp, true},
		{"unregistered label runs anywhere", "label", nil, execAmd, true},
		{"executable on its platform", "ci-1", exe, execAmd, true},
		{"executable on another platform", "ci-1", exe, arm, false},
		{"executable on an agent that runs none", "ci-1", exe, phoneApp, false},
		{"own embedded build", "embedded-bbbbbbbbbbbb", emb, phoneApp, true},
		{"another agent's embedded build", "embedded-bbbbbbbbbbbb", emb, execAmd, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := fit.BuildMatch(tc.build, tc.needs, tc.d)
			if ok != tc.want || (!ok && why == "") {
				t.Fatalf("BuildMatch = %v %q, want %v with a reason when false", ok, why, tc.want)
			}
			c := Candidate{RunID: 1, Build: tc.build, Needs: tc.needs}
			if got := fits(tc.d, &c); got != tc.want {
				t.Fatalf("fits = %v, want %v", got, tc.want)
			}
		})
	}
}

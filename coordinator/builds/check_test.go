package builds_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/builds"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	const rev = "9813d69a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"
	const rev2 = "0000d69a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"
	exe := func(platform, infoPlatform, revision string, modified bool) builds.Executable {
		return builds.Executable{Platform: platform, SHA256: strings.Repeat("a", 64),
			Info: &builds.Info{Platform: infoPlatform, Revision: revision, Modified: modified, Module: builds.ModulePath, MainPackage: builds.MainPackage}}
	}
	tests := []struct {
		name    string
		gitSHA  string
		exes    []builds.Executable
		want    builds.Summary
		wantErr string
	}{
		{"one, unstamped", "", []builds.Executable{exe("linux/amd64", "linux/amd64", "", false)}, builds.Summary{}, ""},
		{"git sha without a stamp is recorded", "9813d69", []builds.Executable{exe("linux/amd64", "linux/amd64", "", false)}, builds.Summary{GitSHA: "9813d69"}, ""},
		{"short sha extended by the revision", "9813d69", []builds.Executable{exe("linux/amd64", "linux/amd64", rev, false), exe("android/arm64", "android/arm64", rev, false)},
			builds.Summary{GitSHA: rev, Revision: rev}, ""},
		{"full sha", rev, []builds.Executable{exe("linux/amd64", "linux/amd64", rev, false)}, builds.Summary{GitSHA: rev, Revision: rev}, ""},
		{"dirty flagged", "", []builds.Executable{exe("linux/amd64", "linux/amd64", rev, false), exe("linux/arm64", "linux/arm64", rev, true)},
			builds.Summary{GitSHA: rev, Revision: rev, Dirty: true}, ""},
		{"unstamped beside stamped", "", []builds.Executable{exe("linux/amd64", "linux/amd64", "", false), exe("linux/arm64", "linux/arm64", rev, false)},
			builds.Summary{GitSHA: rev, Revision: rev}, ""},
		{"no executables", "", nil, builds.Summary{}, "at least one executable"},
		{"git sha contradicts", "abcdef1", []builds.Executable{exe("linux/amd64", "linux/amd64", rev, false)}, builds.Summary{}, "git sha abcdef1 contradicts the executables' vcs.revision " + rev},
		{"git sha not hex", "main", []builds.Executable{exe("linux/amd64", "linux/amd64", "", false)}, builds.Summary{}, `git sha "main" is not 4 to 64 lowercase hex digits`},
		{"git sha too short", "98", []builds.Executable{exe("linux/amd64", "linux/amd64", rev, false)}, builds.Summary{}, "is not 4 to 64"},
		{"wrong platform", "", []builds.Executable{exe("linux/arm64", "linux/amd64", "", false)}, builds.Summary{}, "executable for linux/arm64 is a linux/amd64 binary"},
		{"bad platform", "", []builds.Executable{exe("linux", "linux/amd64", "", false)}, builds.Summary{}, `platform "linux" is not GOOS/GOARCH`},
		{"duplicate platform", "", []builds.Executable{exe("linux/amd64", "linux/amd64", "", false), exe("linux/amd64", "linux/amd64", "", false)}, builds.Summary{}, "two executables for platform linux/amd64"},
		{"mixed revisions", "", []builds.Executable{exe("linux/amd64", "linux/amd64", rev, false), exe("linux/arm64", "linux/arm64", rev2, false)},
			builds.Summary{}, "executables built from different revisions: linux/amd64 at 9813d69a0b1c, linux/arm64 at 0000d69a0b1c"},
		{"not inspected", "", []builds.Executable{{Platform: "linux/amd64"}}, builds.Summary{}, "was not inspected"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := builds.Check(tc.gitSHA, tc.exes)
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, builds.ErrRefused) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("builds.Check = %+v, %v; want refusal %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || *got != tc.want {
				t.Fatalf("builds.Check = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestNearest(t *testing.T) {
	t.Parallel()
	newestFirst := []string{"ci-4812", "ci-4811", "ci-4790", "rel-1.3", "CI-481X", "nightly-20261201"}
	tests := []struct {
		id   string
		n    int
		want []string
	}{
		{"ci-481", 2, []string{"ci-4812", "ci-4811"}},
		{"ci-481", 5, []string{"ci-4812", "ci-4811", "CI-481X"}}, // ci-4790 is 3 edits away
		{"ci-4813", 3, []string{"ci-4812", "ci-4811", "CI-481X"}},
		{"rel-13", 3, []string{"rel-1.3"}},
		{"20261201", 3, []string{"nightly-20261201"}},
		{"zzz", 3, nil},
		{"ci-4812", 3, []string{"ci-4811", "CI-481X"}}, // the id itself is not its own neighbour
		{"", 3, nil},
		{"ci-481", 0, nil},
	}
	for _, tc := range tests {
		if got := builds.Nearest(tc.id, newestFirst, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("builds.Nearest(%q, %d) = %q; want %q", tc.id, tc.n, got, tc.want)
		}
	}
}

func TestValidID(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]bool{
		"ci-4812": true, "rel-1.3_rc2": true, "A": true, strings.Repeat("x", builds.MaxIDLen): true,
		"": false, "-x": false, ".x": false, "a/b": false, "a b": false, strings.Repeat("x", builds.MaxIDLen+1): false, "ci-4812\n": false,
	} {
		if builds.ValidID(id) != want {
			t.Errorf("builds.ValidID(%q) = %v", id, !want)
		}
	}
}

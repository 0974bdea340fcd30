package builds

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	const rev = "9813d69a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"
	const rev2 = "0000d69a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"
	exe := func(platform, infoPlatform, revision string, modified bool) Executable {
		return Executable{Platform: platform, SHA256: strings.Repeat("a", 64),
			Info: &Info{Platform: infoPlatform, Revision: revision, Modified: modified, Module: ModulePath, MainPackage: MainPackage}}
	}
	tests := []struct {
		name    string
		gitSHA  string
		exes    []Executable
		want    Summary
		wantErr string
	}{
		{"one, unstamped", "", []Executable{exe("linux/amd64", "linux/amd64", "", false)}, Summary{}, ""},
		{"git sha without a stamp is recorded", "9813d69", []Executable{exe("linux/amd64", "linux/amd64", "", false)}, Summary{GitSHA: "9813d69"}, ""},
		{"short sha extended by the revision", "9813d69", []Executable{exe("linux/amd64", "linux/amd64", rev, false), exe("android/arm64", "android/arm64", rev, false)},
			Summary{GitSHA: rev, Revision: rev}, ""},
		{"full sha", rev, []Executable{exe("linux/amd64", "linux/amd64", rev, false)}, Summary{GitSHA: rev, Revision: rev}, ""},
		{"dirty flagged", "", []Executable{exe("linux/amd64", "linux/amd64", rev, false), exe("linux/arm64", "linux/arm64", rev, true)},
			Summary{GitSHA: rev, Revision: rev, Dirty: true}, ""},
		{"unstamped beside stamped", "", []Executable{exe("linux/amd64", "linux/amd64", "", false), exe("linux/arm64", "linux/arm64", rev, false)},
			Summary{GitSHA: rev, Revision: rev}, ""},
		{"no executables", "", nil, Summary{}, "at least one executable"},
		{"git sha contradicts", "abcdef1", []Executable{exe("linux/amd64", "linux/amd64", rev, false)}, Summary{}, "git sha abcdef1 contradicts the executables' vcs.revision " + rev},
		{"git sha not hex", "main", []Executable{exe("linux/amd64", "linux/amd64", "", false)}, Summary{}, `git sha "main" is not 4 to 64 lowercase hex digits`},
		{"git sha too short", "98", []Executable{exe("linux/amd64", "linux/amd64", rev, false)}, Summary{}, "is not 4 to 64"},
		{"wrong platform", "", []Executable{exe("linux/arm64", "linux/amd64", "", false)}, Summary{}, "executable for linux/arm64 is a linux/amd64 binary"},
		{"bad platform", "", []Executable{exe("linux", "linux/amd64", "", false)}, Summary{}, `platform "linux" is not GOOS/GOARCH`},
		{"duplicate platform", "", []Executable{exe("linux/amd64", "linux/amd64", "", false), exe("linux/amd64", "linux/amd64", "", false)}, Summary{}, "two executables for platform linux/amd64"},
		{"mixed revisions", "", []Executable{exe("linux/amd64", "linux/amd64", rev, false), exe("linux/arm64", "linux/arm64", rev2, false)},
			Summary{}, "executables built from different revisions: linux/amd64 at 9813d69a0b1c, linux/arm64 at 0000d69a0b1c"},
		{"not inspected", "", []Executable{{Platform: "linux/amd64"}}, Summary{}, "was not inspected"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Check(tc.gitSHA, tc.exes)
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Check = %+v, %v; want refusal %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || *got != tc.want {
				t.Fatalf("Check = %+v, %v; want %+v", got, err, tc.want)
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
		if got := Nearest(tc.id, newestFirst, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("Nearest(%q, %d) = %q; want %q", tc.id, tc.n, got, tc.want)
		}
	}
}

func TestValidID(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]bool{
		"ci-4812": true, "rel-1.3_rc2": true, "A": true, strings.Repeat("x", MaxIDLen): true,
		"": false, "-x": false, ".x": false, "a/b": false, "a b": false, strings.Repeat("x", MaxIDLen+1): false, "ci-4812\n": false,
	} {
		if ValidID(id) != want {
			t.Errorf("ValidID(%q) = %v", id, !want)
		}
	}
}

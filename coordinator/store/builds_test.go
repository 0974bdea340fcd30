package store_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

func fakeSHA(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// exe uploads (the row only) an artifact named name and returns it as an
// executable for platform.
func exe(t *testing.T, st *store.Store, platform, name string) store.Executable {
	t.Helper()
	sha := fakeSHA(name)
	if _, err := st.PutArtifact(context.Background(), sha, 1000, name); err != nil {
		t.Fatal(err)
	}
	return store.Executable{Platform: platform, SHA256: sha, Size: 1000, GoVersion: "go1.26.8", ModulePath: "github.com/lesfarm/lesfarm",
		MainPath: "github.com/lesfarm/lesfarm/cmd/lesfarm", Settings: map[string]string{"GOOS": strings.Split(platform, "/")[0]}}
}

func push(t *testing.T, st *store.Store, p *store.CreateBuildParams) *store.Build {
	t.Helper()
	b, created, err := st.CreateBuild(context.Background(), p)
	if err != nil || !created {
		t.Fatalf("CreateBuild(%s) = %v, %v", p.ID, created, err)
	}
	return b
}

func order(t *testing.T, st *store.Store, lineage string) []string {
	t.Helper()
	bs, err := st.ListBuilds(context.Background(), &store.ListBuildsParams{Lineage: lineage, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i, b := range bs {
		if want := int64(len(bs) - i); b.Position != want {
			t.Fatalf("%s at position %d, want %d", b.ID, b.Position, want)
		}
		ids = append(ids, b.ID)
	}
	slices.Reverse(ids)
	return ids
}

// TestCreateBuild: a push is stored whole with its executables pinned; a
// re-push of the same content is idempotent, and every other reuse of the
// id is refused in one line with nothing stored.
func TestCreateBuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	amd, arm := exe(t, st, "linux/amd64", "a1"), exe(t, st, "linux/arm64", "a2")
	arm.Revision, arm.Modified = "9813d69a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e", true
	b := push(t, st, &store.CreateBuildParams{ID: "ci-4812", GitSHA: "9813d69a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e", Dirty: true, PushedBy: "ci",
		Executables: []store.Executable{amd, arm}})
	if b.Lineage != "main" || b.Position != 1 || b.Kind != store.BuildKindExec || !b.Dirty || b.PushedBy != "ci" || len(b.Executables) != 2 ||
		b.Executables[1].Platform != "linux/arm64" || b.Executables[1].Revision != arm.Revision || !b.Executables[1].Modified ||
		b.Executables[0].Settings["GOOS"] != "linux" || b.Executables[0].Size != 1000 {
		t.Fatalf("build %+v", b)
	}
	for _, e := range []store.Executable{amd, arm} {
		if a, err := st.GetArtifact(ctx, e.SHA256); err != nil || !a.Pinned {
			t.Fatalf("artifact %s after push: %+v, %v; want pinned", e.Platform, a, err)
		}
		// Unpinning is refused while the build references it, so GC never sees it.
		if a, err := st.SetArtifactPinned(ctx, e.SHA256, false); err != nil || !a.Pinned {
			t.Fatalf("unpin %s: %+v, %v; want still pinned", e.Platform, a, err)
		}
	}
	if cands, err := st.ArtifactGCCandidates(ctx, time.Now().Add(time.Hour)); err != nil || len(cands) != 0 {
		t.Fatalf("gc candidates %v, %v", cands, err)
	}
	if err := st.DeleteArtifact(ctx, amd.SHA256); err == nil {
		t.Fatal("deleted a build's executable")
	}

	// The same content again, with a short git sha and in any order: the stored build.
	again, created, err := st.CreateBuild(ctx, &store.CreateBuildParams{ID: "ci-4812", GitSHA: "9813d69", Lineage: "main", After: "whatever",
		Executables: []store.Executable{arm, amd}})
	if err != nil || created || again.Position != 1 || again.PushedBy != "ci" {
		t.Fatalf("re-push = %+v, %v, %v; want the stored build, not created", again, created, err)
	}

	other := exe(t, st, "linux/amd64", "other")
	amdOnly := []store.Executable{amd}
	tests := []struct {
		name string
		p    store.CreateBuildParams
		want string
		is   error
	}{
		{"other executable", store.CreateBuildParams{ID: "ci-4812", Executables: []store.Executable{other, arm}}, "its linux/amd64 executable is " + amd.SHA256[:12] + ", not " + other.SHA256[:12], store.ErrConflict},
		{"missing platform", store.CreateBuildParams{ID: "ci-4812", Executables: amdOnly}, "it has executables for linux/amd64, linux/arm64", store.ErrConflict},
		{"extra platform", store.CreateBuildParams{ID: "ci-4812", Executables: []store.Executable{amd, arm, exe(t, st, "android/arm64", "a3")}}, "it has no android/arm64 executable", store.ErrConflict},
		{"other lineage", store.CreateBuildParams{ID: "ci-4812", Lineage: "release-3", Executables: []store.Executable{amd, arm}}, "lineage main, not release-3", store.ErrConflict},
		{"other git sha", store.CreateBuildParams{ID: "ci-4812", GitSHA: "abcdef0", Executables: []store.Executable{amd, arm}}, "git sha 9813d69a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e, not abcdef0", store.ErrConflict},
		{"embedded prefix", store.CreateBuildParams{ID: "embedded-0123456789ab", Executables: amdOnly}, `build ids starting with "embedded-" are reserved`, store.ErrConflict},
		{"latest reserved", store.CreateBuildParams{ID: "latest", Executables: amdOnly}, `build id "latest" is reserved`, store.ErrConflict},
		{"embedded lineage", store.CreateBuildParams{ID: "x1", Lineage: "embedded", Executables: amdOnly}, `lineage "embedded" is reserved`, store.ErrConflict},
		{"after unknown", store.CreateBuildParams{ID: "x2", After: "ci-9999", Executables: amdOnly}, `--after build "ci-9999" is not registered`, store.ErrNotFound},
		{"after in another lineage", store.CreateBuildParams{ID: "x3", After: "ci-4812", Lineage: "release-3", Executables: amdOnly}, `--after build "ci-4812" is in lineage main, not release-3`, store.ErrConflict},
		{"artifact never uploaded", store.CreateBuildParams{ID: "x4", Executables: []store.Executable{amd, {Platform: "linux/riscv64", SHA256: fakeSHA("nope")}}},
			"executable for linux/riscv64: artifact " + fakeSHA("nope") + " was never uploaded", store.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, created, err := st.CreateBuild(ctx, &tc.p)
			var r *store.BuildRefusal
			if created || !errors.As(err, &r) || !strings.Contains(r.Msg, tc.want) || !errors.Is(err, tc.is) {
				t.Fatalf("CreateBuild = %v, %v; want a refusal %q wrapping %v", created, err, tc.want, tc.is)
			}
			if tc.p.ID != "ci-4812" {
				if _, err := st.GetBuild(ctx, tc.p.ID); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("refused build %s stored: %v", tc.p.ID, err)
				}
			}
		})
	}
	if _, err := st.GetBuild(ctx, "x4"); !errors.Is(err, store.ErrNotFound) {
		t.Fatal("half a build stored")
	}
	if a, _ := st.GetArtifact(ctx, other.SHA256); a.Pinned {
		t.Fatal("a refused push pinned its artifact")
	}
}

// TestBuildOrder: pushes append to their lineage; --after inserts right
// after a build and moves the later ones up; lineages are independent.
func TestBuildOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	e := []store.Executable{exe(t, st, "linux/amd64", "o1")}
	steps := []struct {
		p    store.CreateBuildParams
		want []string
	}{
		{store.CreateBuildParams{ID: "b1"}, []string{"b1"}},
		{store.CreateBuildParams{ID: "b3"}, []string{"b1", "b3"}},
		{store.CreateBuildParams{ID: "b2", After: "b1"}, []string{"b1", "b2", "b3"}},
		{store.CreateBuildParams{ID: "b4", After: "b3"}, []string{"b1", "b2", "b3", "b4"}},
		{store.CreateBuildParams{ID: "b1.5", After: "b1"}, []string{"b1", "b1.5", "b2", "b3", "b4"}},
		{store.CreateBuildParams{ID: "r1", Lineage: "release-1"}, []string{"b1", "b1.5", "b2", "b3", "b4"}},
	}
	for _, s := range steps {
		s.p.Executables = e
		push(t, st, &s.p)
		if got := order(t, st, "main"); !slices.Equal(got, s.want) {
			t.Fatalf("after %s: main is %v, want %v", s.p.ID, got, s.want)
		}
	}
	// --after alone takes the after build's lineage.
	push(t, st, &store.CreateBuildParams{ID: "r0", After: "r1", Executables: e})
	if got := order(t, st, "release-1"); !slices.Equal(got, []string{"r1", "r0"}) {
		t.Fatalf("release-1 is %v", got)
	}
	latest, err := st.LatestBuild(ctx, "")
	if err != nil || latest.ID != "b4" {
		t.Fatalf("LatestBuild(main) = %+v, %v", latest, err)
	}
	if _, err := st.LatestBuild(ctx, "release-9"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("LatestBuild of an empty lineage: %v", err)
	}
	all, err := st.ListBuilds(ctx, &store.ListBuildsParams{Limit: 3})
	if err != nil || len(all) != 3 || all[0].ID != "r0" {
		t.Fatalf("ListBuilds = %+v, %v; want the 3 most recently pushed, r0 first", all, err)
	}
	x, err := st.BuildExecutable(ctx, "b2", "linux/amd64")
	if err != nil || x.SHA256 != e[0].SHA256 {
		t.Fatalf("BuildExecutable = %+v, %v", x, err)
	}
	for _, q := range [][2]string{{"b2", "linux/arm64"}, {"nope", "linux/amd64"}} {
		if _, err := st.BuildExecutable(ctx, q[0], q[1]); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("BuildExecutable(%s, %s): %v; want ErrNotFound", q[0], q[1], err)
		}
	}
}

// TestConcurrentPushes: pushes of one lineage racing each other all land,
// in distinct positions; racing pushes of one id store it once.
func TestConcurrentPushes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	e := []store.Executable{exe(t, st, "linux/amd64", "c1")}
	push(t, st, &store.CreateBuildParams{ID: "base", Executables: e})
	var wg sync.WaitGroup
	var mu sync.Mutex
	created := 0
	for i := range 8 {
		wg.Go(func() {
			p := &store.CreateBuildParams{ID: fmt.Sprintf("c%d", i%4), Executables: e}
			if i%2 == 1 {
				p.After = "base"
			}
			_, c, err := st.CreateBuild(ctx, p)
			if err != nil && !errors.Is(err, store.ErrConflict) {
				t.Error(err)
			}
			mu.Lock()
			if c {
				created++
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if got := order(t, st, "main"); len(got) != 5 || created != 4 {
		t.Fatalf("main is %v after racing pushes, %d created; want base and c0..c3 once each", got, created)
	}
}

// TestEnsureEmbeddedBuild: agents' embedded builds register once, gain
// platforms, and refuse another sha256 for a platform or an exec build's
// id.
func TestEnsureEmbeddedBuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	id := "embedded-9813d69a0b1c"
	p := func(platform, sha string) *store.EmbeddedBuildParams {
		return &store.EmbeddedBuildParams{ID: id, Platform: platform, SHA256: fakeSHA(sha), Revision: "9813d69a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e", GoVersion: "go1.26.8"}
	}
	// Agents say hello together: one registers, all succeed.
	var wg sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for range 6 {
		wg.Go(func() {
			c, err := st.EnsureEmbeddedBuild(ctx, p("linux/amd64", "agent-amd64"))
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			if c {
				n++
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if n != 1 {
		t.Fatalf("%d hellos registered the build, want 1", n)
	}
	if c, err := st.EnsureEmbeddedBuild(ctx, p("android/arm64", "agent-android")); err != nil || !c {
		t.Fatalf("second platform: %v, %v", c, err)
	}
	b, err := st.GetBuild(ctx, id)
	if err != nil || b.Kind != store.BuildKindEmbedded || b.Lineage != store.EmbeddedLineage || b.PushedBy != "coordinator" ||
		len(b.Executables) != 2 || b.GitSHA != "9813d69a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e" || b.Executables[0].Platform != "android/arm64" {
		t.Fatalf("embedded build %+v, %v", b, err)
	}
	x, err := st.BuildExecutable(ctx, id, "linux/amd64")
	if err != nil || x.SHA256 != fakeSHA("agent-amd64") || x.Revision == "" {
		t.Fatalf("BuildExecutable = %+v, %v", x, err)
	}
	push(t, st, &store.CreateBuildParams{ID: "ci-1", Executables: []store.Executable{exe(t, st, "linux/amd64", "e1")}})
	// A rebuilt agent of the same revision (a dirty tree) cannot take the id.
	_, err = st.EnsureEmbeddedBuild(ctx, p("linux/amd64", "rebuilt"))
	var r *store.BuildRefusal
	if !errors.As(err, &r) || !errors.Is(err, store.ErrConflict) ||
		!strings.Contains(r.Msg, "already has a linux/amd64 executable with sha256 "+fakeSHA("agent-amd64")[:12]) {
		t.Fatalf("other sha256: %v; want a conflict", err)
	}
	for _, bad := range []*store.EmbeddedBuildParams{
		{ID: "ci-1", Platform: "linux/amd64", SHA256: fakeSHA("z")},
		{ID: "embedded-x", Platform: "linux", SHA256: fakeSHA("z")},
		{ID: "embedded-x", Platform: "linux/amd64", SHA256: "abc"},
	} {
		if _, err := st.EnsureEmbeddedBuild(ctx, bad); err == nil {
			t.Fatalf("EnsureEmbeddedBuild(%+v) accepted", bad)
		}
	}
	// The embedded lineage is not main's: main's latest is the pushed build.
	if latest, err := st.LatestBuild(ctx, "main"); err != nil || latest.ID != "ci-1" {
		t.Fatalf("LatestBuild(main) = %+v, %v", latest, err)
	}
}

// TestNearestBuilds and the counts a build page shows.
func TestNearestBuildsAndCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	e := []store.Executable{exe(t, st, "linux/amd64", "n1")}
	for _, id := range []string{"ci-4790", "ci-4811", "ci-4812", "rel-1.3"} {
		push(t, st, &store.CreateBuildParams{ID: id, Executables: e})
	}
	got, err := st.NearestBuilds(ctx, "ci-481", 3)
	if err != nil || !slices.Equal(got, []string{"ci-4812", "ci-4811"}) {
		t.Fatalf("NearestBuilds = %v, %v", got, err)
	}
	if _, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t), Build: "ci-4812"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctx, `INSERT INTO alert_groups (suite, lineage, seq, build, scope, summary, regression)
		VALUES ('smoke', 'main', 3, 'ci-4812', 'global', 'decode_tps -12%', true)`); err != nil {
		t.Fatal(err)
	}
	b, err := st.GetBuild(ctx, "ci-4812")
	if err != nil || b.Runs != 1 || b.Alerts != 1 {
		t.Fatalf("GetBuild = %+v, %v; want 1 run and 1 alert group", b, err)
	}
}

package api

import (
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// Build is a registered build: immutable code under a user-chosen id.
type Build struct {
	ID       string    `json:"id" doc:"Build id, chosen at push." example:"ci-4812"`
	Lineage  string    `json:"lineage" doc:"Build lineage (branch); builds are ordered within it." example:"main"`
	Position int64     `json:"position" doc:"Order in the lineage, 1 the oldest. A push after an older build moves later builds up by one; their order never changes." example:"4812"`
	Kind     string    `json:"kind" enum:"exec,embedded" doc:"exec: pushed, with executables that agents download and run; embedded: an agent's embedded runtime, registered when the agent said hello." example:"exec"`
	GitSHA   string    `json:"git_sha" doc:"The executables' vcs.revision when stamped, else the git sha given at push (may be empty)." example:"9813d69a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"`
	Dirty    bool      `json:"dirty" doc:"Some executable was built from a tree with uncommitted changes (vcs.modified)." example:"false"`
	PushedAt time.Time `json:"pushed_at" doc:"When the build was registered." example:"2026-12-01T02:10:00Z"`
	PushedBy string    `json:"pushed_by" doc:"Name of the API token that pushed it (coordinator for embedded builds)." example:"ci"`
	Runs     int64     `json:"runs" doc:"Runs of this build." example:"24"`
	Alerts   int64     `json:"alerts" doc:"Regression alert groups attributed to this build." example:"0"`
	// Executables are one per platform.
	Executables []BuildExecutable `json:"executables" doc:"One executable per platform, by platform."`
}

// BuildExecutable is a build's executable for one platform.
type BuildExecutable struct {
	Platform  string `json:"platform" doc:"GOOS/GOARCH." example:"android/arm64"`
	SHA256    string `json:"sha256" doc:"The executable's sha256: its identity, and its artifact's id for an exec build." example:"3f2a9c0d4e5b6a7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7"`
	Size      int64  `json:"size" doc:"Size in bytes (0 when unknown: an embedded build)." example:"41943040"`
	GoVersion string `json:"go_version" doc:"Go toolchain that built it." example:"go1.26.8"`
	Revision  string `json:"revision" doc:"vcs.revision stamped into it; empty when built without VCS stamping." example:"9813d69a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"`
	Dirty     bool   `json:"dirty" doc:"Built from a tree with uncommitted changes (vcs.modified)." example:"false"`
	// Settings are the binary's Go build settings.
	Settings map[string]string `json:"settings,omitempty" doc:"Go build settings read from the binary (GOOS, GOARCH, CGO_ENABLED, -ldflags, -tags, vcs.*)."`
}

func buildFromStore(b *store.Build) Build {
	return Build{ID: b.ID, Lineage: b.Lineage, Position: b.Position, Kind: b.Kind, GitSHA: b.GitSHA, Dirty: b.Dirty,
		PushedAt: b.PushedAt, PushedBy: b.PushedBy, Runs: b.Runs, Alerts: b.Alerts,
		Executables: mapSlice(b.Executables, func(e *store.Executable) BuildExecutable {
			return BuildExecutable{Platform: e.Platform, SHA256: e.SHA256, Size: e.Size, GoVersion: e.GoVersion,
				Revision: e.Revision, Dirty: e.Modified, Settings: e.Settings}
		})}
}

func buildPtr(b *store.Build) *Build {
	w := buildFromStore(b)
	return &w
}

package api

import (
	"time"

	"github.com/lesfarm/lesfarm/coordinator/artifact"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// Artifact is the metadata of a file in the content-addressed artifact
// store.
type Artifact struct {
	SHA256         string               `json:"sha256" doc:"Content digest, 64 lowercase hex digits; the artifact's id." example:"3f2a9c0d4e5b6a7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7"`
	Size           int64                `json:"size" doc:"Size in bytes." example:"1932735283"`
	Name           string               `json:"name" doc:"Human name given at upload (e.g. the file name)." example:"qwen3-30b-a3b-q4_k_m.gguf"`
	CreatedAt      time.Time            `json:"created_at" doc:"When it was first uploaded." example:"2026-11-20T09:00:00Z"`
	LastAccessedAt time.Time            `json:"last_accessed_at" doc:"When it was last uploaded or downloaded (the garbage collector's grace period counts from here)." example:"2026-12-01T14:00:00Z"`
	Pinned         bool                 `json:"pinned" doc:"Pinned artifacts are never garbage-collected." example:"false"`
	Model          *protocol.ModelFacts `json:"model,omitempty" doc:"Facts read from the GGUF header (absent for other content or when not analysed)."`
	ModelError     string               `json:"model_error,omitempty" doc:"Why a GGUF-looking file has no model facts." example:"gguf: truncated header"`
	ModelCheckedAt *time.Time           `json:"model_checked_at,omitempty" doc:"When the header was analysed; absent for artifacts stored before analysis existed." example:"2026-11-20T09:00:01Z"`
}

func artifactFromStore(a *store.Artifact) Artifact {
	return Artifact{SHA256: a.SHA256, Size: a.Size, Name: a.Name, CreatedAt: a.CreatedAt, LastAccessedAt: a.LastAccessedAt,
		Pinned: a.Pinned, Model: a.Model, ModelError: a.ModelError, ModelCheckedAt: a.ModelCheckedAt}
}

func artifactPtr(a *store.Artifact) *Artifact {
	w := artifactFromStore(a)
	return &w
}

// GCReport is what an artifact garbage collection removed (or, in a dry
// run, would remove).
type GCReport struct {
	Removed      []string `json:"removed" doc:"Digests of the artifacts removed." example:"[\"3f2a9c0d4e5b6a7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7\"]"`
	FreedBytes   int64    `json:"freed_bytes" doc:"Bytes freed by those artifacts." example:"1932735283"`
	StrayFiles   []string `json:"stray_files" doc:"Files with no metadata row, removed." example:"[]"`
	PartialFiles int      `json:"partial_files" doc:"Abandoned partial uploads removed." example:"0"`
	DryRun       bool     `json:"dry_run" doc:"True when nothing was removed, only reported." example:"false"`
}

func gcReportFromArtifact(r *artifact.GCReport) *GCReport {
	return &GCReport{Removed: nonNil(r.Removed), FreedBytes: r.FreedBytes, StrayFiles: nonNil(r.StrayFiles),
		PartialFiles: r.PartialFiles, DryRun: r.DryRun}
}

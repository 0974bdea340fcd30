package artifact

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/startstop"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// GCOptions tune GC. The zero Grace means one day.
type GCOptions struct {
	// Grace protects artifacts uploaded or downloaded more recently than
	// this, and stray files younger than this (an upload in progress on
	// another coordinator may not have its row yet).
	Grace time.Duration
	// DryRun reports what would be removed without removing it.
	DryRun bool
	Logger *slog.Logger
}

// GCReport says what a GC pass removed (or would remove, for a dry run).
type GCReport struct {
	Removed      []string `json:"removed" doc:"Digests of the artifacts removed."`
	FreedBytes   int64    `json:"freed_bytes"`
	StrayFiles   []string `json:"stray_files" doc:"Files with no metadata row, removed."`
	PartialFiles int      `json:"partial_files" doc:"Abandoned partial uploads removed."`
	DryRun       bool     `json:"dry_run"`
}

// GC removes artifacts that are unreferenced (no job spec and no unfinished
// run names their sha256), unpinned and idle for longer than the grace
// period: first the metadata row (re-checking every condition in the
// DELETE, so a concurrent reference or download wins), then the file. It
// also removes files that have no row and abandoned partial uploads.
func GC(ctx context.Context, st *store.Store, files *Files, opt GCOptions) (*GCReport, error) {
	opt.Grace = cmp.Or(opt.Grace, 24*time.Hour)
	log := cmp.Or(opt.Logger, slog.Default())
	cutoff := time.Now().Add(-opt.Grace)
	rep := &GCReport{Removed: []string{}, StrayFiles: []string{}, DryRun: opt.DryRun}
	cands, err := st.ArtifactGCCandidates(ctx, cutoff)
	if err != nil {
		return nil, err
	}
	for _, a := range cands {
		if !opt.DryRun {
			ok, err := st.DeleteArtifactIfUnused(ctx, a.SHA256, cutoff)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
			if err := files.Remove(a.SHA256); err != nil {
				return nil, err
			}
		}
		rep.Removed = append(rep.Removed, a.SHA256)
		rep.FreedBytes += a.Size
	}
	// Files without rows (e.g. the row was deleted but the file removal
	// failed, or the database was restored from an older backup).
	onDisk, err := files.List()
	if err != nil {
		return nil, err
	}
	for _, sha := range onDisk {
		if _, err := st.GetArtifact(ctx, sha); err == nil {
			continue
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		p, _ := files.Path(sha)
		fi, err := os.Stat(p)
		if err != nil || fi.ModTime().After(cutoff) {
			continue
		}
		if !opt.DryRun {
			if err := files.Remove(sha); err != nil {
				return nil, err
			}
		}
		rep.StrayFiles = append(rep.StrayFiles, sha)
		rep.FreedBytes += fi.Size()
	}
	if !opt.DryRun {
		n, err := files.Sweep(opt.Grace)
		if err != nil {
			return nil, err
		}
		rep.PartialFiles = n
	}
	log.InfoContext(ctx, "artifact: gc done", "removed", len(rep.Removed), "stray", len(rep.StrayFiles),
		"partial", rep.PartialFiles, "freed_bytes", rep.FreedBytes, "dry_run", opt.DryRun)
	return rep, nil
}

// String summarises the report on one line.
func (r *GCReport) String() string {
	return fmt.Sprintf("removed %d artifacts and %d stray files, %d partial uploads, freed %d bytes",
		len(r.Removed), len(r.StrayFiles), r.PartialFiles, r.FreedBytes)
}

// Collector runs GC periodically, with the start/stop semantics of every
// background service (coordinator/startstop). The zero Interval means
// every 6 hours; the zero Grace means one day. Set the fields before
// Start.
type Collector struct {
	Store    *store.Store
	Files    *Files
	Interval time.Duration
	Grace    time.Duration
	Logger   *slog.Logger
	// OnPass, if set, is called after each pass with its report (nil on
	// error) and error: metrics and tests' signal that a pass ran.
	OnPass func(*GCReport, error)

	ss startstop.Service
}

// Start runs a GC pass every Interval (the first one after one Interval)
// until ctx ends or Stop is called. It returns at once, and never an
// error.
func (c *Collector) Start(ctx context.Context) error {
	interval := cmp.Or(c.Interval, 6*time.Hour)
	log := cmp.Or(c.Logger, slog.Default())
	return c.ss.StartFunc(ctx, nil, func(ctx context.Context) {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rep, err := GC(ctx, c.Store, c.Files, GCOptions{Grace: c.Grace, Logger: log})
			if err != nil && ctx.Err() == nil {
				log.ErrorContext(ctx, "artifact: gc failed", "err", err)
			}
			if c.OnPass != nil {
				c.OnPass(rep, err)
			}
		}
	})
}

// Started is closed once the loop runs.
func (c *Collector) Started() <-chan struct{} { return c.ss.Started() }

// Stop ends the loop and waits for a running pass to finish; it is
// idempotent.
func (c *Collector) Stop() { c.ss.Stop() }

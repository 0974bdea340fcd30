package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lesfarm/lesfarm/coordinator/builds"
	"github.com/lesfarm/lesfarm/protocol"
)

// Build kinds (builds.kind, migration 00031).
const (
	// BuildKindExec is a pushed build: one executable per platform, each
	// an artifact, which agents download and run.
	BuildKindExec = "exec"
	// BuildKindEmbedded is an agent's embedded runtime, registered by the
	// coordinator at hello (EnsureEmbeddedBuild); its executables are the
	// agents' own binaries, which are not in the artifact store.
	BuildKindEmbedded = "embedded"
)

// EmbeddedLineage is the lineage of every embedded build, so agents'
// builds never become the newest build of a lineage that people push to
// (a schedule's "latest" of main). Exec builds cannot use it.
const EmbeddedLineage = "embedded"

// BuildLatest is the build a schedule names to run the newest build of
// its lineage at fire time (coordinator/nightly). No build can take it as
// its id.
const BuildLatest = "latest"

// embeddedPrefix starts every embedded build's id (protocol.EmbeddedBuildID);
// exec builds cannot use it.
const embeddedPrefix = "embedded-"

// Build is a registered build: immutable code under a user-chosen id.
type Build struct {
	ID      string `json:"id"`
	Lineage string `json:"lineage"`
	// Position orders the builds of a lineage (1 is the oldest). A push
	// "after B" moves the later builds up by one, so a build's position
	// may grow; their order never changes.
	Position int64  `json:"position"`
	Kind     string `json:"kind"`
	// GitSHA is the executables' vcs.revision when stamped, else the git
	// sha given at push, else "".
	GitSHA string `json:"git_sha"`
	// Dirty is true when some executable was built from a modified tree.
	Dirty    bool      `json:"dirty"`
	PushedAt time.Time `json:"pushed_at"`
	// PushedBy is the API token's name ("coordinator" for embedded builds).
	PushedBy    string       `json:"pushed_by"`
	Executables []Executable `json:"executables"`
	// Runs and Alerts count the runs and regression alert groups of the
	// build (filled by GetBuild and ListBuilds).
	Runs   int64 `json:"runs"`
	Alerts int64 `json:"alerts"`
}

// Executable is a build's executable for one platform, as registered
// (with what its Go build information said). BuildExecutable, the
// subset an assignment carries, is provenance.go's.
type Executable struct {
	Platform string `json:"platform"`
	SHA256   string `json:"sha256"`
	// Size is in bytes; 0 when unknown (an embedded build).
	Size       int64  `json:"size"`
	GoVersion  string `json:"go_version"`
	Revision   string `json:"revision"`
	Modified   bool   `json:"modified"`
	ModulePath string `json:"module_path"`
	MainPath   string `json:"main_path"`
	// Settings are the binary's Go build settings (GOOS, -ldflags, ...).
	Settings map[string]string `json:"settings"`
}

// BuildRefusal is the error of a build registration the store refuses:
// Msg says why in one line, and it wraps ErrConflict (the id is taken by
// other content or by the other kind) or ErrNotFound (an unknown --after
// build or an executable whose artifact was never uploaded).
type BuildRefusal struct {
	Msg string
	Err error
}

func (e *BuildRefusal) Error() string { return "store: " + e.Msg }

// Unwrap returns ErrConflict or ErrNotFound.
func (e *BuildRefusal) Unwrap() error { return e.Err }

func refuseBuild(sentinel error, format string, args ...any) error {
	return &BuildRefusal{Msg: fmt.Sprintf(format, args...), Err: sentinel}
}

// CreateBuildParams describe an exec build. The caller (the API) has read
// and checked the executables (coordinator/builds).
type CreateBuildParams struct {
	ID string
	// Lineage is the build's lineage; "" means After's lineage, or
	// DefaultLineage without After.
	Lineage string
	// After, when set, places the build right after this build of the
	// same lineage instead of last.
	After    string
	GitSHA   string
	Dirty    bool
	PushedBy string
	// Executables are one per platform; each SHA256 must be an uploaded
	// artifact (it is pinned).
	Executables []Executable
}

var gitSHAText = regexp.MustCompile(`^[0-9a-f]{0,64}$`)

func (p *CreateBuildParams) validate() error {
	switch {
	case !builds.ValidID(p.ID):
		return fmt.Errorf("store: create build: invalid id %q", p.ID)
	case strings.HasPrefix(p.ID, embeddedPrefix):
		return refuseBuild(ErrConflict, "build ids starting with %q are reserved for agents' embedded builds", embeddedPrefix)
	case p.ID == BuildLatest:
		return refuseBuild(ErrConflict, "build id %q is reserved: schedules name it to run their lineage's newest build", BuildLatest)
	case p.Lineage == EmbeddedLineage:
		return refuseBuild(ErrConflict, "lineage %q is reserved for agents' embedded builds", EmbeddedLineage)
	case !gitSHAText.MatchString(p.GitSHA):
		return fmt.Errorf("store: create build: invalid git sha %q", p.GitSHA)
	case len(p.Executables) == 0:
		return errors.New("store: create build: no executables")
	}
	return ValidateLineage(p.Lineage)
}

// errBuildRace says the id appeared while CreateBuild waited for its
// lineage: the transaction is rolled back and the push compared again.
var errBuildRace = errors.New("store: build id created concurrently")

// CreateBuild registers an exec build in one transaction (the build, its
// executables, and the pin of their artifacts) and returns it with
// created true. A push of an id that is already registered with the same
// content (kind, lineage when given, executables, a compatible git sha)
// is idempotent: it returns the stored build with created false and
// changes nothing (After is ignored). Otherwise it returns a
// *BuildRefusal: the id taken by other content (ErrConflict), an unknown
// After or After in another lineage, or an executable whose artifact is
// not stored (ErrNotFound).
func (s *Store) CreateBuild(ctx context.Context, p *CreateBuildParams) (b *Build, created bool, err error) {
	if err := p.validate(); err != nil {
		return nil, false, err
	}
	for range 3 {
		old, err := s.GetBuild(ctx, p.ID)
		if err == nil {
			return old, false, sameBuild(old, p)
		}
		if !errors.Is(err, ErrNotFound) {
			return nil, false, err
		}
		err = s.tx(ctx, func(tx pgx.Tx) error { return insertBuild(ctx, tx, p) })
		if errors.Is(err, errBuildRace) {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		b, err := s.GetBuild(ctx, p.ID)
		return b, err == nil, err
	}
	return nil, false, fmt.Errorf("store: create build %s: created and removed concurrently", p.ID)
}

// lockLineage serialises position changes of one lineage until tx ends.
func lockLineage(ctx context.Context, tx pgx.Tx, lineage string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('lesfarm.builds:' || $1, 0))`, lineage)
	return err
}

func insertBuild(ctx context.Context, tx pgx.Tx, p *CreateBuildParams) error {
	lineage := p.Lineage
	if p.After != "" {
		var afterLineage string
		err := notFound(tx.QueryRow(ctx, `SELECT lineage FROM builds WHERE id = $1`, p.After).Scan(&afterLineage))
		switch {
		case errors.Is(err, ErrNotFound):
			return refuseBuild(ErrNotFound, "--after build %q is not registered", p.After)
		case err != nil:
			return fmt.Errorf("store: create build: %w", err)
		case lineage == "":
			lineage = afterLineage
		case lineage != afterLineage:
			return refuseBuild(ErrConflict, "--after build %q is in lineage %s, not %s", p.After, afterLineage, lineage)
		}
	}
	if lineage == "" {
		lineage = DefaultLineage
	}
	if err := lockLineage(ctx, tx, lineage); err != nil {
		return fmt.Errorf("store: create build: %w", err)
	}
	var pos int64
	var err error
	if p.After != "" {
		// Read under the lock: every shift of this lineage holds it.
		if err = tx.QueryRow(ctx, `SELECT position FROM builds WHERE id = $1`, p.After).Scan(&pos); err == nil {
			_, err = tx.Exec(ctx, `UPDATE builds SET position = position + 1 WHERE lineage = $1 AND position > $2`, lineage, pos)
		}
		pos++
	} else {
		err = tx.QueryRow(ctx, `SELECT COALESCE(max(position), 0) + 1 FROM builds WHERE lineage = $1`, lineage).Scan(&pos)
	}
	if err != nil {
		return fmt.Errorf("store: create build: %w", err)
	}
	tag, err := tx.Exec(ctx, `INSERT INTO builds (id, lineage, position, kind, git_sha, dirty, pushed_by)
		VALUES ($1, $2, $3, 'exec', $4, $5, $6) ON CONFLICT (id) DO NOTHING`,
		p.ID, lineage, pos, p.GitSHA, p.Dirty, clipText(p.PushedBy))
	if err != nil {
		return fmt.Errorf("store: create build: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return errBuildRace
	}
	shas := make([]string, 0, len(p.Executables))
	for _, e := range p.Executables {
		if _, err := insertExecutable(ctx, tx, p.ID, BuildKindExec, &e); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "23503" {
				return refuseBuild(ErrNotFound, "executable for %s: artifact %s was never uploaded", e.Platform, e.SHA256)
			}
			return fmt.Errorf("store: create build: %w", err)
		}
		shas = append(shas, e.SHA256)
	}
	if _, err := tx.Exec(ctx, `UPDATE artifacts SET pinned = true WHERE sha256 = ANY($1) AND NOT pinned`, shas); err != nil {
		return fmt.Errorf("store: create build: pin executables: %w", err)
	}
	return nil
}

// insertExecutable stores e for build buildID unless the build has one
// for its platform, and reports whether it did.
func insertExecutable(ctx context.Context, tx pgx.Tx, buildID, kind string, e *Executable) (bool, error) {
	settings, err := json.Marshal(e.Settings)
	if err != nil || e.Settings == nil {
		settings = []byte("{}")
	}
	var artifact any
	if kind == BuildKindExec {
		artifact = e.SHA256
	}
	tag, err := tx.Exec(ctx, `INSERT INTO build_executables (build_id, kind, platform, sha256, artifact, size_bytes,
			go_version, revision, vcs_modified, module_path, main_path, settings)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT (build_id, platform) DO NOTHING`,
		buildID, kind, e.Platform, e.SHA256, artifact, max(e.Size, 0), clipText(e.GoVersion), clipText(e.Revision), e.Modified,
		clipText(e.ModulePath), clipText(e.MainPath), settings)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// sameBuild returns nil when p would register exactly old (an idempotent
// re-push), else a *BuildRefusal saying what differs.
func sameBuild(old *Build, p *CreateBuildParams) error {
	taken := func(format string, args ...any) error {
		return refuseBuild(ErrConflict, "build %q is already registered with other content: %s", old.ID, fmt.Sprintf(format, args...))
	}
	if old.Kind != BuildKindExec {
		return taken("it is an agent's %s build", old.Kind)
	}
	if p.Lineage != "" && p.Lineage != old.Lineage {
		return taken("lineage %s, not %s", old.Lineage, p.Lineage)
	}
	if !strings.HasPrefix(old.GitSHA, p.GitSHA) && !strings.HasPrefix(p.GitSHA, old.GitSHA) {
		return taken("git sha %s, not %s", old.GitSHA, p.GitSHA)
	}
	have := map[string]string{}
	for _, e := range old.Executables {
		have[e.Platform] = e.SHA256
	}
	for _, e := range p.Executables {
		switch sha, ok := have[e.Platform]; {
		case !ok:
			return taken("it has no %s executable", e.Platform)
		case sha != e.SHA256:
			return taken("its %s executable is %s, not %s", e.Platform, shortSHA(sha), shortSHA(e.SHA256))
		}
	}
	if len(p.Executables) != len(old.Executables) {
		platforms := make([]string, 0, len(have))
		for pl := range have {
			platforms = append(platforms, pl)
		}
		slices.Sort(platforms)
		return taken("it has executables for %s", strings.Join(platforms, ", "))
	}
	return nil
}

func shortSHA(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// EmbeddedBuildParams describe an agent's embedded runtime on one
// platform (EnsureEmbeddedBuild).
type EmbeddedBuildParams struct {
	// ID is protocol.EmbeddedBuildID(Revision, SHA256): "embedded-" and
	// 12 characters of the revision, or of the sha256 without one.
	ID       string
	Platform string
	// SHA256 is the agent executable's sha256: the build's identity.
	SHA256    string
	Revision  string
	GoVersion string
	// Modified is the binary's vcs.modified; Size is its size (0:
	// unknown). Both optional.
	Modified bool
	Size     int64
}

// EnsureEmbeddedBuild registers an agent's embedded runtime as a build of
// kind embedded in EmbeddedLineage, with p's executable for p.Platform,
// unless it is already registered. It is idempotent and safe for
// concurrent use (agents say hello together). created is true when this
// call added the build or its platform. An id registered as an exec build,
// or with another sha256 for the platform, is a *BuildRefusal wrapping
// ErrConflict.
func (s *Store) EnsureEmbeddedBuild(ctx context.Context, p *EmbeddedBuildParams) (created bool, err error) {
	switch {
	case !builds.ValidID(p.ID) || !strings.HasPrefix(p.ID, embeddedPrefix):
		return false, fmt.Errorf("store: embedded build: invalid id %q (want %s…)", p.ID, embeddedPrefix)
	case !protocol.ValidPlatform(p.Platform):
		return false, fmt.Errorf("store: embedded build: invalid platform %q", p.Platform)
	case !protocol.ValidSHA256(p.SHA256):
		return false, fmt.Errorf("store: embedded build: invalid sha256 %q", p.SHA256)
	}
	// The common case, every hello after the first: one read.
	var kind string
	var sha *string
	err = s.pool.QueryRow(ctx, `SELECT b.kind, e.sha256 FROM builds b
		LEFT JOIN build_executables e ON e.build_id = b.id AND e.platform = $2 WHERE b.id = $1`, p.ID, p.Platform).Scan(&kind, &sha)
	if err = notFound(err); err != nil && !errors.Is(err, ErrNotFound) {
		return false, fmt.Errorf("store: embedded build: %w", err)
	}
	if err == nil && (kind != BuildKindEmbedded || sha != nil) {
		return false, embeddedSame(p, kind, sha)
	}
	err = s.tx(ctx, func(tx pgx.Tx) error {
		if err := lockLineage(ctx, tx, EmbeddedLineage); err != nil {
			return err
		}
		gitSHA := ""
		if gitSHAText.MatchString(p.Revision) {
			gitSHA = p.Revision
		}
		tag, err := tx.Exec(ctx, `INSERT INTO builds (id, lineage, position, kind, git_sha, dirty, pushed_by)
			SELECT $1, $2, COALESCE(max(position), 0) + 1, 'embedded', $3, $4, 'coordinator' FROM builds WHERE lineage = $2
			ON CONFLICT (id) DO NOTHING`, p.ID, EmbeddedLineage, gitSHA, p.Modified)
		if err != nil {
			return err
		}
		created = tag.RowsAffected() == 1
		if err := tx.QueryRow(ctx, `SELECT kind FROM builds WHERE id = $1`, p.ID).Scan(&kind); err != nil {
			return err
		}
		if kind != BuildKindEmbedded {
			return embeddedSame(p, kind, nil)
		}
		e := &Executable{Platform: p.Platform, SHA256: p.SHA256, Size: p.Size, GoVersion: p.GoVersion, Revision: p.Revision, Modified: p.Modified}
		added, err := insertExecutable(ctx, tx, p.ID, BuildKindEmbedded, e)
		if err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT sha256 FROM build_executables WHERE build_id = $1 AND platform = $2`, p.ID, p.Platform).Scan(&sha); err != nil {
			return err
		}
		if *sha != p.SHA256 {
			return embeddedSame(p, kind, sha)
		}
		created = created || added
		_, err = tx.Exec(ctx, `UPDATE builds SET dirty = true WHERE id = $1 AND $2 AND NOT dirty`, p.ID, p.Modified)
		return err
	})
	var refusal *BuildRefusal
	if errors.As(err, &refusal) {
		return false, err
	}
	if err != nil {
		return false, fmt.Errorf("store: embedded build: %w", err)
	}
	return created, nil
}

// embeddedSame checks a registered build (its kind, and the sha256 of its
// executable for p.Platform, nil when it has none) against p.
func embeddedSame(p *EmbeddedBuildParams, kind string, sha *string) error {
	switch {
	case kind != BuildKindEmbedded:
		return refuseBuild(ErrConflict, "build %q is a pushed %s build, not an agent's embedded build", p.ID, kind)
	case sha != nil && *sha != p.SHA256:
		return refuseBuild(ErrConflict, "embedded build %q already has a %s executable with sha256 %s, not %s",
			p.ID, p.Platform, shortSHA(*sha), shortSHA(p.SHA256))
	}
	return nil
}

package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/protocol"
)

// checkProvenance says why a result cannot be the work of its run's build,
// or "" when it can. A run of a registered exec build must come from one
// of that build's executables (the sha256 its platform was registered
// with); a run of an embedded build from the executable that build was
// registered with. A run without a build, or with a label that is not a
// registered build, takes the embedded runtime of whichever device ran it:
// its provenance is recorded, not checked. A cancelled or aborted result
// may have run nothing and is not checked either.
func checkProvenance(res *protocol.Result, row *resultRow) string {
	if row.buildKind == "" || res.Outcome == protocol.OutcomeCancelled || res.Outcome == protocol.OutcomeAborted {
		return ""
	}
	p := res.Provenance
	if p == nil {
		return fmt.Sprintf("result carries no provenance; build %s must prove which executable ran", row.build)
	}
	if p.Build != row.build {
		return fmt.Sprintf("result is from build %q, the run is build %q", p.Build, row.build)
	}
	if row.buildKind == "exec" && p.Embedded {
		return fmt.Sprintf("result is from the agent's embedded runtime, the run is build %s's executable", row.build)
	}
	if !slices.Contains(row.buildExes, p.Platform+" "+p.ExecutableSHA256) {
		return fmt.Sprintf("executable sha256 %s (%s) is not build %s's", short(p.ExecutableSHA256), p.Platform, row.build)
	}
	return ""
}

// rejectedResult is res turned into an infrastructure failure that says
// why its provenance was rejected: nothing it measured is stored, and the
// run is requeued while attempts remain (the device, not the build, is in
// doubt).
func rejectedResult(res *protocol.Result, why string) *protocol.Result {
	r := *res
	r.Outcome, r.Configs = protocol.OutcomeAborted, nil
	r.Error = clipText("result rejected: " + why)
	return &r
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

// DeviceExecutable is a build's executable for one platform, as an
// assignment carries it.
type DeviceExecutable struct {
	Platform  string
	SHA256    string
	SizeBytes int64
}

// ExecutableForDevice returns the kind of build ("" when build is empty or
// not registered, "exec" or "embedded") and, for an exec build, its
// executable for the platform deviceID's agent executes (nil when it has
// none for it: the run must not go to that device, which would otherwise
// run its embedded runtime instead of the build).
func (s *Store) ExecutableForDevice(ctx context.Context, build, deviceID string) (string, *DeviceExecutable, error) {
	if build == "" {
		return "", nil, nil
	}
	var kind string
	var x DeviceExecutable
	err := s.pool.QueryRow(ctx, `SELECT b.kind, coalesce(e.platform, ''), coalesce(e.sha256, ''), coalesce(e.size_bytes, 0)
		FROM builds b
		LEFT JOIN devices d ON d.id = $2
		LEFT JOIN build_executables e ON e.build_id = b.id AND b.kind = 'exec' AND e.platform = d.fingerprint->>'exec_platform'
		WHERE b.id = $1`, build, deviceID).Scan(&kind, &x.Platform, &x.SHA256, &x.SizeBytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("store: executable for device: %w", err)
	}
	if x.SHA256 == "" {
		return kind, nil, nil
	}
	return kind, &x, nil
}

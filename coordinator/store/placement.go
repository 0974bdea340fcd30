package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// idleDevicesSQL selects online, undrained devices without an active run
// (an emulated device whose host is busy is not idle), least recently
// assigned first, LIMIT $1; extra is ANDed to the condition.
func idleDevicesSQL(extra string) string {
	return `SELECT d.id, d.platform, d.device_model, coalesce(d.ram_bytes, 0), d.emulated, d.agent_labels || d.labels,
			coalesce(d.fingerprint->>'exec_platform', ''), coalesce(d.fingerprint->>'embedded_build', '')
		FROM devices d
		WHERE d.state = 'online' AND NOT d.drained
		  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.device_id = d.id AND r.state IN ('assigned', 'running'))
		  AND NOT ` + hostBusySQL("d") + extra + `
		ORDER BY d.last_assigned_at NULLS FIRST, d.id
		LIMIT $1`
}

func scanPlacementDevices(rows pgx.Rows, err error) ([]PlacementDevice, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []PlacementDevice
	for rows.Next() {
		var d PlacementDevice
		if err := rows.Scan(&d.ID, &d.Platform, &d.DeviceModel, &d.RAMBytes, &d.Emulated, &d.Labels, &d.ExecPlatform, &d.EmbeddedBuild); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// anyQueued is the condition "some run is queued and offerable now",
// uncorrelated: the planner evaluates it once per statement, so the reads
// of a pass over an empty queue cost next to nothing.
const anyQueued = `EXISTS (SELECT 1 FROM runs qr WHERE qr.state = 'queued' AND (qr.not_before IS NULL OR qr.not_before <= now()))`

// PlacementParams are the arguments of Placement.
type PlacementParams struct {
	// DeviceIDs, when set, are the only devices read (those a result just
	// freed: placing them needs no scan of the fleet); otherwise every idle
	// device is, up to Limit.
	DeviceIDs []string
	Limit     int
	// HeadExtra lengthens the head read per suite beyond the devices to
	// place plus 16: the runs concurrent passes have reserved (which this
	// pass skips) would otherwise fill a short head.
	HeadExtra int
}

// PlacementSnapshot is what a placement pass reads.
type PlacementSnapshot struct {
	// Devices are the idle devices, least recently assigned first.
	Devices []PlacementDevice
	// Load is the number of active (assigned or running) runs per suite,
	// the input of fair placement.
	Load map[string]int
	// Head is the best queued runs of every suite (by priority, then age),
	// as many per suite as there are devices to place plus 16 (plus
	// HeadExtra), and
	// Truncated says whether some suite had more.
	Head      []Candidate
	Truncated bool
}

// Placement reads a placement pass's inputs in one round trip: the idle
// devices (all, or p.DeviceIDs), the suites' load and the head of the
// queue. With nothing queued it returns no devices and no head.
func (s *Store) Placement(ctx context.Context, p *PlacementParams) (*PlacementSnapshot, error) {
	return placementOn(ctx, s.pool, p, "")
}

// batchSender is a pool or a transaction.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// placementOn is Placement's read on q (the pool, or a result's
// transaction: BeginCompleteRuns), after the statement first (if any) in
// the same round trip.
func placementOn(ctx context.Context, q batchSender, p *PlacementParams, first string) (*PlacementSnapshot, error) {
	b := &pgx.Batch{}
	pq := queuePlacement(b, p, first)
	br := q.SendBatch(ctx, b)
	defer br.Close()
	snap, err := pq.read(br)
	if err != nil {
		return nil, err
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("store: placement: %w", err)
	}
	return snap, nil
}

// placementQuery is a placement read queued in a batch (queuePlacement),
// to be read from its results in order.
type placementQuery struct {
	perSuite int
	first    bool
}

// queuePlacement queues Placement's statements (after first, if any) in b.
func queuePlacement(b *pgx.Batch, p *PlacementParams, first string) placementQuery {
	limit := p.Limit
	devSQL, devArgs := idleDevicesSQL(` AND `+anyQueued), []any{limit}
	if p.DeviceIDs != nil {
		limit = len(p.DeviceIDs)
		devSQL, devArgs = idleDevicesSQL(` AND d.id = ANY($2) AND `+anyQueued), []any{limit, p.DeviceIDs}
	}
	perSuite := limit + 16 + max(p.HeadExtra, 0)
	if first != "" {
		b.Queue(first)
	}
	b.Queue(devSQL, devArgs...)
	b.Queue(`SELECT suite, count(*) FROM runs WHERE state IN ('assigned', 'running') AND ` + anyQueued + ` GROUP BY suite`)
	b.Queue(`SELECT q.id, q.suite, q.priority, q.queued_at, q.device_selector, coalesce(q.target_device_id, ''), q.n, `+buildNeedsCols+` FROM (
		SELECT r.id, r.suite, r.priority, r.queued_at, r.device_selector, r.target_device_id, r.build,
			row_number() OVER (PARTITION BY r.suite ORDER BY r.priority DESC, r.queued_at, r.id) AS rn,
			count(*) OVER (PARTITION BY r.suite) AS n
		FROM runs r WHERE r.state = 'queued' AND (r.not_before IS NULL OR r.not_before <= now())) q`+buildNeedsJoin+`
		WHERE q.rn <= $1 ORDER BY q.priority DESC, q.queued_at, q.id`, perSuite)
	return placementQuery{perSuite: perSuite, first: first != ""}
}

// read reads the queued placement's results from br.
func (pq placementQuery) read(br pgx.BatchResults) (*PlacementSnapshot, error) {
	snap := &PlacementSnapshot{Load: map[string]int{}}
	var err error
	if pq.first {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("store: placement: %w", err)
		}
	}
	if snap.Devices, err = scanPlacementDevices(br.Query()); err != nil {
		return nil, fmt.Errorf("store: placement: idle devices: %w", err)
	}
	if err := scanLoad(br, snap.Load); err != nil {
		return nil, fmt.Errorf("store: placement: suite load: %w", err)
	}
	if snap.Head, snap.Truncated, err = scanHead(br, pq.perSuite); err != nil {
		return nil, fmt.Errorf("store: placement: queued runs: %w", err)
	}
	return snap, nil
}

func scanLoad(br pgx.BatchResults, out map[string]int) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var suite string
		var n int
		if err := rows.Scan(&suite, &n); err != nil {
			return err
		}
		out[suite] = n
	}
	return rows.Err()
}

func scanHead(br pgx.BatchResults, perSuite int) ([]Candidate, bool, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	var out []Candidate
	truncated := false
	for rows.Next() {
		var c Candidate
		var sel []byte
		var n int
		var kind string
		var platforms []string
		if err := rows.Scan(&c.RunID, &c.Suite, &c.Priority, &c.QueuedAt, &sel, &c.TargetDeviceID, &n, &c.Build, &kind, &platforms); err != nil {
			return nil, false, err
		}
		c.Needs = needsOf(kind, platforms)
		if err := jsonUnmarshal(sel, &c.Selector); err != nil {
			return nil, false, err
		}
		truncated = truncated || n > perSuite
		out = append(out, c)
	}
	return out, truncated, rows.Err()
}

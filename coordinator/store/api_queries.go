package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/jobs"
)

// AlertGroupsForBuild returns the alert groups recorded at build (and of
// suite and lineage, when not empty), newest first, with id below beforeID when it is
// not zero. CI uses it to learn whether its build regressed.
func (s *Store) AlertGroupsForBuild(ctx context.Context, suite, lineage, build string, beforeID int64, limit int) ([]AlertGroup, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+groupColumns+` FROM alert_groups g
		WHERE g.build = $1 AND ($2 = '' OR g.suite = $2) AND ($3 = 0 OR g.id < $3)
		  AND ($5 = '' OR g.lineage = $5)
		ORDER BY g.id DESC LIMIT $4`, build, suite, beforeID, max(limit, 1), lineage)
	if err != nil {
		return nil, fmt.Errorf("store: alert groups for build: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (AlertGroup, error) {
		g, err := scanGroup(r)
		return *g, err
	})
}

// SeriesKey names a family of series: one metric of one config of a suite
// on one build lineage, across device models.
type SeriesKey struct {
	Suite   string `json:"suite"`
	Lineage string `json:"lineage"`
	Config  string `json:"config"`
	Metric  string `json:"metric"`
	// Devices is how many series (device model × OS × emulated) it has.
	Devices int `json:"devices"`
}

// SeriesCatalog lists the series families, optionally of one suite.
func (s *Store) SeriesCatalog(ctx context.Context, suite string, limit int) ([]SeriesKey, error) {
	rows, err := s.pool.Query(ctx, `SELECT suite, lineage, config, metric, count(*) FROM regress_series
		WHERE ($1 = '' OR suite = $1) GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4 LIMIT $2`, suite, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("store: series catalog: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (SeriesKey, error) {
		var k SeriesKey
		err := r.Scan(&k.Suite, &k.Lineage, &k.Config, &k.Metric, &k.Devices)
		return k, err
	})
}

// SeriesQuery selects series and how many recent points of each to return.
type SeriesQuery struct {
	Suite       string // required
	Metric      string // required
	Config      string // "" means every config
	Lineage     string // "" means every lineage
	DeviceModel string // "" means every device model
	// Last is how many most recent points per series (by seq) to return.
	Last int
}

// SeriesWithPoints is one series and its recent points, oldest first.
type SeriesWithPoints struct {
	RegressSeries
	Points []RegressPoint `json:"points"`
}

// Suite is a named, editable job spec.
type Suite struct {
	Name      string    `json:"name"`
	Spec      jobs.Spec `json:"spec"`
	Builtin   bool      `json:"builtin"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func scanSuite(row pgx.Row) (*Suite, error) {
	var su Suite
	var raw []byte
	if err := row.Scan(&su.Name, &raw, &su.Builtin, &su.CreatedAt, &su.UpdatedAt); err != nil {
		return nil, notFound(err)
	}
	if err := json.Unmarshal(raw, &su.Spec); err != nil {
		return nil, fmt.Errorf("store: suite %s spec: %w", su.Name, err)
	}
	return &su, nil
}

const suiteCols = `name, spec, builtin, created_at, updated_at`

// GetSuite returns the stored suite, or ErrNotFound.
func (s *Store) GetSuite(ctx context.Context, name string) (*Suite, error) {
	return scanSuite(s.pool.QueryRow(ctx, `SELECT `+suiteCols+` FROM suites WHERE name = $1`, name))
}

// ListSuites returns suites with names after `after`, by name.
func (s *Store) ListSuites(ctx context.Context, after string, limit int) ([]Suite, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+suiteCols+` FROM suites WHERE name > $1 ORDER BY name LIMIT $2`, after, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("store: list suites: %w", err)
	}
	defer rows.Close()
	var out []Suite
	for rows.Next() {
		su, err := scanSuite(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *su)
	}
	return out, rows.Err()
}

// PutSuite creates or replaces the suite named name with a validated spec.
// It reports whether the suite was created. builtin marks suites shipped
// with the binary (refreshed at startup).
func (s *Store) PutSuite(ctx context.Context, name string, spec *jobs.Spec, builtin bool) (*Suite, bool, error) {
	if err := spec.Validate(); err != nil {
		return nil, false, err
	}
	js, err := spec.MarshalCanonical()
	if err != nil {
		return nil, false, err
	}
	var created bool
	row := s.pool.QueryRow(ctx, `INSERT INTO suites (name, spec, builtin) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET spec = EXCLUDED.spec, builtin = EXCLUDED.builtin, updated_at = now()
		RETURNING `+suiteCols+`, (xmax = 0)`, name, js, builtin)
	var su Suite
	var raw []byte
	if err := row.Scan(&su.Name, &raw, &su.Builtin, &su.CreatedAt, &su.UpdatedAt, &created); err != nil {
		return nil, false, fmt.Errorf("store: put suite: %w", err)
	}
	if err := json.Unmarshal(raw, &su.Spec); err != nil {
		return nil, false, fmt.Errorf("store: suite %s spec: %w", su.Name, err)
	}
	return &su, created, nil
}

// DeleteSuite deletes a suite. Runs keep their job snapshots.
func (s *Store) DeleteSuite(ctx context.Context, name string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM suites WHERE name = $1`, name)
	if err != nil {
		return fmt.Errorf("store: delete suite: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// ListJobsParams pages through job snapshots, newest first.
type ListJobsParams struct {
	Suite  string
	Before int64
	Limit  int
}

// ListJobs lists job snapshots, newest first.
func (s *Store) ListJobs(ctx context.Context, p *ListJobsParams) ([]Job, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, name, suite, spec, fingerprint, created_at FROM jobs
		WHERE ($1 = '' OR suite = $1) AND ($2 = 0 OR id < $2) ORDER BY id DESC LIMIT $3`, p.Suite, p.Before, max(p.Limit, 1))
	if err != nil {
		return nil, fmt.Errorf("store: list jobs: %w", err)
	}
	defer rows.Close()
	var out []Job
	for rows.Next() {
		var j Job
		var raw []byte
		if err := rows.Scan(&j.ID, &j.Name, &j.Suite, &raw, &j.Fingerprint, &j.CreatedAt); err != nil {
			return nil, fmt.Errorf("store: list jobs: %w", err)
		}
		if err := json.Unmarshal(raw, &j.Spec); err != nil {
			return nil, fmt.Errorf("store: job %d spec: %w", j.ID, err)
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// Result is the statistics of one config of one run.
type Result struct {
	RunID         int64           `json:"run_id"`
	ConfigIndex   int             `json:"config_index"`
	ConfigKey     string          `json:"config_key"`
	Suite         string          `json:"suite"`
	Build         string          `json:"build"`
	GitSHA        string          `json:"git_sha"`
	DeviceID      string          `json:"device_id"`
	DeviceModel   string          `json:"device_model"`
	OSVersion     string          `json:"os_version"`
	Emulated      bool            `json:"emulated"`
	DecodeTPS     Stat            `json:"decode_tps"`
	PrefillTPS    Stat            `json:"prefill_tps"`
	TTFTms        Stat            `json:"ttft_ms"`
	PeakMemory    int64           `json:"peak_memory_bytes"`
	HitRate       float64         `json:"hit_rate"`
	Recall        float64         `json:"predictor_recall"`
	StallFraction float64         `json:"stall_fraction"`
	BytesPerToken float64         `json:"bytes_per_token"`
	Repetitions   int             `json:"repetitions"`
	Warmup        int             `json:"warmup"`
	Valid         bool            `json:"valid"`
	InvalidReason string          `json:"invalid_reason,omitempty"`
	Error         string          `json:"error,omitempty"`
	Stats         json.RawMessage `json:"stats"`
	CreatedAt     time.Time       `json:"created_at"`
	// ExecutableSHA256 is the sha256 of the executable that produced the
	// result ("" for results stored before builds under test).
	ExecutableSHA256 string `json:"executable_sha256,omitempty"`
}

// Stat is a summary statistic over repetitions: N is the repetitions it
// summarises and CV is Stddev/Mean.
type Stat struct {
	Mean   float64 `json:"mean"`
	Median float64 `json:"median"`
	Stddev float64 `json:"stddev"`
	CV     float64 `json:"cv,omitempty"`
	N      int     `json:"n,omitempty"`
}

const resultCols = `run_id, config_index, config_key, suite, build, git_sha, device_id, device_model, os_version, emulated,
	decode_tps_mean, decode_tps_median, decode_tps_stddev, decode_tps_cv, prefill_tps_mean, prefill_tps_median, prefill_tps_stddev,
	ttft_ms_mean, ttft_ms_median, ttft_ms_stddev, peak_memory_bytes, hit_rate, predictor_recall, stall_fraction, bytes_per_token,
	repetitions, warmup, valid, invalid_reason, error, stats, created_at,
	COALESCE((stats->'prefill_tps'->>'cv')::float8, 0), COALESCE((stats->'ttft_ms'->>'cv')::float8, 0), executable_sha256`

// ListResultsParams filter ListResults; zero fields do not filter.
type ListResultsParams struct {
	RunID       int64
	Suite       string
	Build       string
	ConfigKey   string
	DeviceModel string
	// After pages by (run_id, config_index) descending: results of runs
	// with a smaller id than AfterRun, or the same run and a smaller index.
	AfterRun    int64
	AfterConfig int
	Limit       int
}

// ListResults lists results, newest run first.
func (s *Store) ListResults(ctx context.Context, p *ListResultsParams) ([]Result, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+resultCols+` FROM results
		WHERE ($1 = 0 OR run_id = $1) AND ($2 = '' OR suite = $2) AND ($3 = '' OR build = $3)
		  AND ($4 = '' OR config_key = $4) AND ($5 = '' OR device_model = $5)
		  AND ($6 = 0 OR (run_id, config_index) < ($6, $7))
		ORDER BY run_id DESC, config_index DESC LIMIT $8`,
		p.RunID, p.Suite, p.Build, p.ConfigKey, p.DeviceModel, p.AfterRun, p.AfterConfig, max(p.Limit, 1))
	if err != nil {
		return nil, fmt.Errorf("store: list results: %w", err)
	}
	defer rows.Close()
	var out []Result
	for rows.Next() {
		var r Result
		var stats []byte
		if err := rows.Scan(&r.RunID, &r.ConfigIndex, &r.ConfigKey, &r.Suite, &r.Build, &r.GitSHA, &r.DeviceID, &r.DeviceModel,
			&r.OSVersion, &r.Emulated, &r.DecodeTPS.Mean, &r.DecodeTPS.Median, &r.DecodeTPS.Stddev, &r.DecodeTPS.CV,
			&r.PrefillTPS.Mean, &r.PrefillTPS.Median, &r.PrefillTPS.Stddev, &r.TTFTms.Mean, &r.TTFTms.Median, &r.TTFTms.Stddev,
			&r.PeakMemory, &r.HitRate, &r.Recall, &r.StallFraction, &r.BytesPerToken, &r.Repetitions, &r.Warmup,
			&r.Valid, &r.InvalidReason, &r.Error, &stats, &r.CreatedAt, &r.PrefillTPS.CV, &r.TTFTms.CV, &r.ExecutableSHA256); err != nil {
			return nil, fmt.Errorf("store: list results: %w", err)
		}
		r.DecodeTPS.N, r.PrefillTPS.N, r.TTFTms.N = r.Repetitions, r.Repetitions, r.Repetitions
		r.Stats = json.RawMessage(stats)
		out = append(out, r)
	}
	return out, rows.Err()
}

// RunsByIDs returns the runs with the given ids (missing ids are skipped),
// ordered by id.
func (s *Store) RunsByIDs(ctx context.Context, ids []int64) ([]Run, error) {
	runs, err := collectRuns(s.pool.Query(ctx, `SELECT `+runCols+` FROM runs r WHERE r.id = ANY($1) ORDER BY r.id`, ids))
	if err != nil {
		return nil, fmt.Errorf("store: runs by ids: %w", err)
	}
	return runs, nil
}

// ResolveSuite returns the spec of the suite named name: the stored suite,
// else the built-in one of that name, else ErrNotFound.
func (s *Store) ResolveSuite(ctx context.Context, name string) (*jobs.Spec, error) {
	su, err := s.GetSuite(ctx, name)
	if err == nil {
		spec := su.Spec
		return &spec, nil
	}
	if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	if spec, berr := jobs.Builtin(name); berr == nil {
		return spec, nil
	}
	return nil, ErrNotFound
}

// createRunsTx is CreateRuns inside tx: the job snapshot, the trigger and
// its runs commit or roll back with tx. Tx.CreateRuns exposes it to the
// nightly scheduler, so an occurrence's runs and its firing record are one
// atomic write.
func (s *Store) createRunsTx(ctx context.Context, tx pgx.Tx, p *CreateRunsParams) (*Trigger, []Run, error) {
	in, err := triggerInputOf(p)
	if err != nil {
		return nil, nil, err
	}
	lineage, sel, selJSON, labels, source := in.lineage, in.sel, in.selJSON, in.labels, in.source
	jobID, err := putJobID(ctx, tx, p.Spec, in.spec, p.Spec.Fingerprint())
	if err != nil {
		return nil, nil, err
	}
	tr := &Trigger{Suite: p.Spec.SuiteName(), JobID: jobID, Build: p.Build, GitSHA: p.GitSHA, Lineage: lineage, Selector: sel, Fanout: p.Fanout, Source: source}
	if err := tx.QueryRow(ctx, `INSERT INTO triggers (suite, job_id, build, git_sha, device_selector, fanout, source, lineage)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id, created_at`,
		tr.Suite, jobID, p.Build, p.GitSHA, selJSON, p.Fanout, source, lineage).Scan(&tr.ID, &tr.CreatedAt); err != nil {
		return nil, nil, fmt.Errorf("store: create trigger: %w", err)
	}
	targets := []*string{nil}
	if p.Fanout {
		rows, err := tx.Query(ctx, `SELECT id FROM devices d WHERE state = 'online' AND NOT drained AND `+selectorSQL("$1", "$2", "$3", "$4", "$5")+` ORDER BY id`,
			nullIfEmpty(sel.Platform), nullIfEmpty(sel.DeviceModel), int64(sel.MinRAM), sel.Emulated, labels)
		if err != nil {
			return nil, nil, fmt.Errorf("store: fanout: %w", err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, nil, fmt.Errorf("store: fanout: %w", err)
		}
		if len(ids) == 0 {
			return nil, nil, ErrNoDevices
		}
		targets = targets[:0]
		for i := range ids {
			targets = append(targets, &ids[i])
		}
	}
	var runs []Run
	for _, target := range targets {
		r, err := scanRun(tx.QueryRow(ctx, `INSERT INTO runs AS r (trigger_id, job_id, suite, build, git_sha, device_selector,
			sel_platform, sel_device_model, sel_min_ram, sel_emulated, sel_labels, target_device_id,
			priority, max_attempts, retry_on_failure, timeout_ms, lineage)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
			RETURNING `+runCols,
			tr.ID, jobID, tr.Suite, p.Build, p.GitSHA, selJSON, nullIfEmpty(sel.Platform), nullIfEmpty(sel.DeviceModel),
			int64(sel.MinRAM), sel.Emulated, labels, target, p.Spec.Priority, p.Spec.Retry.MaxAttempts,
			p.Spec.Retry.OnFailure, p.Spec.Timeout.D().Milliseconds(), lineage))
		if err != nil {
			return nil, nil, fmt.Errorf("store: create run: %w", err)
		}
		runs = append(runs, *r)
		tr.RunIDs = append(tr.RunIDs, r.ID)
	}
	return tr, runs, nil
}

// resultMetrics maps metric names to the results columns holding their
// per-run mean and standard deviation ("" when the table has none).
var resultMetrics = map[string][2]string{
	"decode_tps":        {"decode_tps_mean", "decode_tps_stddev"},
	"decode_tps_median": {"decode_tps_median", ""},
	"prefill_tps":       {"prefill_tps_mean", "prefill_tps_stddev"},
	"ttft_ms":           {"ttft_ms_mean", "ttft_ms_stddev"},
	"peak_memory_bytes": {"peak_memory_bytes", ""},
	"hit_rate":          {"hit_rate", ""},
	"predictor_recall":  {"predictor_recall", ""},
	"stall_fraction":    {"stall_fraction", ""},
	"bytes_per_token":   {"bytes_per_token", ""},
}

// ErrUnknownMetric is returned by ResultSeries for a metric it cannot query.
var ErrUnknownMetric = errors.New("store: unknown result metric")

// ResultSeries builds "metric by device model over builds" straight from
// the results table (valid results only), without the regression
// detector's series: one series per (device model, emulated, config), one
// point per build with the mean over that build's runs on that model. Builds
// are ordered by their first result in the suite, and Seq is that rank, so
// points of different models line up. Only the last q.Last builds of each
// series are returned. Lineage and OSMajor are left empty.
func (s *Store) ResultSeries(ctx context.Context, q *SeriesQuery) ([]SeriesWithPoints, error) {
	cols, ok := resultMetrics[q.Metric]
	if !ok {
		return nil, ErrUnknownMetric
	}
	sd := "0::double precision"
	if cols[1] != "" {
		sd = cols[1]
	}
	rows, err := s.pool.Query(ctx, `
		WITH r AS (
			SELECT device_model, emulated, config_key, build, min(created_at) AS first_at,
			       avg(`+finiteNumeric(cols[0])+`)::double precision AS value, avg(`+finiteNumeric(sd)+`)::double precision AS sd, count(*) AS n
			FROM results
			WHERE suite = $1 AND valid AND error = '' AND ($2 = '' OR config_key = $2) AND ($3 = '' OR device_model = $3)
			GROUP BY device_model, emulated, config_key, build),
		b AS (SELECT build, dense_rank() OVER (ORDER BY min(first_at), build) AS seq FROM r GROUP BY build),
		ranked AS (
			SELECT r.*, b.seq, row_number() OVER (PARTITION BY device_model, emulated, config_key ORDER BY b.seq DESC) AS rn
			FROM r JOIN b USING (build))
		SELECT device_model, emulated, config_key, seq, build, value, sd, n FROM ranked WHERE rn <= $4
		ORDER BY device_model, emulated, config_key, seq
		LIMIT 100000`, q.Suite, q.Config, q.DeviceModel, max(q.Last, 1))
	if err != nil {
		return nil, fmt.Errorf("store: result series: %w", err)
	}
	defer rows.Close()
	var out []SeriesWithPoints
	for rows.Next() {
		var sr RegressSeries
		var p RegressPoint
		if err := rows.Scan(&sr.DeviceModel, &sr.Emulated, &sr.Config, &p.Seq, &p.Build, &p.Value, &p.Stddev, &p.N); err != nil {
			return nil, fmt.Errorf("store: result series: %w", err)
		}
		n := len(out)
		if n == 0 || out[n-1].DeviceModel != sr.DeviceModel || out[n-1].Emulated != sr.Emulated || out[n-1].Config != sr.Config {
			sr.Suite, sr.Metric = q.Suite, q.Metric
			out = append(out, SeriesWithPoints{RegressSeries: sr, Points: []RegressPoint{}})
			n++
		}
		out[n-1].Points = append(out[n-1].Points, p)
	}
	return out, rows.Err()
}

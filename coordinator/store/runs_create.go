package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lesfarm/lesfarm/jobs"
)

// createRunOne is CreateRuns of a trigger without fanout (one queued run,
// the common trigger) as one autocommit statement: the job snapshot, the
// trigger and its run in one round trip instead of a transaction of six.
// The run's notice is deferred (deferNotify, which the run insert reads)
// and sent after the commit, as in CreateRuns. ok is false, with nothing
// written, when the job's snapshot is being inserted by a concurrent
// transaction that the statement's snapshot cannot see yet; the caller
// then takes the transaction path, whose second read sees it.
func (s *Store) createRunOne(ctx context.Context, p *CreateRunsParams) (tr *Trigger, runs []Run, ok bool, err error) {
	in, err := triggerInputOf(p)
	if err != nil {
		return nil, nil, false, err
	}
	lineage, js, sel, selJSON, labels, source := in.lineage, in.spec, in.sel, in.selJSON, in.labels, in.source
	suite := p.Spec.SuiteName()
	// The triggers row and the run share the statement's now(), so the
	// trigger's created_at is the run's.
	rows, err := s.pool.Query(ctx, `WITH j AS (
			INSERT INTO jobs (name, suite, spec, fingerprint) VALUES ($1, $2, $3, $4)
			ON CONFLICT (fingerprint) DO NOTHING RETURNING id),
		jid AS (SELECT id FROM j UNION ALL SELECT id FROM jobs WHERE fingerprint = $4 LIMIT 1),
		t AS (INSERT INTO triggers (suite, job_id, build, git_sha, device_selector, fanout, source, lineage)
			SELECT $2, jid.id, $5, $6, $7, false, $8, $9 FROM jid RETURNING id, job_id),
		ins AS (INSERT INTO runs AS r (trigger_id, job_id, suite, build, git_sha, device_selector,
				sel_platform, sel_device_model, sel_min_ram, sel_emulated, sel_labels, target_device_id,
				priority, max_attempts, retry_on_failure, timeout_ms, lineage)
			SELECT t.id, t.job_id, $2, $5, $6, $7, $10, $11, $12, $13, $14, NULL, $15, $16, $17, $18, $9
			FROM t, `+deferNotify+`
			RETURNING r.*)
		SELECT `+runCols+` FROM ins AS r`,
		p.Spec.Name, suite, js, p.Spec.Fingerprint(), p.Build, p.GitSHA, selJSON, source, lineage,
		nullIfEmpty(sel.Platform), nullIfEmpty(sel.DeviceModel), int64(sel.MinRAM), sel.Emulated, labels,
		p.Spec.Priority, p.Spec.Retry.MaxAttempts, p.Spec.Retry.OnFailure, p.Spec.Timeout.D().Milliseconds())
	runs, err = collectRuns(rows, err)
	if err != nil {
		return nil, nil, false, fmt.Errorf("store: create run: %w", err)
	}
	if len(runs) == 0 {
		return nil, nil, false, nil
	}
	r := &runs[0]
	tr = &Trigger{ID: r.TriggerID, Suite: suite, JobID: r.JobID, Build: p.Build, GitSHA: p.GitSHA, Lineage: lineage, Selector: sel,
		Source: source, CreatedAt: r.CreatedAt, RunIDs: []int64{r.ID}}
	return tr, runs, true, nil
}

// triggerInput is what both ways of creating a trigger's runs
// (createRunOne, createRunsTx) derive from their params before writing.
type triggerInput struct {
	lineage string
	spec    []byte // the spec's canonical JSON
	sel     jobs.Selector
	selJSON []byte
	labels  map[string]string // sel's labels, never nil
	source  string            // "api" unless the params say
}

// triggerInputOf checks p's spec and derives its trigger's input: the
// lineage (a new one unless given), the selector (the spec's unless p
// overrides it) and the source.
func triggerInputOf(p *CreateRunsParams) (*triggerInput, error) {
	if p.Spec == nil {
		return nil, errors.New("store: create runs: spec required")
	}
	if err := p.Spec.Validate(); err != nil {
		return nil, err
	}
	lineage, err := lineageOr(p.Lineage)
	if err != nil {
		return nil, err
	}
	js, err := p.Spec.MarshalCanonical()
	if err != nil {
		return nil, err
	}
	in := &triggerInput{lineage: lineage, spec: js, sel: p.Spec.Devices, labels: p.Spec.Devices.Labels, source: p.Source}
	if p.Selector != nil {
		in.sel, in.labels = *p.Selector, p.Selector.Labels
	}
	if in.selJSON, err = json.Marshal(&in.sel); err != nil {
		return nil, err
	}
	if in.labels == nil {
		in.labels = map[string]string{}
	}
	if in.source == "" {
		in.source = "api"
	}
	return in, nil
}

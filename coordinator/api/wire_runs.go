package api

import (
	"encoding/json"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// This file and the other wire_*.go files hold the API's own response
// types. The store's rows never reach the wire: each type here is filled
// by a fromStore function, so a column can be renamed or a field added in
// coordinator/store without changing the contract, and the contract is
// documented field by field (doc and example tags land in the OpenAPI
// document).
//
// Durations are Go duration strings ("30m0s", "15s"; jobs.Duration) in
// every response; request bodies accept the same strings or a number of
// seconds. See docs/api.md, "Durations".

// Run is one run: a job on one device for one build.
type Run struct {
	ID        int64  `json:"id" doc:"Run id." example:"4812"`
	TriggerID int64  `json:"trigger_id,omitempty" doc:"Trigger that created the run (absent for runs created before triggers existed)." example:"977"`
	JobID     int64  `json:"job_id" doc:"Job snapshot (immutable spec) the run executes." example:"31"`
	Suite     string `json:"suite" doc:"Suite the job came from." example:"les-ladder"`
	Build     string `json:"build" doc:"Build id of the runtime under test." example:"ci-4812"`
	GitSHA    string `json:"git_sha" doc:"Git commit of the build, when the trigger gave it." example:"9813d69"`
	Lineage   string `json:"lineage" doc:"Build lineage (branch) of the build; regression series are kept per lineage." example:"main"`
	// Selector is the device selector the run was placed with.
	Selector       jobs.Selector `json:"device_selector" doc:"Device selector the run was placed with."`
	TargetDeviceID string        `json:"target_device_id,omitempty" doc:"Device the run is pinned to (fanout triggers)." example:"pixel8-a1"`
	DeviceID       string        `json:"device_id,omitempty" doc:"Device of the current or last attempt." example:"pixel8-a1"`
	State          string        `json:"state" enum:"queued,assigned,running,succeeded,failed,cancelled,infra_failed,build_failed" doc:"Run state; succeeded, failed, cancelled, infra_failed and build_failed (the build's own code crashed, broke the runner protocol or overran the RAM budget) are terminal." example:"running"`
	Priority       int           `json:"priority" doc:"Placement priority; higher runs first." example:"0"`
	Attempts       int           `json:"attempts" doc:"Attempts started so far." example:"1"`
	MaxAttempts    int           `json:"max_attempts" doc:"Attempts allowed before the run fails for good." example:"3"`
	RetryOnFailure bool          `json:"retry_on_failure" doc:"Whether a failed attempt (not only an infrastructure failure) is retried." example:"false"`
	Timeout        jobs.Duration `json:"timeout" doc:"Time an attempt may take once started, as a Go duration string." example:"30m0s"`
	Token          int64         `json:"token,omitempty" doc:"Fencing token of the current lease; absent when the run is not leased." example:"12"`
	LeaseExpiresAt *time.Time    `json:"lease_expires_at,omitempty" doc:"When the current lease runs out unless the agent renews it." example:"2026-12-01T14:05:00Z"`
	DeadlineAt     *time.Time    `json:"deadline_at,omitempty" doc:"When the current attempt times out." example:"2026-12-01T14:30:00Z"`
	Progress       float64       `json:"progress" minimum:"0" maximum:"1" doc:"Share of the run done, 0 to 1, as the agent reports it." example:"0.42"`
	// ProgressMessage is the agent's last progress note.
	ProgressMessage string     `json:"progress_message,omitempty" doc:"The agent's last progress note." example:"config 3/8: decode"`
	Error           string     `json:"error,omitempty" doc:"Why the run failed." example:"model download: 404"`
	CancelReason    string     `json:"cancel_reason,omitempty" doc:"Why the run was cancelled." example:"cancelled through the API"`
	CreatedAt       time.Time  `json:"created_at" doc:"When the run was created." example:"2026-12-01T14:00:00Z"`
	QueuedAt        time.Time  `json:"queued_at" doc:"When the run was last queued (creation or retry)." example:"2026-12-01T14:00:00Z"`
	AssignedAt      *time.Time `json:"assigned_at,omitempty" doc:"When the current attempt was assigned to a device." example:"2026-12-01T14:00:02Z"`
	StartedAt       *time.Time `json:"started_at,omitempty" doc:"When the current attempt started on the device." example:"2026-12-01T14:00:03Z"`
	FinishedAt      *time.Time `json:"finished_at,omitempty" doc:"When the run reached a terminal state." example:"2026-12-01T14:12:40Z"`
	UpdatedAt       time.Time  `json:"updated_at" doc:"When the run last changed." example:"2026-12-01T14:12:40Z"`
	// Provenance is which code produced the last attempt's result.
	Provenance *Provenance `json:"provenance,omitempty" doc:"Which code produced the last attempt's result; absent until a result is stored."`
	// WaitingReason says why a queued run waits.
	WaitingReason string `json:"waiting_reason,omitempty" doc:"Why a queued run waits, computed from the online devices' last hello: no device online, no online device can run it (its selector, pinned device or build platforms rule them out, with counts), or all that can are busy." example:"no online device can run it: build ci-4812 has no executable for linux/amd64 (has android/arm64) (3 device(s))"`
}

// Provenance is which code produced a run's result: the agent's report,
// checked at ingest against the build's registered executables.
type Provenance struct {
	Build            string `json:"build" doc:"Build id that ran." example:"ci-4812"`
	ExecutableSHA256 string `json:"executable_sha256" doc:"sha256 of the executable that ran; ingest rejects a result whose hash is not the build's for its platform." example:"419167b57b10ffd91e2143ab8a99593c53f3e46007cfc0fe6132e4fc815eacd7"`
	Platform         string `json:"platform" doc:"GOOS/GOARCH of that executable." example:"linux/arm64"`
	Embedded         bool   `json:"embedded,omitempty" doc:"True when the agent ran its embedded runtime in-process instead of a child process." example:"false"`
	RunnerRevision   string `json:"runner_revision,omitempty" doc:"VCS revision the runner reported in its hello (empty for a binary built without VCS stamping)." example:"9813d69c1f0e"`
	RunnerGoVersion  string `json:"runner_go_version,omitempty" doc:"Go version the runner was built with." example:"go1.25.4"`
	RunnerProtocol   int    `json:"runner_protocol,omitempty" doc:"Runner protocol version the child spoke." example:"1"`
	AgentBuild       string `json:"agent_build,omitempty" doc:"The agent's own build (module version and revision)." example:"v0.9.0 9813d69c1f0e"`
	PeakRSSBytes     int64  `json:"peak_rss_bytes,omitempty" doc:"Peak resident memory of the runner child, in bytes (0 for the embedded runtime)." example:"734003200"`
	StderrTail       string `json:"stderr_tail,omitempty" doc:"Last 4 KiB of the child's standard error, kept when the build failed." example:"panic: runtime error: index out of range"`
}

func provenanceFromProtocol(p *protocol.Provenance) *Provenance {
	if p == nil {
		return nil
	}
	return &Provenance{Build: p.Build, ExecutableSHA256: p.ExecutableSHA256, Platform: p.Platform, Embedded: p.Embedded,
		RunnerRevision: p.RunnerRevision, RunnerGoVersion: p.RunnerGoVersion, RunnerProtocol: p.RunnerProtocol,
		AgentBuild: p.AgentBuild, PeakRSSBytes: p.PeakRSSBytes, StderrTail: p.StderrTail}
}

// runFromStore converts a store row to its wire form.
func runFromStore(r *store.Run) Run {
	return Run{
		ID: r.ID, TriggerID: r.TriggerID, JobID: r.JobID, Suite: r.Suite, Build: r.Build, GitSHA: r.GitSHA, Lineage: r.Lineage,
		Selector: r.Selector, TargetDeviceID: r.TargetDeviceID, DeviceID: r.DeviceID, State: r.State, Priority: r.Priority,
		Attempts: r.Attempts, MaxAttempts: r.MaxAttempts, RetryOnFailure: r.RetryOnFailure, Timeout: jobs.Duration(r.Timeout),
		Token: r.Token, LeaseExpiresAt: r.LeaseExpiresAt, DeadlineAt: r.DeadlineAt, Progress: r.Progress,
		ProgressMessage: r.ProgressMessage, Error: r.Error, CancelReason: r.CancelReason, CreatedAt: r.CreatedAt,
		QueuedAt: r.QueuedAt, AssignedAt: r.AssignedAt, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, UpdatedAt: r.UpdatedAt,
		Provenance: provenanceFromProtocol(r.Provenance), WaitingReason: r.WaitingReason,
	}
}

// runsFromStore converts store rows; nil becomes [], so lists encode as [].
func runsFromStore(rs []store.Run) []Run {
	return mapSlice(rs, runFromStore)
}

// Trigger is one request that created runs.
type Trigger struct {
	ID        int64         `json:"id" doc:"Trigger id; follow its runs with GET /v1/runs/events?trigger=ID." example:"977"`
	Suite     string        `json:"suite" doc:"Suite that was triggered." example:"les-ladder"`
	JobID     int64         `json:"job_id" doc:"Job snapshot its runs execute." example:"31"`
	Build     string        `json:"build" doc:"Build id of the runs." example:"ci-4812"`
	GitSHA    string        `json:"git_sha" doc:"Git commit of the build, when given." example:"9813d69"`
	Lineage   string        `json:"lineage" doc:"Build lineage of the runs." example:"main"`
	Selector  jobs.Selector `json:"device_selector" doc:"Device selector the runs were placed with."`
	Fanout    bool          `json:"fanout" doc:"One run per matching device (true) or one run on the first free matching device." example:"false"`
	Source    string        `json:"source" doc:"Who triggered: api, cli, schedule:<id>, ..." example:"api"`
	CreatedAt time.Time     `json:"created_at" doc:"When the trigger was created." example:"2026-12-01T14:00:00Z"`
	RunIDs    []int64       `json:"run_ids" doc:"Ids of the runs it created." example:"[4812]"`
}

func triggerFromStore(t *store.Trigger) *Trigger {
	if t == nil {
		return nil
	}
	return &Trigger{ID: t.ID, Suite: t.Suite, JobID: t.JobID, Build: t.Build, GitSHA: t.GitSHA, Lineage: t.Lineage,
		Selector: t.Selector, Fanout: t.Fanout, Source: t.Source, CreatedAt: t.CreatedAt, RunIDs: nonNil(t.RunIDs)}
}

// Job is an immutable spec snapshot that runs were created from.
type Job struct {
	ID          int64     `json:"id" doc:"Job id." example:"31"`
	Name        string    `json:"name" doc:"The spec's name." example:"les-ladder"`
	Suite       string    `json:"suite" doc:"Suite the snapshot was taken from." example:"les-ladder"`
	Spec        jobs.Spec `json:"spec" doc:"The normalized job spec (defaults filled in); its durations are Go duration strings."`
	Fingerprint string    `json:"fingerprint" doc:"Hash of the canonical spec; equal specs share one job." example:"5b1f0c9e7a2d4c3b"`
	CreatedAt   time.Time `json:"created_at" doc:"When the snapshot was first stored." example:"2026-12-01T14:00:00Z"`
}

func jobFromStore(j *store.Job) *Job {
	if j == nil {
		return nil
	}
	return &Job{ID: j.ID, Name: j.Name, Suite: j.Suite, Spec: j.Spec, Fingerprint: j.Fingerprint, CreatedAt: j.CreatedAt}
}

// Stat is a summary statistic over a config's measured repetitions.
type Stat struct {
	Mean   float64 `json:"mean" doc:"Mean over the repetitions." example:"14.2"`
	Median float64 `json:"median" doc:"Median over the repetitions." example:"14.1"`
	Stddev float64 `json:"stddev" doc:"Sample standard deviation over the repetitions." example:"0.3"`
	CV     float64 `json:"cv,omitempty" doc:"Coefficient of variation, stddev ÷ mean." example:"0.021"`
	N      int     `json:"n,omitempty" doc:"Repetitions summarised." example:"5"`
}

func statFromStore(s store.Stat) Stat {
	return Stat{Mean: s.Mean, Median: s.Median, Stddev: s.Stddev, CV: s.CV, N: s.N}
}

// Result is the statistics of one config of one run.
type Result struct {
	RunID         int64           `json:"run_id" doc:"Run the result belongs to." example:"4812"`
	ConfigIndex   int             `json:"config_index" doc:"Index of the config in the run's expanded matrix." example:"0"`
	ConfigKey     string          `json:"config_key" doc:"Key of the config (mode, budget, profile, ...); series are kept per key." example:"mode=les,budget=25%"`
	Suite         string          `json:"suite" doc:"Suite of the run." example:"les-ladder"`
	Build         string          `json:"build" doc:"Build of the run." example:"ci-4812"`
	GitSHA        string          `json:"git_sha" doc:"Git commit of the build, when given." example:"9813d69"`
	DeviceID      string          `json:"device_id" doc:"Device that measured it." example:"pixel8-a1"`
	DeviceModel   string          `json:"device_model" doc:"Model of that device (emulated:<profile> for an emulated one)." example:"Pixel 8"`
	OSVersion     string          `json:"os_version" doc:"OS release of that device." example:"Android 14 (SDK 34)"`
	Emulated      bool            `json:"emulated" doc:"Whether the device was emulated by a host agent." example:"false"`
	DecodeTPS     Stat            `json:"decode_tps" doc:"Decode throughput, tokens per second."`
	PrefillTPS    Stat            `json:"prefill_tps" doc:"Prefill throughput, tokens per second."`
	TTFTms        Stat            `json:"ttft_ms" doc:"Time to first token, milliseconds."`
	PeakMemory    int64           `json:"peak_memory_bytes" doc:"Peak resident memory of the runtime, bytes." example:"1610612736"`
	HitRate       float64         `json:"hit_rate" doc:"Selected experts resident when demanded ÷ selected experts." example:"0.87"`
	Recall        float64         `json:"predictor_recall" doc:"Share of the demanded, not yet cached experts the predictor fetched in time." example:"0.64"`
	StallFraction float64         `json:"stall_fraction" doc:"Share of decode time spent waiting for expert reads." example:"0.12"`
	BytesPerToken float64         `json:"bytes_per_token" doc:"Expert bytes read per decoded token." example:"52428800"`
	Repetitions   int             `json:"repetitions" doc:"Measured repetitions." example:"5"`
	Warmup        int             `json:"warmup" doc:"Warm-up repetitions (not measured)." example:"1"`
	Valid         bool            `json:"valid" doc:"False when the measurement must not enter series (see invalid_reason)." example:"true"`
	InvalidReason string          `json:"invalid_reason,omitempty" doc:"Why the result is not valid." example:"thermal throttling"`
	Error         string          `json:"error,omitempty" doc:"Why the config failed on the device." example:"out of memory"`
	Stats         json.RawMessage `json:"stats" doc:"Every statistic the agent reported for the config, as a JSON object keyed by metric."`
	CreatedAt     time.Time       `json:"created_at" doc:"When the result was stored." example:"2026-12-01T14:12:40Z"`
}

func resultFromStore(r *store.Result) Result {
	return Result{
		RunID: r.RunID, ConfigIndex: r.ConfigIndex, ConfigKey: r.ConfigKey, Suite: r.Suite, Build: r.Build, GitSHA: r.GitSHA,
		DeviceID: r.DeviceID, DeviceModel: r.DeviceModel, OSVersion: r.OSVersion, Emulated: r.Emulated,
		DecodeTPS: statFromStore(r.DecodeTPS), PrefillTPS: statFromStore(r.PrefillTPS), TTFTms: statFromStore(r.TTFTms),
		PeakMemory: r.PeakMemory, HitRate: r.HitRate, Recall: r.Recall, StallFraction: r.StallFraction, BytesPerToken: r.BytesPerToken,
		Repetitions: r.Repetitions, Warmup: r.Warmup, Valid: r.Valid, InvalidReason: r.InvalidReason, Error: r.Error,
		Stats: r.Stats, CreatedAt: r.CreatedAt,
	}
}

// RunDetail is a run with its job snapshot and per-config results.
type RunDetail struct {
	Run
	Job     *Job     `json:"job,omitempty" doc:"The job snapshot the run executes."`
	Results []Result `json:"results" doc:"Per-config results, in config order."`
	// Telemetry is the current attempt's telemetry accounting
	// (wire_telemetry.go).
	Telemetry *RunTelemetry `json:"telemetry,omitempty" doc:"Telemetry the current attempt's agent sent and the coordinator stored; absent for a run never leased."`
	ABID      int64         `json:"ab_id,omitempty" doc:"The A/B comparison the run is a side of (GET /v1/ab/{id}): a gate's (lesfarm run --baseline) or a bisection step's; absent for other runs." example:"12"`
}

// RunSet is a trigger with its runs.
type RunSet struct {
	Trigger *Trigger `json:"trigger" doc:"The trigger that created the runs."`
	Runs    []Run    `json:"runs" doc:"Its runs, as created or (with wait=true) as they ended."`
	Done    bool     `json:"done" doc:"True when every run is in a terminal state." example:"false"`
}

// mapSlice converts every element of in with f; nil becomes an empty
// slice, so lists encode as [].
func mapSlice[S, T any](in []S, f func(*S) T) []T {
	out := make([]T, len(in))
	for i := range in {
		out[i] = f(&in[i])
	}
	return out
}

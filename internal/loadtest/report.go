package loadtest

import (
	"encoding/json"
	"math"
	"slices"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// Latency summarises latencies in milliseconds.
type Latency struct {
	N     int     `json:"n"`
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
}

// CoordinatorStats are one coordinator's process figures over the load
// window, from its /metrics.
type CoordinatorStats struct {
	MetricsURL string `json:"metrics_url"`
	// RSSMaxBytes is the largest resident set seen; CPUCores the CPU time
	// used per wall second (1.0 = one core busy).
	RSSMaxBytes      int64   `json:"rss_max_bytes"`
	CPUCores         float64 `json:"cpu_cores"`
	SamplesCommitted int64   `json:"samples_committed"`
	// IngestWorkers is how many telemetry workers were, on average over
	// the window, in each phase (fetch: waiting for messages, decode,
	// commit: the transaction, ack): the phase the workers pile up in
	// bounds ingest.
	IngestWorkers map[string]float64 `json:"ingest_workers,omitempty"`
	// MemoryAtRSSMax breaks the resident set down at its largest sample
	// (nil when the coordinator exports no Go runtime figures).
	MemoryAtRSSMax *MemoryBreakdown `json:"memory_at_rss_max,omitempty"`
}

// Report is what a load run measured. Lost and duplicated samples are
// counted against what the agents sent (acknowledged by JetStream); OK
// says whether both, and duplicated assignments, are zero.
type Report struct {
	Session   string     `json:"session"`
	Agents    int        `json:"agents"`
	DurationS float64    `json:"duration_s"`
	LoadAvg   [3]float64 `json:"load_avg"` // 1, 5, 15 min, at the end of the window
	// Runs is how many runs were triggered; Assignments how many were
	// accepted by agents within the window.
	Runs            int     `json:"runs"`
	Assignments     int     `json:"assignments"`
	AssignmentsPerS float64 `json:"assignments_per_s"`
	// TriggerToAssign: from just before a run's trigger call to its
	// assignment's arrival at an idle agent. ResultToNext: from an
	// agent's result publish to its next assignment's arrival.
	TriggerToAssign Latency `json:"trigger_to_assign"`
	ResultToNext    Latency `json:"result_to_next"`
	// SamplesPerBatch and Layers describe the telemetry; BatchBytes is the
	// size of one telemetry message.
	SamplesPerBatch int `json:"samples_per_batch"`
	Layers          int `json:"layers"`
	BatchBytes      int `json:"batch_bytes"`
	// SamplesSent counts samples acknowledged by JetStream, SamplesStored
	// the rows in Postgres for the session's runs.
	SamplesSent   int64 `json:"samples_sent"`
	SamplesStored int64 `json:"samples_stored"`
	// SentPerS and IngestedPerS are samples per second within the window
	// (IngestedPerS from the coordinators' committed-sample counters,
	// committed within the window: what is still in JetStream at its end
	// is committed during the drain and not counted here).
	SentPerS     float64 `json:"samples_sent_per_s"`
	IngestedPerS float64 `json:"samples_ingested_per_s"`
	// SteadySentPerS and SteadyIngestedPerS are the same rates over the
	// window's second half, past the fan-out onto the idle fleet and the
	// first batches: the rates the farm sustains.
	SteadySentPerS     float64 `json:"samples_sent_steady_per_s"`
	SteadyIngestedPerS float64 `json:"samples_ingested_steady_per_s"`
	// BacklogIngestedPerS is the committed rate over the scrape intervals
	// (window and drain) that began and ended with a backlog (fewer
	// samples committed than sent): the ingest's capacity, since its
	// workers never lacked work then. BacklogS is how long those intervals
	// lasted (0: ingest kept up, and capacity was not reached).
	BacklogIngestedPerS float64 `json:"samples_ingested_backlog_per_s"`
	BacklogS            float64 `json:"backlog_s"`
	// IngestLag is how far, in time, the committed samples trailed the
	// sent ones (sampled every ScrapeInterval in the window); DrainS is
	// how long after the last sample was sent the last one was stored.
	IngestLagP50S float64            `json:"ingest_lag_p50_s"`
	IngestLagMaxS float64            `json:"ingest_lag_max_s"`
	DrainS        float64            `json:"drain_s"`
	Coordinators  []CoordinatorStats `json:"coordinators,omitempty"`
	// LoadgenCPUCores is this process's CPU per wall second (in process
	// with a coordinator it includes the coordinator).
	LoadgenCPUCores float64 `json:"loadgen_cpu_cores"`
	// DatabaseCPUCores is the database's CPU per wall second, when
	// Config.DatabaseCPU reads it (the local PostgreSQL of the embedded
	// mode).
	DatabaseCPUCores float64 `json:"database_cpu_cores,omitempty"`

	// LostSamples and DuplicatedSamples compare each succeeded run's
	// stored rows with what the attempt that completed it sent.
	LostSamples       int64 `json:"lost_samples"`
	DuplicatedSamples int64 `json:"duplicated_samples"`
	// DuplicatedAssignments counts runs granted more than once; the
	// earlier attempts' samples (SupersededSamples, sent by
	// SupersededAttempts) are fenced out by design, not lost.
	DuplicatedAssignments int   `json:"duplicated_assignments"`
	SupersededAttempts    int   `json:"superseded_attempts"`
	SupersededSamples     int64 `json:"superseded_samples"`
	// FailedRuns ended in another state than succeeded; UnfinishedRuns
	// were still queued or active at the drain bound (a throughput
	// bound, not a loss), having sent UnfinishedSamples.
	FailedRuns        int   `json:"failed_runs"`
	UnfinishedRuns    int   `json:"unfinished_runs"`
	UnfinishedSamples int64 `json:"unfinished_samples"`
	PublishRetries    int64 `json:"publish_retries"`
	HeartbeatErrors   int64 `json:"heartbeat_errors"`
	Cancelled         int64 `json:"cancelled"`
	// Reconnects counts the agents' NATS reconnections (to another node
	// of a cluster, or the same server back).
	Reconnects int64 `json:"reconnects"`
}

// OK reports whether nothing was lost or duplicated, every run succeeded
// within the drain bound, and none was granted twice (a simulated agent
// never fails, so a second grant is the coordinator's doing).
func (r *Report) OK() bool {
	return r.LostSamples == 0 && r.DuplicatedSamples == 0 && r.DuplicatedAssignments == 0 && r.FailedRuns == 0 && r.UnfinishedRuns == 0
}

// JSON returns the report as indented JSON.
func (r *Report) JSON() []byte {
	b, _ := json.MarshalIndent(r, "", "  ")
	return append(b, '\n')
}

// attempt is one grant of a run: the run and its fencing token.
type attempt struct{ run, token int64 }

// runEnd is a run's state when the load test ends.
type runEnd struct {
	state    string
	token    int64
	attempts int
}

// settled reports whether every run is terminal and every succeeded run
// stores at least what its current attempt sent.
func settled(sent map[attempt]int64, ends map[int64]runEnd, stored map[int64]int64) bool {
	for id, e := range ends {
		if !store.TerminalState(e.state) {
			return false
		}
		if e.state == store.RunSucceeded && stored[id] < sent[attempt{id, e.token}] {
			return false
		}
	}
	return true
}

// tallied are the load's samples and runs at the end, against what the
// agents sent.
type tallied struct {
	stored, lost, dup int64
	// superseded attempts are those of a run granted again (their lease
	// expired or their assignment was not acknowledged in time): their
	// samples are fenced out or deleted by design, not lost.
	superseded        int
	supersededSamples int64
	// unfinished runs were still queued or active at the drain bound (a
	// throughput bound), or succeeded with samples not stored yet (still
	// in the stream): their samples are counted here, not as lost. Loss
	// is only told once everything settled.
	unfinished        int
	unfinishedSamples int64
	failed            int // terminal but not succeeded
	reassigned        int // runs granted more than once
}

// tally compares, run by run, what the attempt that completed a
// succeeded run sent (the run's final token) with what is stored: fewer
// rows lost samples, more (or rows without a reporting attempt)
// duplicated them. agentSaw are runs an agent received after another.
// Unless the load settled (every run terminal and stored, see settled),
// missing rows may still be in flight and count as unfinished.
func tally(sent map[attempt]int64, ends map[int64]runEnd, stored map[int64]int64, agentSaw map[int64]bool, settled bool) tallied {
	var t tallied
	byRun := map[int64][]attempt{}
	for a := range sent {
		byRun[a.run] = append(byRun[a.run], a)
	}
	for id, e := range ends {
		got := stored[id]
		t.stored += got
		if e.attempts > 1 || agentSaw[id] {
			t.reassigned++
		}
		switch {
		case !store.TerminalState(e.state):
			t.unfinished++
			for _, a := range byRun[id] {
				t.unfinishedSamples += sent[a]
			}
			continue
		case e.state != store.RunSucceeded:
			t.failed++
		default:
			want := sent[attempt{id, e.token}]
			switch {
			case got < want && !settled:
				t.unfinished++
				t.unfinishedSamples += want - got
			case got < want:
				t.lost += want - got
			default:
				t.dup += got - want
			}
		}
		for _, a := range byRun[id] {
			if a.token != e.token || e.state != store.RunSucceeded {
				t.superseded++
				t.supersededSamples += sent[a]
			}
		}
	}
	return t
}

// summarize gives the count, median, p99 and maximum of ds in ms.
func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	ms := func(d time.Duration) float64 { return math.Round(float64(d.Microseconds())/10) / 100 }
	return Latency{N: len(s), P50MS: ms(pct(s, 0.50)), P99MS: ms(pct(s, 0.99)), MaxMS: ms(s[len(s)-1])}
}

// pct is the p-quantile of sorted s (nearest rank).
func pct[T any](s []T, p float64) T {
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

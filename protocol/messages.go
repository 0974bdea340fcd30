package protocol

import (
	"encoding/json"
	"time"

	"github.com/lesfarm/lesfarm/jobs"
)

// Size limits of each message type, in bytes of JSON. NATS' default
// max_payload is 1 MiB; the larger limits stay below it.
const (
	MaxHelloBytes          = 64 << 10
	MaxHelloReplyBytes     = 16 << 10
	MaxHeartbeatBytes      = 64 << 10
	MaxHeartbeatReplyBytes = 64 << 10
	MaxAssignmentBytes     = 1000 << 10
	MaxAssignReplyBytes    = 8 << 10
	MaxCancelBytes         = 8 << 10
	MaxCancelReplyBytes    = 8 << 10
	MaxTelemetryBytes      = 1000 << 10
	MaxResultBytes         = 512 << 10
)

// Count limits inside messages.
const (
	MaxSamplesPerBatch = 4096
	MaxLayers          = 512
	MaxRunsPerDevice   = 16
	MaxConfigsInResult = jobs.MaxConfigs
	MaxLabels          = jobs.MaxLabels
	MaxTextLen         = 1024 // free-text fields such as reasons and errors
)

// Hello is the first request of an agent (and the one it repeats after a
// reconnect or when a heartbeat reply says the coordinator does not know it).
type Hello struct {
	V           int               `json:"v"`
	DeviceID    string            `json:"device_id"`
	Fingerprint Fingerprint       `json:"fingerprint"`
	Labels      map[string]string `json:"labels,omitempty"`
	// Runs are the runs the agent is still working on (after a reconnect),
	// so the coordinator can keep or cancel their leases.
	Runs []RunStatus `json:"runs,omitempty"`
	// SentAt is the agent's clock when sending.
	SentAt time.Time `json:"sent_at"`
	// Session is random per agent process (at most MaxSession bytes).
	// One agent per device id: the newest hello takes the device over and
	// the coordinator fences every other session (HeartbeatReply.
	// Superseded, Assignment.Session). Empty: an agent from before
	// sessions, never fenced.
	Session string `json:"session,omitempty"`
}

// MaxSession bounds Hello.Session and Heartbeat.Session.
const MaxSession = 64

// HelloReply answers a Hello. The coordinator chooses the heartbeat TTL: the
// agent heartbeats every HeartbeatIntervalMS and, when it has not reached the
// coordinator for TTLMS, stops local work (its leases are gone).
type HelloReply struct {
	V        int    `json:"v"`
	DeviceID string `json:"device_id"`
	// Accepted is false when the coordinator refuses the device (e.g. bad
	// fingerprint, drained); Reason says why.
	Accepted            bool   `json:"accepted"`
	Reason              string `json:"reason,omitempty"`
	TTLMS               int64  `json:"ttl_ms"`
	HeartbeatIntervalMS int64  `json:"heartbeat_interval_ms"`
	// SigningKey is the coordinator's ed25519 public key (base64 in JSON)
	// that signs assignments.
	SigningKey []byte `json:"signing_key,omitempty"`
	// Cancel lists runs from Hello.Runs whose leases are gone: stop them and
	// do not report them.
	Cancel     []CancelNotice `json:"cancel,omitempty"`
	ServerTime time.Time      `json:"server_time"`
}

// TTL returns TTLMS as a duration.
func (r *HelloReply) TTL() time.Duration { return time.Duration(r.TTLMS) * time.Millisecond }

// HeartbeatInterval returns HeartbeatIntervalMS as a duration.
func (r *HelloReply) HeartbeatInterval() time.Duration {
	return time.Duration(r.HeartbeatIntervalMS) * time.Millisecond
}

// Run states an agent reports in RunStatus.
const (
	RunStateAccepted    = "accepted"    // acked, preparing (artifact download)
	RunStateDownloading = "downloading" // fetching the model
	RunStateRunning     = "running"
	RunStateFinishing   = "finishing" // result being sent
)

// RunStatus is an agent's view of one run it holds.
type RunStatus struct {
	RunID int64  `json:"run_id"`
	Token int64  `json:"token"`
	State string `json:"state"`
	// Progress is 0..1 over the whole run, when known.
	Progress float64 `json:"progress,omitempty"`
	Message  string  `json:"message,omitempty"`
}

// Heartbeat renews the device's liveness and the leases of its runs.
type Heartbeat struct {
	V        int          `json:"v"`
	DeviceID string       `json:"device_id"`
	Seq      uint64       `json:"seq"`
	Runs     []RunStatus  `json:"runs,omitempty"`
	State    *DeviceState `json:"state,omitempty"`
	SentAt   time.Time    `json:"sent_at"`
	// Session is the agent's Hello.Session.
	Session string `json:"session,omitempty"`
	// FreeStorageBytes is the room for artifacts (as in
	// Fingerprint.FreeStorageBytes), sent while the agent is short of
	// storage: from a refusal or abort for lack of space until a heartbeat
	// has reported the room back. The coordinator updates the device's
	// fingerprint with it, so it assigns no larger model meanwhile (issue
	// 29, finding 10). Absent otherwise.
	FreeStorageBytes *int64 `json:"free_storage_bytes,omitempty"`
}

// LeaseRenewal says a run's lease now lasts until ExpiresAt.
type LeaseRenewal struct {
	RunID     int64     `json:"run_id"`
	Token     int64     `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// CancelNotice tells the agent to stop a run.
type CancelNotice struct {
	RunID  int64  `json:"run_id"`
	Token  int64  `json:"token"`
	Reason string `json:"reason,omitempty"`
}

// HeartbeatReply renews leases and carries cancels the agent may have missed.
type HeartbeatReply struct {
	V     int   `json:"v"`
	TTLMS int64 `json:"ttl_ms"`
	// Renewed lists the leases renewed by this heartbeat.
	Renewed []LeaseRenewal `json:"renewed,omitempty"`
	// Cancel lists runs the agent must stop (cancelled, timed out, or whose
	// lease is no longer the agent's).
	Cancel []CancelNotice `json:"cancel,omitempty"`
	// Rehello is true when the coordinator does not know the device (e.g.
	// after it was marked lost): the agent sends Hello again.
	Rehello    bool      `json:"rehello,omitempty"`
	ServerTime time.Time `json:"server_time"`
	// Superseded, when set, says why this agent no longer speaks for the
	// device: another agent with the same device id said hello since. The
	// agent stops its work and exits instead of saying hello again.
	Superseded string `json:"superseded,omitempty"`
}

// TTL returns TTLMS as a duration.
func (r *HeartbeatReply) TTL() time.Duration { return time.Duration(r.TTLMS) * time.Millisecond }

// Artifact says where the agent gets the model and how to check it. URL is
// empty when the spec names a local path (Spec.Model.Path) on the device.
type Artifact struct {
	URL    string `json:"url,omitempty"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	Name   string `json:"name,omitempty"`
}

// Limits of ModelFacts.
const (
	MaxTensorTypes  = 64
	MaxArchitecture = 64
	// MaxRecurrentDim bounds every RecurrentFacts field, so the state
	// size computed from them cannot overflow.
	MaxRecurrentDim = 1 << 16
)

// ModelFacts describes a GGUF model file from its header alone: what an
// agent needs to know to decide whether it can run the model. Byte counts
// are tensor data bytes. The coordinator records them per artifact
// (coordinator/artifact.ReadModelFacts) and copies them into assignments.
type ModelFacts struct {
	// Architecture is general.architecture (e.g. qwen3moe).
	Architecture string `json:"architecture" maxLength:"64" doc:"GGUF general.architecture, e.g. qwen3moe."`
	// MoE is true for a mixture-of-experts model (expert tensors or an
	// expert count in the metadata).
	MoE bool `json:"moe" doc:"Whether the model is a mixture of experts."`
	// ExpertCount and ExpertsUsed are <arch>.expert_count and
	// <arch>.expert_used_count (0 when absent).
	ExpertCount int `json:"expert_count,omitempty" doc:"Experts per MoE layer (<arch>.expert_count)."`
	ExpertsUsed int `json:"expert_used_count,omitempty" doc:"Experts routed per token (<arch>.expert_used_count)."`
	// TensorTypes are the ggml type names present (e.g. F32, Q4_K), sorted.
	TensorTypes []string `json:"tensor_types" maxItems:"64" doc:"ggml tensor types present, e.g. F32, Q4_K."`
	// Tensors is the number of tensors.
	Tensors int `json:"tensors" doc:"Number of tensors in the file."`
	// TotalBytes is the sum of all tensors' data bytes; ExpertBytes the
	// routed experts' part (blk.N.ffn_*_exps and, in packed files,
	// blk.N.ffn_*.E); ResidentBytes the rest (TotalBytes - ExpertBytes),
	// which a streaming mode keeps in RAM.
	TotalBytes    int64 `json:"total_bytes" doc:"Bytes of all tensor data."`
	ExpertBytes   int64 `json:"expert_bytes" doc:"Bytes of routed-expert tensors (streamable)."`
	ResidentBytes int64 `json:"resident_bytes" doc:"Bytes of non-expert tensors (always resident)."`
	// Packed is true for a file written by lesfarm pack (les.pack.* keys).
	Packed bool `json:"packed" doc:"Written by lesfarm pack (les.pack.* metadata present)."`
	// ContextLength is <arch>.context_length, the most positions the model
	// was trained for (0 when absent): a spec whose prompt and decode
	// tokens cannot fit is refused at trigger time.
	ContextLength int `json:"context_length,omitempty" doc:"Context length the model was trained for (<arch>.context_length); absent when unknown."`
	// Recurrent is the recurrent-state geometry of a hybrid model
	// (qwen35moe's Gated DeltaNet layers), from which the agent sizes the
	// per-sequence state it must hold beside the weights; nil for models
	// with attention layers only.
	Recurrent *RecurrentFacts `json:"recurrent,omitempty" doc:"Recurrent (DeltaNet) state geometry of a hybrid model; absent for attention-only models."`
}

// RecurrentFacts is the geometry of a hybrid model's recurrent layers, as
// GGUF metadata gives it (qwen35moe: ssm.* keys and the layer pattern of
// full_attention_interval). Each recurrent layer keeps, per sequence, a
// conv window of (ConvKernel-1) × ConvChannels values and Heads state
// matrices of StateSize × StateSize values.
type RecurrentFacts struct {
	Layers       int `json:"layers" doc:"Recurrent (DeltaNet) layers."`
	ConvKernel   int `json:"conv_kernel" doc:"Causal conv width (ssm.conv_kernel)."`
	ConvChannels int `json:"conv_channels" doc:"Conv channels: 2 x k-heads x state size + v-heads x state size."`
	Heads        int `json:"heads" doc:"Recurrent state heads (ssm.time_step_rank, the v-heads)."`
	StateSize    int `json:"state_size" doc:"Head width of the recurrent state (ssm.state_size)."`
}

// Assignment gives a run to a device. It travels signed, as a
// SignedAssignment.
type Assignment struct {
	V        int    `json:"v"`
	RunID    int64  `json:"run_id"`
	Token    int64  `json:"token"` // fencing token of the lease
	Attempt  int    `json:"attempt"`
	DeviceID string `json:"device_id"`
	// Session is the agent session the device belongs to (Hello.Session);
	// an agent of another session ignores the assignment. Empty: any.
	Session string `json:"session,omitempty"`
	JobID   int64  `json:"job_id"`
	Suite   string `json:"suite"`
	Build   string `json:"build,omitempty"`
	GitSHA  string `json:"git_sha,omitempty"`
	// Spec is the job spec with any trigger override applied.
	Spec jobs.Spec `json:"spec"`
	// Configs is Spec.Expand(), sent so both sides agree on indices and keys.
	Configs  []jobs.Config `json:"configs"`
	Artifact Artifact      `json:"artifact"`
	// Executable is the build's executable for the device's platform
	// (builds.go): the agent runs it as a child process (`EXE runner`).
	// Nil when the build has none for the device, which then runs its
	// embedded runtime (Build is empty or the device's EmbeddedBuild).
	// It is inside the signed bytes.
	Executable *Executable `json:"executable,omitempty"`
	// Model holds facts about the model file read from its GGUF header
	// when the coordinator stored it, so the agent can refuse work it
	// cannot run before downloading anything. Nil when unknown (a model
	// given by URL or path, a non-GGUF artifact, an older coordinator);
	// older agents ignore it. It is inside the signed bytes.
	Model *ModelFacts `json:"model,omitempty"`
	// LeaseExpiresAt is when the lease ends unless renewed by heartbeats.
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	// Deadline is the run's timeout: past it the coordinator fails the run.
	// It is on the coordinator's clock (Postgres's, in fact), which the
	// device's clock may not match: agents use DeadlineInMS.
	Deadline time.Time `json:"deadline"`
	IssuedAt time.Time `json:"issued_at"`
	// DeadlineInMS is how long after IssuedAt the deadline falls, as the
	// coordinator measured it: the agent counts it from when it receives
	// the assignment, so a device clock minutes off neither aborts the run
	// early nor lets it overrun. Zero from older coordinators (agents
	// then correct Deadline by the clock offset of ServerTime).
	DeadlineInMS int64 `json:"deadline_in_ms,omitempty"`
}

// SignedAssignment is what travels on the assign subject: the Assignment's
// exact JSON bytes and an ed25519 signature over them.
type SignedAssignment struct {
	V          int             `json:"v"`
	Assignment json.RawMessage `json:"assignment"`
	Signature  []byte          `json:"sig"`
}

// Refusal codes of an AssignReply.
const (
	RefuseBadSignature    = "bad_signature"
	RefuseMalformed       = "malformed"
	RefuseUnsupported     = "unsupported"      // model or mode the agent cannot run
	RefuseInsufficientRAM = "insufficient_ram" // the job needs more memory than the device has
	RefuseBusy            = "busy"             // the agent already runs something
	RefuseShuttingDown    = "shutting_down"
	RefuseWrongDevice     = "wrong_device"
	RefuseWrongBuild      = "wrong_build" // the agent cannot run the assignment's build
)

// AssignReply acknowledges (Accepted) or refuses an assignment.
type AssignReply struct {
	V        int    `json:"v"`
	RunID    int64  `json:"run_id"`
	Token    int64  `json:"token"`
	Accepted bool   `json:"accepted"`
	Code     string `json:"code,omitempty"` // a Refuse* code when refused
	Reason   string `json:"reason,omitempty"`
}

// Cancel asks an agent to stop a run.
type Cancel struct {
	V      int    `json:"v"`
	RunID  int64  `json:"run_id"`
	Token  int64  `json:"token"`
	Reason string `json:"reason,omitempty"`
}

// CancelReply acknowledges a Cancel. Known is false when the agent was not
// running that run (it may have finished already).
type CancelReply struct {
	V     int   `json:"v"`
	RunID int64 `json:"run_id"`
	Known bool  `json:"known"`
}

// Phases of a Sample, as in runtime/trace.
const (
	PhasePrefill = "prefill"
	PhaseDecode  = "decode"
	PhaseVerify  = "verify"
)

// LayerCounts are one step's per-layer expert counts, one entry per layer
// (all slices of a Sample have the same length).
type LayerCounts struct {
	Hits           []int32 `json:"hit"`
	Misses         []int32 `json:"miss"`
	PrefetchUsed   []int32 `json:"pf_used"`
	PrefetchWasted []int32 `json:"pf_wasted"`
}

// Sample is one forward step of the runtime (trace.TokenEvent plus its
// layers' counts).
type Sample struct {
	ConfigIndex int    `json:"cfg"`
	Repetition  int    `json:"rep"` // -1.. for warm-up repetitions, 0.. measured
	Step        int    `json:"step"`
	Phase       string `json:"phase"`
	Pos         int    `json:"pos"`
	Tokens      int    `json:"tokens"`
	DurationNS  int64  `json:"dur_ns"`
	StallNS     int64  `json:"stall_ns"`
	BytesRead   int64  `json:"bytes_read"`
	CacheBytes  int64  `json:"cache_bytes"`
	// Layers may be nil when per-layer detail was dropped.
	Layers *LayerCounts `json:"layers,omitempty"`
}

// Progress is an optional progress note in a telemetry batch (artifact
// download, config started, ...).
type Progress struct {
	Phase   string `json:"phase"`
	Done    int64  `json:"done,omitempty"`
	Total   int64  `json:"total,omitempty"`
	Message string `json:"message,omitempty"`
}

// TelemetryBatch carries per-token samples of one run. Seq numbers the
// batches of a run attempt from 0 without gaps; (run, seq, sample index) is
// unique, so a redelivered batch is stored once.
//
// On the wire the samples travel column by column (see columns.go), which
// decodes several times faster than an array of objects; the Go API is
// the Samples slice.
type TelemetryBatch struct {
	V        int      `json:"v"`
	RunID    int64    `json:"run_id"`
	Token    int64    `json:"token"`
	DeviceID string   `json:"device_id"`
	Seq      uint64   `json:"seq"`
	Samples  []Sample `json:"samples"`
	// Dropped counts detail the agent dropped (bounded buffer full) since the
	// previous batch.
	Dropped  uint64    `json:"dropped,omitempty"`
	Progress *Progress `json:"progress,omitempty"`
	// Experts are per-expert load counts (experts.go), carried by some
	// batches only: each covers the measured decode steps since the
	// previous batch that carried them. Older peers ignore them.
	Experts []ExpertLoad `json:"-"`
	SentAt  time.Time    `json:"sent_at"`
}

// Stat summarises one metric over the measured repetitions.
type Stat struct {
	N      int     `json:"n"`
	Mean   float64 `json:"mean"`
	Median float64 `json:"median"`
	Stddev float64 `json:"stddev"`
	// CV is Stddev/Mean (0 when Mean is 0).
	CV  float64 `json:"cv"`
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

// ConfigResult holds the statistics of one config of a run.
type ConfigResult struct {
	ConfigIndex int    `json:"config_index"`
	ConfigKey   string `json:"config_key"`
	// DecodeTPS and PrefillTPS are tokens per second; TTFTMS is the time to
	// first token in milliseconds.
	DecodeTPS  Stat `json:"decode_tps"`
	PrefillTPS Stat `json:"prefill_tps"`
	TTFTMS     Stat `json:"ttft_ms"`
	// PeakMemoryBytes is the largest resident memory seen.
	PeakMemoryBytes int64 `json:"peak_memory_bytes"`
	// The LES metrics are les.Result's (runtime/les/result.go defines each
	// one), all over the decode phase: HitRate is Σ hits / Σ demanded
	// experts; PredictorPrecision and PredictorRecall are Σ |predicted ∩
	// demanded| over Σ |predicted| and Σ |demanded| (lookahead modes);
	// StallFraction is Σ stall / Σ decode time; BytesPerToken is expert
	// bytes read / decoded tokens.
	HitRate            float64 `json:"hit_rate"`
	PredictorPrecision float64 `json:"predictor_precision"`
	PredictorRecall    float64 `json:"predictor_recall"`
	StallFraction      float64 `json:"stall_fraction"`
	BytesPerToken      float64 `json:"bytes_per_token"`
	// Repetitions is the measured repetitions the statistics use;
	// DiscardedRepetitions how many more were dropped as outliers (the
	// agent's --discard-outliers rule, les.MeasureOptions).
	Repetitions          int `json:"repetitions"`
	DiscardedRepetitions int `json:"discarded_repetitions,omitempty"`
	Warmup               int `json:"warmup"`
	// Valid is false when the measurement must not be trusted (e.g. thermal
	// gate timed out, too few repetitions); InvalidReason says why.
	Valid         bool   `json:"valid"`
	InvalidReason string `json:"invalid_reason,omitempty"`
	// Error is set when the config failed; its statistics are then empty.
	Error string `json:"error,omitempty"`
	// Extra holds further named metrics (thermal start/end, ...).
	Extra map[string]float64 `json:"extra,omitempty"`
	// TokensSHA256 is the sha256 of the generated token ids of the first
	// measured repetition (little-endian int32s), when the runner records
	// it: the same build, model, config and seed give the same digest in
	// the embedded and the child path.
	TokensSHA256 string `json:"tokens_sha256,omitempty"`
	// PhoneState is the state of a real phone around the config (an agent
	// driving phones over adb, protocol/phone.go); absent elsewhere.
	PhoneState *PhoneState `json:"phone_state,omitempty"`
}

// Result outcomes.
const (
	OutcomeSucceeded = "succeeded" // every config ran (some may be invalid)
	OutcomeFailed    = "failed"    // the run failed (Error says why)
	OutcomeCancelled = "cancelled" // the agent stopped on a cancel
	// OutcomeAborted: the agent stopped the run for its own reasons (it is
	// shutting down); the run is not at fault, so the coordinator requeues
	// it as an infrastructure failure while attempts remain.
	OutcomeAborted = "aborted"
	// OutcomeBuildFailed: the build's executable crashed, hung, printed
	// malformed runner output, spoke another runner protocol or overran
	// the RAM budget. It is the build's failure, not the farm's: never
	// retried (Error says why, Provenance.StderrTail keeps the end of its
	// stderr).
	OutcomeBuildFailed = "build_failed"
)

// Result is the final report of a run attempt, sent once to RESULTS.
type Result struct {
	V        int            `json:"v"`
	RunID    int64          `json:"run_id"`
	Token    int64          `json:"token"`
	DeviceID string         `json:"device_id"`
	Outcome  string         `json:"outcome"`
	Error    string         `json:"error,omitempty"`
	Configs  []ConfigResult `json:"configs,omitempty"`
	// TelemetryBatches and TelemetrySamples are how many batches and samples
	// the agent produced for this attempt (sent or dropped), for
	// completeness checks.
	TelemetryBatches uint64 `json:"telemetry_batches"`
	TelemetrySamples uint64 `json:"telemetry_samples"`
	TelemetryDropped uint64 `json:"telemetry_dropped,omitempty"`
	// Provenance says which code produced the result (builds.go); nil
	// from agents older than builds under test.
	Provenance *Provenance `json:"provenance,omitempty"`
	StartedAt  time.Time   `json:"started_at"`
	FinishedAt time.Time   `json:"finished_at"`
}

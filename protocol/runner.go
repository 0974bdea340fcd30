package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/lesfarm/lesfarm/jobs"
)

// The runner protocol is how an agent runs a build's executable as a child
// process, `EXE runner` (docs/protocol.md, "Runner protocol"):
//
//  1. the runner writes a hello line on stdout (RunnerLine, T "hello")
//     before it reads anything;
//  2. the agent checks the hello's version (CheckRunnerProtocol) and writes
//     one RunnerJob as a JSON document on the runner's stdin, then closes
//     it;
//  3. the runner writes JSON lines (RunnerLine) on stdout: config, pos and
//     step lines while it runs, one result line per config, and done;
//  4. the runner exits with RunnerExitOK after done, or RunnerExitFailed
//     (after an error line when it can write one).
//
// Compatibility: the agent speaks every runner protocol version from 1 to
// RunnerProtocolVersion and answers a runner in the runner's own version
// (RunnerJob.Protocol is the hello's), so an agent still runs older builds.

// RunnerProtocolVersion is the newest runner protocol this build speaks,
// as a runner (its hello) and as an agent (the versions it accepts are 1 to
// RunnerProtocolVersion).
const RunnerProtocolVersion = 1

// Limits of the runner protocol.
const (
	// MaxRunnerLineBytes bounds one line of a runner's output, newline
	// excluded; a longer line is malformed output.
	MaxRunnerLineBytes = 1 << 20
	// MaxRunnerJobBytes bounds the RunnerJob document.
	MaxRunnerJobBytes = 4 << 20
	// MaxRunnerLayerEvents bounds the layer events of one step line.
	MaxRunnerLayerEvents = 4 * MaxLayers
)

// Exit codes of `EXE runner`.
const (
	// RunnerExitOK: the done line was written after every config's result.
	RunnerExitOK = 0
	// RunnerExitFailed: the runner could not run the job (an error line
	// says why when it could be written) or was interrupted.
	RunnerExitFailed = 1
	// RunnerExitUsage: the command line was wrong (as every lesfarm
	// command).
	RunnerExitUsage = 2
)

// Types of runner output lines (RunnerLine.T).
const (
	RunnerHello    = "hello"
	RunnerProgress = "progress"
	RunnerConfig   = "config"
	RunnerPos      = "pos"
	RunnerStep     = "step"
	RunnerResult   = "result"
	RunnerDone     = "done"
	RunnerError    = "error"
)

// CheckRunnerProtocol returns nil when an agent of this build can run a
// runner that speaks version v, and otherwise an error naming both
// versions.
func CheckRunnerProtocol(v int) error {
	if v < 1 || v > RunnerProtocolVersion {
		return fmt.Errorf("the build speaks runner protocol %d; this agent speaks runner protocol 1 to %d", v, RunnerProtocolVersion)
	}
	return nil
}

// RunnerJob is what the agent writes on a runner's stdin: the job and the
// agent's runner settings (agent.Runner's fields), so that the child runs
// exactly what the embedded runtime would. Decoding is greedy, so a job
// needs no seed: the same build, model and config give the same tokens.
type RunnerJob struct {
	// Protocol is the runner protocol version the agent speaks to this
	// runner: the runner's hello's.
	Protocol int           `json:"protocol"`
	Spec     jobs.Spec     `json:"spec"`
	Configs  []jobs.Config `json:"configs"`
	// ModelPath is the model file on the device; WorkDir holds packed and
	// mixed-precision copies of models (empty: none are made).
	ModelPath string `json:"model_path"`
	WorkDir   string `json:"work_dir,omitempty"`
	// Threads for matrix products; 0 means the device's CPU count.
	Threads int `json:"threads,omitempty"`
	// Profile is the agent's storage profile (nil: the device's own
	// storage); a config's profile overrides it.
	Profile *RunnerProfile `json:"profile,omitempty"`
	// Direct, Pin and DiscardOutliers are the agent's settings of the
	// same names.
	Direct          bool       `json:"direct,omitempty"`
	Pin             bool       `json:"pin,omitempty"`
	DiscardOutliers bool       `json:"discard_outliers,omitempty"`
	Gate            RunnerGate `json:"thermal_gate"`
	// EvictModel drops the model file's pages from the page cache before
	// each config (posix_fadvise DONTNEED, after flushing it), so that the
	// config's flash reads are real reads; the result's extra metrics then
	// say so (page_cache_evicted, model_resident_before_evict and
	// model_resident_after_evict). A runner of an older build ignores it
	// and reports none of them.
	EvictModel bool `json:"evict_model,omitempty"`
}

// RunnerGate is the thermal gate applied before each repetition; zero
// fields take the runner's defaults (45 °C, 2 minutes, polled every 2 s).
type RunnerGate struct {
	MaxTempC  float64 `json:"max_temp_c,omitempty"`
	TimeoutNS int64   `json:"timeout_ns,omitempty"`
	PollNS    int64   `json:"poll_ns,omitempty"`
	Disabled  bool    `json:"disabled,omitempty"`
}

// RunnerProfile is a storage profile in plain numbers, the runtime's
// expert.Profile field for field (the agent converts both ways; this
// package does not import the runtime). Rates are per second, times in
// nanoseconds, sizes in bytes.
type RunnerProfile struct {
	Name        string              `json:"name"`
	Description string              `json:"description,omitempty"`
	Bandwidth   float64             `json:"bandwidth"`
	LatencyNS   int64               `json:"latency_ns"`
	MaxInFlight int                 `json:"max_in_flight"`
	RAMBudget   int64               `json:"ram_budget,omitempty"`
	PageSize    int64               `json:"page_size,omitempty"`
	ReadAhead   int64               `json:"read_ahead,omitempty"`
	Compute     *RunnerCompute      `json:"compute,omitempty"`
	Service     *RunnerServiceTimes `json:"service_times,omitempty"`
}

// RunnerCompute is expert.Compute.
type RunnerCompute struct {
	WeightBandwidth float64 `json:"weight_bandwidth"`
	Throughput      float64 `json:"throughput"`
	PageCostNS      int64   `json:"page_cost_ns,omitempty"`
}

// RunnerServiceTimes is expert.ServiceTimes' measured table:
// TimesNS[i][j] is size i at queue depth j.
type RunnerServiceTimes struct {
	Sizes       []int64   `json:"sizes"`
	QueueDepths []int     `json:"queue_depths"`
	TimesNS     [][]int64 `json:"times_ns"`
	Patterns    []string  `json:"patterns,omitempty"`
}

// DecodeRunnerJob decodes and validates a RunnerJob. A job in a runner
// protocol version this build does not speak is refused with an error
// naming both versions. Errors are *DecodeError.
func DecodeRunnerJob(data []byte) (*RunnerJob, error) {
	const typ = "runner job"
	if len(data) > MaxRunnerJobBytes {
		return nil, &DecodeError{Type: typ, Kind: RejectOversized, Err: fmt.Errorf("%d bytes exceeds the %d-byte limit", len(data), MaxRunnerJobBytes)}
	}
	var j RunnerJob
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, &DecodeError{Type: typ, Kind: RejectMalformed, Err: cleanJSONError(err)}
	}
	if j.Protocol < 1 || j.Protocol > RunnerProtocolVersion {
		return nil, &DecodeError{Type: typ, Kind: RejectVersion,
			Err: fmt.Errorf("the agent speaks runner protocol %d; this build speaks runner protocol 1 to %d", j.Protocol, RunnerProtocolVersion)}
	}
	if err := j.Validate(); err != nil {
		return nil, &DecodeError{Type: typ, Kind: RejectInvalid, Err: err}
	}
	return &j, nil
}

// Validate checks a RunnerJob's bounds (the spec itself was validated
// with its assignment).
func (j *RunnerJob) Validate() error {
	switch {
	case j.ModelPath == "":
		return errors.New("model_path required")
	case len(j.Configs) == 0 || len(j.Configs) > jobs.MaxConfigs:
		return fmt.Errorf("%d configs, want 1 to %d", len(j.Configs), jobs.MaxConfigs)
	case j.Threads < 0 || j.Threads > 4096:
		return fmt.Errorf("threads %d out of range [0, 4096]", j.Threads)
	case j.Gate.TimeoutNS < 0 || j.Gate.PollNS < 0 || !finite(j.Gate.MaxTempC):
		return errors.New("thermal_gate: negative duration or non-finite temperature")
	}
	for i, c := range j.Configs {
		if c.Index < 0 || c.Index >= jobs.MaxConfigs || c.Key == "" || len(c.Key) > 256 {
			return fmt.Errorf("configs[%d]: index out of range or key missing", i)
		}
	}
	if p := j.Profile; p != nil {
		if p.Name == "" || !finite(p.Bandwidth) || p.Bandwidth <= 0 || p.LatencyNS < 0 || p.MaxInFlight < 1 || p.RAMBudget < 0 || p.PageSize < 0 || p.ReadAhead < 0 {
			return errors.New("profile: name, positive bandwidth and max_in_flight required; no negative figures")
		}
		if c := p.Compute; c != nil && (!finite(c.WeightBandwidth) || !finite(c.Throughput) || c.WeightBandwidth <= 0 || c.Throughput <= 0 || c.PageCostNS < 0) {
			return errors.New("profile.compute: positive rates required")
		}
	}
	return nil
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// RunnerLine is one line of a runner's output. T names its type and says
// which fields are set:
//
//   - hello: Protocol, Revision, Modified, GoVersion, Module (first line);
//   - progress: Progress (a phase without a line of its own, e.g. packing);
//   - config: Index, the position in RunnerJob.Configs of the config that
//     starts;
//   - pos: Config (jobs.Config.Index) and Rep, the repetition that runs
//     next (negative for warm-up);
//   - step: Step, one forward step and its layers;
//   - result: Result, one per config in RunnerJob.Configs' order;
//   - done: nothing (the last line of a run that finished);
//   - error: Error, why the runner could not run the job.
type RunnerLine struct {
	T string `json:"t"`

	Protocol  int    `json:"protocol,omitempty"`
	Revision  string `json:"revision,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"go_version,omitempty"`
	Module    string `json:"module,omitempty"`

	Progress *Progress `json:"progress,omitempty"`

	Index  int `json:"i,omitempty"`
	Config int `json:"cfg,omitempty"`
	Rep    int `json:"rep,omitempty"`

	Step   *RunnerStepData `json:"step,omitempty"`
	Result *ConfigResult   `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// RunnerStepData is one forward step: a trace.TokenEvent's fields and the
// layer events the runtime emitted before it, whose step is the token's.
// Phase is PhasePrefill, PhaseDecode or PhaseVerify.
type RunnerStepData struct {
	Step       int           `json:"s"`
	Phase      string        `json:"ph"`
	Pos        int           `json:"p"`
	Tokens     int           `json:"n"`
	DurationNS int64         `json:"d"`
	StallNS    int64         `json:"st,omitempty"`
	BytesRead  int64         `json:"b,omitempty"`
	CacheBytes int64         `json:"c,omitempty"`
	Layers     *RunnerLayers `json:"l,omitempty"`
}

// RunnerLayers holds a step's trace.LayerEvents column-wise: entry i of
// each column is the i-th event, in the order emitted. Layer is always
// set; any other column is either empty (zero or no experts for every
// event) or as long as Layer; decoded, every column is as long as Layer.
// An empty expert list and a nil one are the same. On the wire it is one
// blob of varints (RunnerLayersEncoding, runner_step.go).
type RunnerLayers struct {
	Layer          []int   `json:"i"`
	Hits           []int   `json:"h,omitempty"`
	Misses         []int   `json:"m,omitempty"`
	PrefetchUsed   []int   `json:"pu,omitempty"`
	PrefetchWasted []int   `json:"pw,omitempty"`
	StallNS        []int64 `json:"st,omitempty"`
	ComputeNS      []int64 `json:"d,omitempty"`
	Selected       [][]int `json:"sel,omitempty"`
	Missed         [][]int `json:"miss,omitempty"`
	Predicted      [][]int `json:"pred,omitempty"`

	// The slabs the decoded columns are cut from (runner_step.go).
	slabInts, slabIDs []int
	slabDurs          []int64
}

// ParseRunnerLine decodes and validates one line of runner output (without
// its newline) into l. Every field of l is the line's afterwards, but a
// step line reuses the arrays of the step line l held before: copy what
// must outlive the next call. Errors are *DecodeError.
func ParseRunnerLine(data []byte, l *RunnerLine) error {
	const typ = "runner"
	if len(data) > MaxRunnerLineBytes {
		*l = RunnerLine{}
		return &DecodeError{Type: typ, Kind: RejectOversized, Err: fmt.Errorf("%d bytes exceeds the %d-byte limit", len(data), MaxRunnerLineBytes)}
	}
	if !scanRunnerStep(data, l) {
		*l = RunnerLine{}
		if err := json.Unmarshal(data, l); err != nil {
			return &DecodeError{Type: typ, Kind: RejectMalformed, Err: cleanJSONError(err)}
		}
	}
	if err := l.Validate(); err != nil {
		return &DecodeError{Type: typ, Kind: RejectInvalid, Err: err}
	}
	return nil
}

// Validate checks a runner line's fields for its type. It accepts a hello
// of any positive version: CheckRunnerProtocol decides whether it is
// spoken.
func (l *RunnerLine) Validate() error {
	switch l.T {
	case RunnerHello:
		if l.Protocol < 1 {
			return fmt.Errorf("hello: protocol %d must be positive", l.Protocol)
		}
		if len(l.Revision) > 256 || len(l.GoVersion) > 256 || len(l.Module) > 256 {
			return errors.New("hello: revision, go_version and module must be at most 256 bytes")
		}
	case RunnerProgress:
		p := l.Progress
		if p == nil || p.Phase == "" || len(p.Phase) > 64 || p.Done < 0 || p.Total < 0 {
			return errors.New("progress: phase required, counts non-negative")
		}
		return checkText("progress.message", p.Message)
	case RunnerConfig:
		if l.Index < 0 || l.Index >= jobs.MaxConfigs {
			return fmt.Errorf("config: i %d out of range", l.Index)
		}
	case RunnerPos:
		if l.Config < 0 || l.Config >= jobs.MaxConfigs || l.Rep < -jobs.MaxWarmup || l.Rep >= jobs.MaxRepetitions {
			return fmt.Errorf("pos: cfg %d or rep %d out of range", l.Config, l.Rep)
		}
	case RunnerStep:
		if l.Step == nil {
			return errors.New("step: step missing")
		}
		return l.Step.validate()
	case RunnerResult:
		if l.Result == nil {
			return errors.New("result: result missing")
		}
		// One definition of a valid config result: Result.Validate's.
		r := Result{RunID: 1, Token: 1, DeviceID: "runner", Outcome: OutcomeSucceeded, Configs: []ConfigResult{*l.Result}}
		if err := r.Validate(); err != nil {
			return fmt.Errorf("result: %w", err)
		}
	case RunnerDone:
	case RunnerError:
		if l.Error == "" {
			return errors.New("error: message missing")
		}
		return checkText("error", l.Error)
	default:
		return fmt.Errorf("unknown line type %q", clip(l.T))
	}
	return nil
}

func (s *RunnerStepData) validate() error {
	switch s.Phase {
	case PhasePrefill, PhaseDecode, PhaseVerify:
	default:
		return fmt.Errorf("step: phase %q unknown (want prefill, decode or verify)", clip(s.Phase))
	}
	switch {
	case s.Step < 0 || s.Step > 1<<30 || s.Pos < 0 || s.Pos > 1<<30:
		return errors.New("step: s and p must be in [0, 2^30]")
	case s.Tokens < 0 || s.Tokens > 1<<20:
		return fmt.Errorf("step: n %d out of range [0, 2^20]", s.Tokens)
	case s.DurationNS < 0 || s.StallNS < 0 || s.BytesRead < 0 || s.CacheBytes < 0:
		return errors.New("step: durations and byte counts must be non-negative")
	}
	if s.Layers != nil {
		return s.Layers.validate()
	}
	return nil
}

func (l *RunnerLayers) validate() error {
	n := len(l.Layer)
	if n == 0 || n > MaxRunnerLayerEvents {
		return fmt.Errorf("step.l: %d layer events, want 1 to %d", n, MaxRunnerLayerEvents)
	}
	for _, v := range l.Layer {
		if v < 0 || v >= MaxLayers {
			return fmt.Errorf("step.l.i: layer %d out of range [0, %d)", v, MaxLayers)
		}
	}
	if err := checkColumn("h", l.Hits, n, 0, MaxExpertsPerLayer); err != nil {
		return err
	}
	if err := checkColumn("m", l.Misses, n, 0, MaxExpertsPerLayer); err != nil {
		return err
	}
	if err := checkColumn("pu", l.PrefetchUsed, n, 0, MaxExpertsPerLayer); err != nil {
		return err
	}
	if err := checkColumn("pw", l.PrefetchWasted, n, 0, MaxExpertsPerLayer); err != nil {
		return err
	}
	if err := checkColumn("st", l.StallNS, n, 0, math.MaxInt64); err != nil {
		return err
	}
	if err := checkColumn("d", l.ComputeNS, n, 0, math.MaxInt64); err != nil {
		return err
	}
	if err := checkExperts("sel", l.Selected, n); err != nil {
		return err
	}
	if err := checkExperts("miss", l.Missed, n); err != nil {
		return err
	}
	return checkExperts("pred", l.Predicted, n)
}

// checkColumn checks that an optional column has n entries in [lo, hi].
func checkColumn[T int | int64](name string, col []T, n int, lo, hi T) error {
	if len(col) == 0 {
		return nil
	}
	if len(col) != n {
		return fmt.Errorf("step.l.%s: %d entries for %d layer events", name, len(col), n)
	}
	for _, v := range col {
		if v < lo || v > hi {
			return fmt.Errorf("step.l.%s: %d out of range [%d, %d]", name, v, lo, hi)
		}
	}
	return nil
}

// checkExperts checks that an optional expert-list column has n entries
// of expert ids in [0, MaxExpertsPerLayer).
func checkExperts(name string, col [][]int, n int) error {
	if len(col) == 0 {
		return nil
	}
	if len(col) != n {
		return fmt.Errorf("step.l.%s: %d entries for %d layer events", name, len(col), n)
	}
	for _, ids := range col {
		if len(ids) > MaxExpertsPerLayer {
			return fmt.Errorf("step.l.%s: %d experts in one layer, max %d", name, len(ids), MaxExpertsPerLayer)
		}
		for _, e := range ids {
			if e < 0 || e >= MaxExpertsPerLayer {
				return fmt.Errorf("step.l.%s: expert %d out of range [0, %d)", name, e, MaxExpertsPerLayer)
			}
		}
	}
	return nil
}

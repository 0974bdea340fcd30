package jobs

import (
	"time"
)

// Mode is a runtime mode: how the LES runtime gets expert weights.
type Mode string

// Runtime modes, in the order of the LES ladder.
const (
	// ModeResident keeps every expert in RAM (the baseline, and the
	// exactness reference).
	ModeResident Mode = "resident"
	// ModeOnDemand reads each missed expert when the router demands it.
	ModeOnDemand Mode = "on-demand"
	// ModeOnDemandParallel reads the missed experts of a layer in parallel.
	ModeOnDemandParallel Mode = "on-demand-parallel"
	// ModeLookahead prefetches the experts predicted by the next layer's
	// router applied to the current hidden state.
	ModeLookahead Mode = "lookahead"
	// ModeScheduled is lookahead plus compute scheduling: resident experts
	// first, missing ones in read-completion order.
	ModeScheduled Mode = "scheduled"
	// ModeSpeculative is scheduled plus speculative decoding: the model-free
	// n-gram drafter with adaptive draft length (greedy output unchanged).
	ModeSpeculative Mode = "speculative"
	// ModeMixedPrecision is scheduled on the layer-wise mixed-precision
	// form of the model, which the agent derives once with the planner
	// (lesfarm quantize --budget, see MixedPrecision) and caches. Its
	// tokens may differ from the resident model's.
	ModeMixedPrecision Mode = "mixed-precision"
)

// Modes lists every valid mode in ladder order.
var Modes = []Mode{ModeResident, ModeOnDemand, ModeOnDemandParallel, ModeLookahead, ModeScheduled, ModeMixedPrecision, ModeSpeculative}

// Valid reports whether m is one of Modes.
func (m Mode) Valid() bool {
	for _, v := range Modes {
		if m == v {
			return true
		}
	}
	return false
}

// NeedsBudget reports whether the mode streams experts and therefore uses an
// expert cache budget. Only the resident mode does not.
func (m Mode) NeedsBudget() bool { return m != ModeResident }

// Platform values accepted by a Selector.
const (
	PlatformAndroid = "android"
	PlatformIOS     = "ios"
	PlatformLinux   = "linux"
	PlatformDarwin  = "darwin"
)

// Platforms lists the valid Selector.Platform values.
var Platforms = []string{PlatformAndroid, PlatformIOS, PlatformLinux, PlatformDarwin}

// Model layouts.
const (
	// LayoutAsIs runs the model file as it is.
	LayoutAsIs = "as-is"
	// LayoutPacked asks the agent to pack the model (one contiguous blob per
	// expert) before running, when it is not packed already.
	LayoutPacked = "packed"
	// LayoutPackedCompat asks the agent to pack the model in the compat
	// layout (lesfarm pack --layout compat: llama.cpp's stacked expert
	// tensors, merged gate+up for qwen35moe, every expert slice
	// page-aligned) and run that file: two or three aligned reads per
	// expert, in a file llama.cpp also loads.
	LayoutPackedCompat = "packed-compat"
)

// Defaults applied by Normalize to fields left zero.
const (
	DefaultDecodeTokens = 64
	DefaultRepetitions  = 3
	DefaultTimeout      = 30 * time.Minute
	DefaultMaxAttempts  = 3
)

// Limits enforced by Validate.
const (
	MaxNameLen      = 100
	MaxPrompts      = 256
	MaxPromptBytes  = 64 << 10
	MaxTokens       = 1 << 16
	MaxWarmup       = 100
	MaxRepetitions  = 1000
	MaxCooldown     = time.Hour
	MaxTimeout      = 48 * time.Hour
	MaxAttempts     = 20
	MinPriority     = -1000
	MaxPriority     = 1000
	MaxMatrixValues = 64
	MaxConfigs      = 1024
	MaxLabels       = 64
	MaxLabelLen     = 128
)

// Spec is a benchmark job spec. The zero value is not valid; build one with
// Parse, or fill it in and call Normalize then Validate.
type Spec struct {
	// Name identifies the job within its suite: lower-case letters, digits,
	// '.', '_' and '-'.
	Name string `json:"name" yaml:"name"`
	// Suite groups jobs for scheduling fairness and regression series.
	// Empty means the suite is the job's name.
	Suite       string `json:"suite,omitempty" yaml:"suite,omitempty"`
	Description string `json:"description,omitempty" yaml:"description,omitempty"`

	Model   Model   `json:"model" yaml:"model"`
	Prompts Prompts `json:"prompts" yaml:"prompts"`
	// PrefillTokens truncates each prompt to this many tokens (0: the whole
	// prompt).
	PrefillTokens int `json:"prefill_tokens,omitempty" yaml:"prefill_tokens,omitempty"`
	// DecodeTokens is the number of tokens generated per prompt.
	DecodeTokens int `json:"decode_tokens,omitempty" yaml:"decode_tokens,omitempty"`

	Matrix Matrix `json:"matrix" yaml:"matrix"`

	// Warmup is the number of unmeasured repetitions run first per config.
	Warmup int `json:"warmup,omitempty" yaml:"warmup,omitempty"`
	// Repetitions is the number of measured repetitions per config.
	Repetitions int `json:"repetitions,omitempty" yaml:"repetitions,omitempty"`
	// Cooldown is the pause between repetitions (before the thermal gate).
	Cooldown Duration `json:"cooldown,omitempty" yaml:"cooldown,omitempty"`
	// DiscardOutliers drops each config's outlier repetitions (decode tok/s
	// beyond median ± 3·1.4826·MAD, with at least 3 repetitions) before its
	// statistics are taken; the result reports how many were dropped.
	DiscardOutliers bool `json:"discard_outliers,omitempty" yaml:"discard_outliers,omitempty"`
	// Pin pins the agent's measuring thread to one CPU while a config runs.
	Pin bool `json:"pin,omitempty" yaml:"pin,omitempty"`
	// Timeout bounds one run of the whole job on one device.
	Timeout Duration `json:"timeout,omitempty" yaml:"timeout,omitempty"`

	// MixedPrecision configures the planner for the mixed-precision mode
	// (nil: the defaults of MixedPrecision).
	MixedPrecision *MixedPrecision `json:"mixed_precision,omitempty" yaml:"mixed_precision,omitempty"`

	Devices  Selector    `json:"devices,omitempty" yaml:"devices,omitempty"`
	Retry    RetryPolicy `json:"retry,omitempty" yaml:"retry,omitempty"`
	Priority int         `json:"priority,omitempty" yaml:"priority,omitempty"`
}

// MixedPrecision configures how the agent derives the mixed-precision model
// of the mixed-precision mode: the planner's file-size budget (a fraction of
// the model file, or bytes; default DefaultMixedBudget) and the number of
// calibration tokens of CalibrationText it measures on (default
// DefaultCalibTokens).
type MixedPrecision struct {
	Budget      Budget `json:"budget,omitempty" yaml:"budget,omitempty"`
	CalibTokens int    `json:"calib_tokens,omitempty" yaml:"calib_tokens,omitempty"`
}

// Defaults of MixedPrecision.
const (
	DefaultMixedFraction = 0.3
	DefaultCalibTokens   = 512
	MaxCalibTokens       = 1 << 14
)

// Resolved returns p with defaults filled (p may be nil).
func (p *MixedPrecision) Resolved() MixedPrecision {
	var out MixedPrecision
	if p != nil {
		out = *p
	}
	if out.Budget.IsZero() {
		out.Budget = Budget{Fraction: DefaultMixedFraction}
	}
	if out.CalibTokens == 0 {
		out.CalibTokens = DefaultCalibTokens
	}
	return out
}

// Model is the model artifact a job runs. SHA256 and Size are required: the
// agent verifies both before use. URL or Path say where to get it; when both
// are empty the agent downloads it from the coordinator's artifact store by
// SHA256.
type Model struct {
	// Name is a display name, e.g. the file name.
	Name   string   `json:"name,omitempty" yaml:"name,omitempty"`
	URL    string   `json:"url,omitempty" yaml:"url,omitempty"`
	Path   string   `json:"path,omitempty" yaml:"path,omitempty"`
	SHA256 string   `json:"sha256" yaml:"sha256"`
	Size   ByteSize `json:"size" yaml:"size"`
	// Layout is LayoutAsIs (default), LayoutPacked or LayoutPackedCompat.
	Layout string `json:"layout,omitempty" yaml:"layout,omitempty"`
}

// Prompts are the prompts of a job: exactly one of Set (a named prompt set,
// see PromptSet) and Inline.
type Prompts struct {
	Set    string   `json:"set,omitempty" yaml:"set,omitempty"`
	Inline []string `json:"inline,omitempty" yaml:"inline,omitempty"`
}

// Matrix is the config matrix. Every mode runs with every budget and every
// storage profile, except the resident mode, which runs once per profile
// without a budget.
type Matrix struct {
	Modes []Mode `json:"modes" yaml:"modes"`
	// Budgets are expert cache budgets; required when a streaming mode is
	// listed.
	Budgets []Budget `json:"budgets,omitempty" yaml:"budgets,omitempty"`
	// Profiles are storage profile names (e.g. "phone-flagship") that make an
	// agent emulate a device's flash. Empty means the device's own storage.
	Profiles []string `json:"profiles,omitempty" yaml:"profiles,omitempty"`
}

// Selector picks the devices a job may run on. Every set field must match.
type Selector struct {
	Platform    string            `json:"platform,omitempty" yaml:"platform,omitempty"`
	Labels      map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
	MinRAM      ByteSize          `json:"min_ram,omitempty" yaml:"min_ram,omitempty"`
	DeviceModel string            `json:"device_model,omitempty" yaml:"device_model,omitempty"`
	// Emulated restricts to emulated (true) or real (false) devices; nil
	// accepts both.
	Emulated *bool `json:"emulated,omitempty" yaml:"emulated,omitempty"`
}

// RetryPolicy says how often a run is retried.
type RetryPolicy struct {
	// MaxAttempts bounds the attempts of one run, counting the first, when
	// runs end as infrastructure failures (device lost, lease expired).
	MaxAttempts int `json:"max_attempts,omitempty" yaml:"max_attempts,omitempty"`
	// OnFailure also retries runs that failed on their own (the benchmark
	// reported an error), within the same budget.
	OnFailure bool `json:"on_failure,omitempty" yaml:"on_failure,omitempty"`
}

// SuiteName returns Suite, or Name when Suite is empty.
func (s *Spec) SuiteName() string {
	if s.Suite != "" {
		return s.Suite
	}
	return s.Name
}

// Normalize fills zero fields with their defaults. It is idempotent and
// called by Parse.
func (s *Spec) Normalize() {
	if s.DecodeTokens == 0 {
		s.DecodeTokens = DefaultDecodeTokens
	}
	if s.Repetitions == 0 {
		s.Repetitions = DefaultRepetitions
	}
	if s.Timeout == 0 {
		s.Timeout = Duration(DefaultTimeout)
	}
	if s.Retry.MaxAttempts == 0 {
		s.Retry.MaxAttempts = DefaultMaxAttempts
	}
	if s.Model.Layout == "" {
		s.Model.Layout = LayoutAsIs
	}
}

// Clone returns a deep copy of s.
func (s *Spec) Clone() *Spec {
	c := *s
	c.Prompts.Inline = append([]string(nil), s.Prompts.Inline...)
	c.Matrix.Modes = append([]Mode(nil), s.Matrix.Modes...)
	c.Matrix.Budgets = append([]Budget(nil), s.Matrix.Budgets...)
	c.Matrix.Profiles = append([]string(nil), s.Matrix.Profiles...)
	if s.MixedPrecision != nil {
		mp := *s.MixedPrecision
		c.MixedPrecision = &mp
	}
	if s.Devices.Labels != nil {
		c.Devices.Labels = make(map[string]string, len(s.Devices.Labels))
		for k, v := range s.Devices.Labels {
			c.Devices.Labels[k] = v
		}
	}
	if s.Devices.Emulated != nil {
		e := *s.Devices.Emulated
		c.Devices.Emulated = &e
	}
	return &c
}

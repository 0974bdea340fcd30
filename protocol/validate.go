package protocol

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"time"

	"github.com/lesfarm/lesfarm/jobs"
)

func (m *Hello) MessageType() string          { return "hello" }
func (m *HelloReply) MessageType() string     { return "hello_reply" }
func (m *Heartbeat) MessageType() string      { return "heartbeat" }
func (m *HeartbeatReply) MessageType() string { return "heartbeat_reply" }
func (m *Assignment) MessageType() string     { return "assignment" }
func (m *SignedAssignment) MessageType() string {
	return "signed_assignment"
}
func (m *AssignReply) MessageType() string    { return "assign_reply" }
func (m *Cancel) MessageType() string         { return "cancel" }
func (m *CancelReply) MessageType() string    { return "cancel_reply" }
func (m *TelemetryBatch) MessageType() string { return "telemetry" }
func (m *Result) MessageType() string         { return "result" }

func (m *Hello) maxBytes() int            { return MaxHelloBytes }
func (m *HelloReply) maxBytes() int       { return MaxHelloReplyBytes }
func (m *Heartbeat) maxBytes() int        { return MaxHeartbeatBytes }
func (m *HeartbeatReply) maxBytes() int   { return MaxHeartbeatReplyBytes }
func (m *Assignment) maxBytes() int       { return MaxAssignmentBytes }
func (m *SignedAssignment) maxBytes() int { return MaxAssignmentBytes + 1024 }
func (m *AssignReply) maxBytes() int      { return MaxAssignReplyBytes }
func (m *Cancel) maxBytes() int           { return MaxCancelBytes }
func (m *CancelReply) maxBytes() int      { return MaxCancelReplyBytes }
func (m *TelemetryBatch) maxBytes() int   { return MaxTelemetryBytes }
func (m *Result) maxBytes() int           { return MaxResultBytes }

func (m *Hello) setVersion()            { m.V = Version }
func (m *HelloReply) setVersion()       { m.V = Version }
func (m *Heartbeat) setVersion()        { m.V = Version }
func (m *HeartbeatReply) setVersion()   { m.V = Version }
func (m *Assignment) setVersion()       { m.V = Version }
func (m *SignedAssignment) setVersion() { m.V = Version }
func (m *AssignReply) setVersion()      { m.V = Version }
func (m *Cancel) setVersion()           { m.V = Version }
func (m *CancelReply) setVersion()      { m.V = Version }
func (m *TelemetryBatch) setVersion()   { m.V = Version }
func (m *Result) setVersion()           { m.V = Version }

func (m *Hello) version() int            { return m.V }
func (m *HelloReply) version() int       { return m.V }
func (m *Heartbeat) version() int        { return m.V }
func (m *HeartbeatReply) version() int   { return m.V }
func (m *Assignment) version() int       { return m.V }
func (m *SignedAssignment) version() int { return m.V }
func (m *AssignReply) version() int      { return m.V }
func (m *Cancel) version() int           { return m.V }
func (m *CancelReply) version() int      { return m.V }
func (m *TelemetryBatch) version() int   { return m.V }
func (m *Result) version() int           { return m.V }

var labelKeyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$`)

func checkDevice(id string) error {
	if !ValidDeviceID(id) {
		return fmt.Errorf("device_id %q invalid (want 1-64 letters, digits, '_' or '-')", clip(id))
	}
	return nil
}

func checkText(field, s string) error {
	if len(s) > MaxTextLen {
		return fmt.Errorf("%s too long (%d bytes, max %d)", field, len(s), MaxTextLen)
	}
	return nil
}

func checkRun(field string, runID, token int64) error {
	if runID <= 0 {
		return fmt.Errorf("%srun_id %d must be positive", field, runID)
	}
	if token <= 0 {
		return fmt.Errorf("%stoken %d must be positive", field, token)
	}
	return nil
}

func checkLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("too many labels (%d, max %d)", len(labels), MaxLabels)
	}
	for k, v := range labels {
		if !labelKeyRE.MatchString(k) {
			return fmt.Errorf("label key %q invalid", clip(k))
		}
		if len(v) > 128 {
			return fmt.Errorf("label %s: value too long", clip(k))
		}
	}
	return nil
}

// Validate checks a Fingerprint.
func (f *Fingerprint) Validate() error {
	switch f.Platform {
	case jobs.PlatformAndroid, jobs.PlatformIOS, jobs.PlatformLinux, jobs.PlatformDarwin, "windows", "freebsd":
	case "":
		return errors.New("fingerprint.platform required")
	default:
		return fmt.Errorf("fingerprint.platform %q unknown", clip(f.Platform))
	}
	for name, s := range map[string]string{"arch": f.Arch, "os_version": f.OSVersion, "kernel": f.Kernel, "model": f.DeviceModel,
		"manufacturer": f.Manufacturer, "soc": f.SoC, "cpu": f.CPUModel, "agent_build": f.AgentBuild,
		"runtime_build": f.RuntimeBuild, "go_version": f.GoVersion, "profile": f.Profile, "host_model": f.HostModel} {
		if len(s) > 256 {
			return fmt.Errorf("fingerprint.%s too long (%d bytes, max 256)", name, len(s))
		}
	}
	if f.Cores < 0 || f.Cores > 4096 || len(f.CoreMaxKHz) > 4096 {
		return fmt.Errorf("fingerprint.cores %d out of range", f.Cores)
	}
	for name, p := range map[string]*int64{"ram_bytes": f.RAMBytes, "ram_available_bytes": f.RAMAvailableBytes, "free_storage_bytes": f.FreeStorageBytes} {
		if p != nil && *p < 0 {
			return fmt.Errorf("fingerprint.%s negative", name)
		}
	}
	if f.ExecPlatform != "" && !ValidPlatform(f.ExecPlatform) {
		return fmt.Errorf("fingerprint.exec_platform %q invalid (want GOOS/GOARCH)", clip(f.ExecPlatform))
	}
	if len(f.EmbeddedBuild) > 200 || (f.EmbeddedSHA256 != "" && !ValidSHA256(f.EmbeddedSHA256)) {
		return errors.New("fingerprint.embedded_build too long or embedded_sha256 not a sha256")
	}
	if f.Emulated && f.Profile == "" {
		return errors.New("fingerprint.profile required for an emulated device")
	}
	if f.State != nil {
		return f.State.validate()
	}
	return nil
}

func (s *DeviceState) validate() error {
	if len(s.Thermal) > 256 {
		return fmt.Errorf("state.thermal: too many zones (%d, max 256)", len(s.Thermal))
	}
	if s.BatteryPercent != nil && (*s.BatteryPercent < 0 || *s.BatteryPercent > 100) {
		return fmt.Errorf("state.battery_percent %v out of range [0, 100]", *s.BatteryPercent)
	}
	if len(s.ThermalStatus) > 64 || len(s.BatteryStatus) > 64 {
		return errors.New("state: status text too long")
	}
	for _, z := range s.Thermal {
		if len(z.Name) > 128 {
			return errors.New("state.thermal: zone name too long")
		}
	}
	return nil
}

func checkRuns(runs []RunStatus) error {
	if len(runs) > MaxRunsPerDevice {
		return fmt.Errorf("too many runs (%d, max %d)", len(runs), MaxRunsPerDevice)
	}
	for i, r := range runs {
		if err := checkRun(fmt.Sprintf("runs[%d].", i), r.RunID, r.Token); err != nil {
			return err
		}
		switch r.State {
		case RunStateAccepted, RunStateDownloading, RunStateRunning, RunStateFinishing:
		default:
			return fmt.Errorf("runs[%d].state %q unknown", i, clip(r.State))
		}
		if r.Progress < 0 || r.Progress > 1 {
			return fmt.Errorf("runs[%d].progress %v out of range [0, 1]", i, r.Progress)
		}
		if err := checkText("message", r.Message); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks a Hello.
func (m *Hello) Validate() error {
	if err := checkDevice(m.DeviceID); err != nil {
		return err
	}
	if err := m.Fingerprint.Validate(); err != nil {
		return err
	}
	if err := checkLabels(m.Labels); err != nil {
		return err
	}
	return checkRuns(m.Runs)
}

func checkCancels(cs []CancelNotice) error {
	if len(cs) > 1024 {
		return fmt.Errorf("too many cancels (%d)", len(cs))
	}
	for i, c := range cs {
		if err := checkRun(fmt.Sprintf("cancel[%d].", i), c.RunID, c.Token); err != nil {
			return err
		}
		if err := checkText("reason", c.Reason); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks a HelloReply.
func (m *HelloReply) Validate() error {
	if err := checkDevice(m.DeviceID); err != nil {
		return err
	}
	if err := checkText("reason", m.Reason); err != nil {
		return err
	}
	if m.Accepted {
		if m.TTLMS < 100 || m.TTLMS > int64(time.Hour/time.Millisecond) {
			return fmt.Errorf("ttl_ms %d out of range [100, 3600000]", m.TTLMS)
		}
		if m.HeartbeatIntervalMS <= 0 || m.HeartbeatIntervalMS >= m.TTLMS {
			return fmt.Errorf("heartbeat_interval_ms %d must be in (0, ttl_ms)", m.HeartbeatIntervalMS)
		}
	}
	if len(m.SigningKey) != 0 && len(m.SigningKey) != ed25519.PublicKeySize {
		return fmt.Errorf("signing_key has %d bytes, want %d", len(m.SigningKey), ed25519.PublicKeySize)
	}
	return checkCancels(m.Cancel)
}

// Validate checks a Heartbeat.
func (m *Heartbeat) Validate() error {
	if err := checkDevice(m.DeviceID); err != nil {
		return err
	}
	if m.State != nil {
		if err := m.State.validate(); err != nil {
			return err
		}
	}
	if m.FreeStorageBytes != nil && *m.FreeStorageBytes < 0 {
		return fmt.Errorf("heartbeat.free_storage_bytes negative")
	}
	return checkRuns(m.Runs)
}

// Validate checks a HeartbeatReply.
func (m *HeartbeatReply) Validate() error {
	if m.TTLMS < 0 || m.TTLMS > int64(time.Hour/time.Millisecond) {
		return fmt.Errorf("ttl_ms %d out of range", m.TTLMS)
	}
	if len(m.Renewed) > MaxRunsPerDevice {
		return fmt.Errorf("too many renewals (%d)", len(m.Renewed))
	}
	for i, r := range m.Renewed {
		if err := checkRun(fmt.Sprintf("renewed[%d].", i), r.RunID, r.Token); err != nil {
			return err
		}
	}
	return checkCancels(m.Cancel)
}

// Validate checks an Assignment, including its spec and that Configs is
// exactly the spec's expansion.
func (m *Assignment) Validate() error {
	if err := checkRun("", m.RunID, m.Token); err != nil {
		return err
	}
	if err := checkDevice(m.DeviceID); err != nil {
		return err
	}
	if m.Attempt < 1 {
		return fmt.Errorf("attempt %d must be >= 1", m.Attempt)
	}
	if m.Suite == "" || len(m.Suite) > 200 || len(m.Build) > 200 || len(m.GitSHA) > 64 {
		return errors.New("suite required; suite, build and git_sha must be short")
	}
	if err := m.Spec.Validate(); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	want := m.Spec.Expand()
	if len(m.Configs) != len(want) {
		return fmt.Errorf("configs: %d entries, spec expands to %d", len(m.Configs), len(want))
	}
	for i := range want {
		if m.Configs[i] != want[i] {
			return fmt.Errorf("configs[%d]: %q does not match the spec's expansion %q", i, clip(m.Configs[i].Key), want[i].Key)
		}
	}
	a := m.Artifact
	if a.URL == "" && m.Spec.Model.Path == "" {
		return errors.New("artifact.url required (the spec's model has no local path)")
	}
	if a.URL != "" {
		u, err := url.Parse(a.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("artifact.url %q invalid (want http:// or https://)", clip(a.URL))
		}
	}
	if a.SHA256 != m.Spec.Model.SHA256 || a.Size != int64(m.Spec.Model.Size) {
		return errors.New("artifact sha256/size differ from the spec's model")
	}
	if m.LeaseExpiresAt.IsZero() || m.Deadline.IsZero() {
		return errors.New("lease_expires_at and deadline required")
	}
	if m.DeadlineInMS < 0 {
		return fmt.Errorf("deadline_in_ms %d negative", m.DeadlineInMS)
	}
	if m.Model != nil {
		if err := m.Model.Validate(); err != nil {
			return fmt.Errorf("model: %w", err)
		}
	}
	return nil
}

// Validate checks ModelFacts for sane sizes and counts.
func (f *ModelFacts) Validate() error {
	switch {
	case f.Architecture == "" || len(f.Architecture) > MaxArchitecture:
		return fmt.Errorf("architecture must be 1-%d bytes", MaxArchitecture)
	case len(f.TensorTypes) > MaxTensorTypes:
		return fmt.Errorf("%d tensor types, max %d", len(f.TensorTypes), MaxTensorTypes)
	case f.TotalBytes < 0 || f.ExpertBytes < 0 || f.ResidentBytes < 0 || f.ExpertBytes > f.TotalBytes || f.ResidentBytes > f.TotalBytes:
		return errors.New("byte counts must be non-negative and within total_bytes")
	case f.ExpertCount < 0 || f.ExpertsUsed < 0 || f.Tensors < 0 || f.ContextLength < 0:
		return errors.New("counts must be non-negative")
	}
	for _, t := range f.TensorTypes {
		if t == "" || len(t) > 16 {
			return fmt.Errorf("tensor type %q invalid", clip(t))
		}
	}
	if r := f.Recurrent; r != nil {
		for _, v := range []int{r.Layers, r.ConvKernel, r.ConvChannels, r.Heads, r.StateSize} {
			if v < 0 || v > MaxRecurrentDim {
				return fmt.Errorf("recurrent geometry %+v out of range [0, %d]", *r, MaxRecurrentDim)
			}
		}
	}
	return nil
}

// Validate checks a SignedAssignment's envelope (not the signature).
func (m *SignedAssignment) Validate() error {
	if len(m.Assignment) == 0 {
		return errors.New("assignment missing")
	}
	if len(m.Signature) != ed25519.SignatureSize {
		return fmt.Errorf("sig has %d bytes, want %d", len(m.Signature), ed25519.SignatureSize)
	}
	return nil
}

// Validate checks an AssignReply.
func (m *AssignReply) Validate() error {
	if m.RunID <= 0 {
		return fmt.Errorf("run_id %d must be positive", m.RunID)
	}
	if m.Accepted && m.Code != "" {
		return errors.New("an accepted reply has no refusal code")
	}
	if !m.Accepted && m.Code == "" {
		return errors.New("a refusal needs a code")
	}
	if len(m.Code) > 64 {
		return errors.New("code too long")
	}
	return checkText("reason", m.Reason)
}

// Validate checks a Cancel.
func (m *Cancel) Validate() error {
	if err := checkRun("", m.RunID, m.Token); err != nil {
		return err
	}
	return checkText("reason", m.Reason)
}

// Validate checks a CancelReply.
func (m *CancelReply) Validate() error {
	if m.RunID <= 0 {
		return fmt.Errorf("run_id %d must be positive", m.RunID)
	}
	return nil
}

// Validate checks a TelemetryBatch and each of its samples.
func (m *TelemetryBatch) Validate() error {
	if err := checkRun("", m.RunID, m.Token); err != nil {
		return err
	}
	if err := checkDevice(m.DeviceID); err != nil {
		return err
	}
	if m.Seq > 1<<53 {
		return fmt.Errorf("seq %d out of range", m.Seq)
	}
	if len(m.Samples) > MaxSamplesPerBatch {
		return fmt.Errorf("too many samples (%d, max %d)", len(m.Samples), MaxSamplesPerBatch)
	}
	for i := range m.Samples {
		if err := m.Samples[i].validate(); err != nil {
			return fmt.Errorf("samples[%d]: %w", i, err)
		}
	}
	if err := validateExperts(m.Experts); err != nil {
		return err
	}
	if p := m.Progress; p != nil {
		if p.Phase == "" || len(p.Phase) > 64 || p.Done < 0 || p.Total < 0 {
			return errors.New("progress: phase required, counts non-negative")
		}
		if err := checkText("progress.message", p.Message); err != nil {
			return err
		}
	}
	return nil
}

func (s *Sample) validate() error {
	switch s.Phase {
	case PhasePrefill, PhaseDecode, PhaseVerify:
	default:
		return fmt.Errorf("phase %q unknown (want prefill, decode or verify)", clip(s.Phase))
	}
	switch {
	case s.ConfigIndex < 0 || s.ConfigIndex >= jobs.MaxConfigs:
		return fmt.Errorf("cfg %d out of range", s.ConfigIndex)
	case s.Repetition < -jobs.MaxWarmup || s.Repetition >= jobs.MaxRepetitions:
		return fmt.Errorf("rep %d out of range", s.Repetition)
	case s.Step < 0 || s.Step > 1<<30 || s.Pos < 0 || s.Pos > 1<<30:
		return errors.New("step and pos must be in [0, 2^30]")
	case s.Tokens < 1 || s.Tokens > 1<<20:
		return fmt.Errorf("tokens %d out of range [1, 2^20]", s.Tokens)
	case s.DurationNS < 0 || s.StallNS < 0 || s.BytesRead < 0 || s.CacheBytes < 0:
		return errors.New("durations and byte counts must be non-negative")
	}
	if l := s.Layers; l != nil {
		n := len(l.Hits)
		if n > MaxLayers {
			return fmt.Errorf("layers: %d entries, max %d", n, MaxLayers)
		}
		if len(l.Misses) != n || len(l.PrefetchUsed) != n || len(l.PrefetchWasted) != n {
			return errors.New("layers: hit, miss, pf_used and pf_wasted must have the same length")
		}
		for _, arr := range [][]int32{l.Hits, l.Misses, l.PrefetchUsed, l.PrefetchWasted} {
			for _, v := range arr {
				if v < 0 {
					return errors.New("layers: negative count")
				}
			}
		}
	}
	return nil
}

// Validate checks a Result.
func (m *Result) Validate() error {
	if err := checkRun("", m.RunID, m.Token); err != nil {
		return err
	}
	if err := checkDevice(m.DeviceID); err != nil {
		return err
	}
	switch m.Outcome {
	case OutcomeSucceeded, OutcomeFailed, OutcomeCancelled, OutcomeAborted, OutcomeBuildFailed:
	default:
		return fmt.Errorf("outcome %q unknown (want succeeded, failed, cancelled, aborted or build_failed)", clip(m.Outcome))
	}
	if m.Provenance != nil {
		if err := m.Provenance.validate(); err != nil {
			return err
		}
	}
	if (m.Outcome == OutcomeFailed || m.Outcome == OutcomeAborted || m.Outcome == OutcomeBuildFailed) && m.Error == "" {
		return fmt.Errorf("a result with outcome %s needs an error", m.Outcome)
	}
	if err := checkText("error", m.Error); err != nil {
		return err
	}
	if len(m.Configs) > MaxConfigsInResult {
		return fmt.Errorf("too many configs (%d, max %d)", len(m.Configs), MaxConfigsInResult)
	}
	seen := map[int]bool{}
	for i := range m.Configs {
		c := &m.Configs[i]
		if c.ConfigIndex < 0 || c.ConfigIndex >= jobs.MaxConfigs || seen[c.ConfigIndex] {
			return fmt.Errorf("configs[%d]: config_index %d out of range or duplicate", i, c.ConfigIndex)
		}
		seen[c.ConfigIndex] = true
		if c.ConfigKey == "" || len(c.ConfigKey) > 256 {
			return fmt.Errorf("configs[%d]: config_key required (max 256 bytes)", i)
		}
		if c.PhoneState != nil {
			if err := c.PhoneState.Validate(); err != nil {
				return fmt.Errorf("configs[%d]: %w", i, err)
			}
		}
		if c.Repetitions < 0 || c.DiscardedRepetitions < 0 || c.Warmup < 0 || c.PeakMemoryBytes < 0 || c.BytesPerToken < 0 {
			return fmt.Errorf("configs[%d]: negative count", i)
		}
		for name, f := range map[string]float64{"hit_rate": c.HitRate, "predictor_precision": c.PredictorPrecision, "predictor_recall": c.PredictorRecall, "stall_fraction": c.StallFraction} {
			if f < 0 || f > 1 {
				return fmt.Errorf("configs[%d].%s %v out of range [0, 1]", i, name, f)
			}
		}
		for name, st := range map[string]Stat{"decode_tps": c.DecodeTPS, "prefill_tps": c.PrefillTPS, "ttft_ms": c.TTFTMS} {
			if st.N < 0 || st.Stddev < 0 {
				return fmt.Errorf("configs[%d].%s: n and stddev must be non-negative", i, name)
			}
		}
		if c.TokensSHA256 != "" && !ValidSHA256(c.TokensSHA256) {
			return fmt.Errorf("configs[%d].tokens_sha256 is not a sha256", i)
		}
		if err := checkText("invalid_reason", c.InvalidReason); err != nil {
			return err
		}
		if err := checkText("error", c.Error); err != nil {
			return err
		}
		if len(c.Extra) > 64 {
			return fmt.Errorf("configs[%d].extra: too many metrics", i)
		}
		for k := range c.Extra {
			if len(k) > 64 {
				return fmt.Errorf("configs[%d].extra: key too long", i)
			}
		}
	}
	if m.TelemetryDropped > m.TelemetrySamples+1<<40 {
		return errors.New("telemetry counts inconsistent")
	}
	return nil
}

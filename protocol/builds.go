package protocol

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Executable is the build's executable for the device's platform, carried
// by an Assignment of a build that has one. The agent fetches it through
// its artifact cache (sha256-verified, under the same disk budget as
// models) and runs it as `EXE runner` (runner.go); it never executes a
// file whose sha256 differs from Artifact.SHA256.
type Executable struct {
	// Platform is GOOS/GOARCH, e.g. "linux/amd64" or "android/arm64".
	Platform string   `json:"platform"`
	Artifact Artifact `json:"artifact"`
}

// Provenance says which code produced a result. The coordinator rejects a
// result whose ExecutableSHA256 is not the run's build's executable for
// Platform (or, for an embedded build, the sha256 the device registered).
type Provenance struct {
	// Build is the build id that ran (the run's build, or for a run with
	// no build the device's embedded build).
	Build string `json:"build"`
	// ExecutableSHA256 is the sha256 of the executable that ran: the
	// build's downloaded executable, or the agent's own for the embedded
	// runtime.
	ExecutableSHA256 string `json:"executable_sha256"`
	// Platform is GOOS/GOARCH of that executable.
	Platform string `json:"platform"`
	// Embedded is true when the agent ran the job in-process with its
	// embedded runtime instead of a child process.
	Embedded bool `json:"embedded,omitempty"`
	// RunnerRevision, RunnerGoVersion and RunnerProtocol are what the
	// runner reported in its hello (the VCS revision may be empty for a
	// binary built without VCS stamping).
	RunnerRevision  string `json:"runner_revision,omitempty"`
	RunnerGoVersion string `json:"runner_go_version,omitempty"`
	RunnerProtocol  int    `json:"runner_protocol,omitempty"`
	// AgentBuild is the agent's own build (module version and revision).
	AgentBuild string `json:"agent_build,omitempty"`
	// PeakRSSBytes is the runner child's peak resident memory (0 for the
	// embedded runtime).
	PeakRSSBytes int64 `json:"peak_rss_bytes,omitempty"`
	// StderrTail is the last bytes (at most MaxStderrTail) of the child's
	// standard error, kept when the build failed.
	StderrTail string `json:"stderr_tail,omitempty"`
}

// MaxStderrTail bounds Provenance.StderrTail.
const MaxStderrTail = 4096

var (
	sha256Re   = regexp.MustCompile(`^[0-9a-f]{64}$`)
	platformRe = regexp.MustCompile(`^[a-z0-9]{1,16}/[a-z0-9]{1,16}$`)
)

// ValidSHA256 reports whether s is a lowercase hex sha256.
func ValidSHA256(s string) bool { return sha256Re.MatchString(s) }

// ValidPlatform reports whether s has the GOOS/GOARCH form.
func ValidPlatform(s string) bool { return platformRe.MatchString(s) }

func (p *Provenance) validate() error {
	if p.Build == "" || len(p.Build) > 200 {
		return errors.New("provenance.build required (max 200 bytes)")
	}
	if !ValidSHA256(p.ExecutableSHA256) {
		return fmt.Errorf("provenance.executable_sha256 %q is not a sha256", clip(p.ExecutableSHA256))
	}
	if !ValidPlatform(p.Platform) {
		return fmt.Errorf("provenance.platform %q invalid", clip(p.Platform))
	}
	for name, s := range map[string]string{"runner_revision": p.RunnerRevision, "runner_go_version": p.RunnerGoVersion, "agent_build": p.AgentBuild} {
		if len(s) > 256 {
			return fmt.Errorf("provenance.%s too long", name)
		}
	}
	if p.PeakRSSBytes < 0 || p.RunnerProtocol < 0 {
		return errors.New("provenance: negative peak_rss_bytes or runner_protocol")
	}
	if len(p.StderrTail) > MaxStderrTail {
		return fmt.Errorf("provenance.stderr_tail too long (%d bytes, max %d)", len(p.StderrTail), MaxStderrTail)
	}
	return nil
}

// EmbeddedBuildID names the build of an agent's embedded runtime:
// "embedded-" and the first 12 characters of the VCS revision when one is
// stamped, else of the executable's sha256. Identity is the executable's
// sha256 either way: the id is a name, checked against it.
func EmbeddedBuildID(revision, exeSHA256 string) string {
	id := revision
	if len(id) < 12 {
		id = exeSHA256
	}
	if len(id) > 12 {
		id = id[:12]
	}
	return "embedded-" + strings.ToLower(id)
}

// Package adb drives Android phones through the adb client for the host
// agent's --adb mode: it lists attached phones, reads a phone's
// fingerprint and state (getprop, /proc/meminfo, df, cpufreq, dumpsys
// battery and thermalservice), installs files on the phone under
// RemoteDir cached by sha256, and controls its clocks.
//
// Every call runs the adb executable once (no server protocol of its own);
// a Client is safe for concurrent use. Output from the phone is untrusted
// input: the parsers never panic and say what they could not read.
package adb

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// RemoteDir is where the agent keeps its files on a phone: bin/ (build
// executables named by sha256), models/ (models by sha256), run/ (the
// runner's working directory and pid file).
const RemoteDir = "/data/local/tmp/lesfarm"

// Device states printed by `adb devices`.
const (
	StateDevice       = "device"
	StateUnauthorized = "unauthorized"
	StateOffline      = "offline"
	StateRecovery     = "recovery"
)

// Errors of adb calls, matched with errors.Is.
var (
	// ErrNotFound: the serial is not attached (unplugged, or never was).
	ErrNotFound = errors.New("adb: device not found")
	// ErrUnavailable: the phone is attached but adb cannot use it
	// (unauthorized, offline, recovery, no permissions).
	ErrUnavailable = errors.New("adb: device not usable")
	// ErrNoADB: the adb executable cannot be run.
	ErrNoADB = errors.New("adb: the adb executable cannot be run")
)

// Client runs the adb executable. The zero value runs "adb" from PATH.
type Client struct {
	// Path is the adb executable; empty means "adb".
	Path string
	// Env, if set, is added to the environment of every adb process.
	Env []string
}

// Device is one line of `adb devices`.
type Device struct {
	Serial string
	// State is StateDevice when usable, else what adb says (unauthorized,
	// offline, recovery, "no permissions (...)", ...).
	State string
}

func (c *Client) path() string { return cmp.Or(c.Path, "adb") }

// Command returns the exec.Cmd of `adb [-s serial] args...` (no context:
// the caller supervises it, as RunChild does).
func (c *Client) Command(serial string, args ...string) *exec.Cmd {
	if serial != "" {
		args = append([]string{"-s", serial}, args...)
	}
	cmd := exec.Command(c.path(), args...)
	if len(c.Env) > 0 {
		cmd.Env = append(cmd.Environ(), c.Env...)
	}
	return cmd
}

// Run runs `adb [-s serial] args...` and returns its stdout. A failure is
// an *Error naming the call and adb's stderr, wrapping ErrNotFound,
// ErrUnavailable or ErrNoADB where adb says so.
func (c *Client) Run(ctx context.Context, serial string, args ...string) ([]byte, error) {
	cmd := c.Command(serial, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		return nil, &Error{Args: args, Serial: serial, Err: fmt.Errorf("%w: %v", ErrNoADB, err)}
	}
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() })
	err := cmd.Wait()
	stop()
	if ctx.Err() != nil {
		return out.Bytes(), ctx.Err()
	}
	if err != nil {
		code := -1
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		return out.Bytes(), &Error{Args: args, Serial: serial, Code: code, Stderr: clip(errb.String(), 512), Err: Classify(errb.String())}
	}
	return out.Bytes(), nil
}

// Shell runs script with `adb -s serial shell` (the phone's /system/bin/sh)
// and returns its stdout; a non-zero exit is an *Error.
func (c *Client) Shell(ctx context.Context, serial, script string) ([]byte, error) {
	return c.Run(ctx, serial, "shell", script)
}

// Devices lists the attached phones in every state.
func (c *Client) Devices(ctx context.Context) ([]Device, error) {
	out, err := c.Run(ctx, "", "devices")
	if err != nil {
		return nil, err
	}
	return ParseDevices(string(out))
}

// State returns serial's state (`adb get-state`): ErrNotFound when it is
// not attached.
func (c *Client) State(ctx context.Context, serial string) (string, error) {
	ds, err := c.Devices(ctx)
	if err != nil {
		return "", err
	}
	for _, d := range ds {
		if d.Serial == serial {
			return d.State, nil
		}
	}
	return "", fmt.Errorf("%w: %s", ErrNotFound, serial)
}

// Error is a failed adb call.
type Error struct {
	Args   []string
	Serial string
	// Code is adb's exit status (-1: it did not exit normally).
	Code   int
	Stderr string
	// Err is ErrNotFound, ErrUnavailable or ErrNoADB when adb said so,
	// else nil.
	Err error
}

// Error implements error.
func (e *Error) Error() string {
	what := "adb"
	if e.Serial != "" {
		what += " -s " + e.Serial
	}
	if len(e.Args) > 0 {
		what += " " + clip(e.Args[0], 32)
	}
	msg := strings.TrimSpace(e.Stderr)
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	return fmt.Sprintf("%s: exit status %d: %s", what, e.Code, msg)
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Classify maps adb's stderr to ErrNotFound or ErrUnavailable; nil when it
// says neither (the command itself failed).
func Classify(stderr string) error {
	s := strings.ToLower(stderr)
	switch {
	case strings.Contains(s, "not found") && strings.Contains(s, "device"),
		strings.Contains(s, "no devices/emulators found"),
		strings.Contains(s, "error: closed"),
		strings.Contains(s, "device disconnected"):
		return ErrNotFound
	case strings.Contains(s, "unauthorized"), strings.Contains(s, "device offline"),
		strings.Contains(s, "no permissions"), strings.Contains(s, "in recovery"):
		return ErrUnavailable
	}
	return nil
}

// ShellQuote quotes s for the phone's sh.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func clip(s string, n int) string {
	if len(s) > n {
		s = s[:n] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}

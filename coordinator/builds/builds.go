package builds

import (
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime/debug"
	"strings"
)

// ModulePath is the main module every build's executable must come from.
const ModulePath = "github.com/lesfarm/lesfarm"

// MainPackage is the main package every build's executable is built from
// (./cmd/lesfarm, the single lesfarm binary).
const MainPackage = ModulePath + "/cmd/lesfarm"

// MaxIDLen is the longest build id accepted, in bytes.
const MaxIDLen = 200

// IDPattern is the charset of a build id, the same as a lineage's:
// letters, digits, '.', '_' and '-', starting with a letter or digit
// (e.g. ci-4812, rel-1.3).
const IDPattern = `^[A-Za-z0-9][A-Za-z0-9._-]*$`

var idRE = regexp.MustCompile(IDPattern)

// ValidID reports whether id is a well-formed build id (IDPattern, at most
// MaxIDLen bytes).
func ValidID(id string) bool { return len(id) <= MaxIDLen && idRE.MatchString(id) }

// ErrRefused is wrapped by every error of Inspect and Check: the file or
// the build breaks a registration rule (as opposed to failing to read).
// The error's text is one line that says which rule.
var ErrRefused = errors.New("build refused")

// refused is a one-line ErrRefused error.
type refused struct{ msg string }

func (e *refused) Error() string        { return e.msg }
func (e *refused) Is(target error) bool { return target == ErrRefused }

func refusef(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	return &refused{msg: strings.Join(strings.Fields(msg), " ")} // one line, whatever the parts held
}

// Info is what an executable's Go build information says about it. The
// zero value means nothing is known.
type Info struct {
	// MainPackage and Module are the main package's import path and its
	// module's path; ModuleVersion is that module's version ("(devel)"
	// for a build from a working tree).
	MainPackage   string `json:"main_package"`
	Module        string `json:"module"`
	ModuleVersion string `json:"module_version,omitempty"`
	// GoVersion is the toolchain that built it, e.g. "go1.26.8".
	GoVersion string `json:"go_version"`
	// Platform is GOOS/GOARCH from the build settings.
	Platform string `json:"platform"`
	// Revision and Modified are vcs.revision and vcs.modified; "" and
	// false for a binary built without VCS stamping.
	Revision string `json:"revision,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	// Settings are every build setting (GOOS, GOARCH, CGO_ENABLED,
	// -ldflags, -tags, -trimpath, vcs.*) by key.
	Settings map[string]string `json:"settings"`
}

// Read reads the Go build information of the executable r, of any
// GOOS/GOARCH, without running it, and checks nothing else. A file that
// is not a Go executable (including a truncated one) gives an error
// wrapping ErrRefused. Read never panics on malformed input.
func Read(r io.ReaderAt) (info *Info, err error) {
	defer func() {
		// debug/buildinfo parses untrusted bytes; a parser bug must
		// refuse the file, not take the coordinator down.
		if p := recover(); p != nil {
			info, err = nil, refusef("not a Go executable (unreadable build information: %v)", p)
		}
	}()
	bi, err := buildinfo.Read(r)
	if err != nil {
		return nil, refusef("not a Go executable (%v)", err)
	}
	return fromBuildInfo(bi), nil
}

func fromBuildInfo(bi *debug.BuildInfo) *Info {
	info := &Info{MainPackage: bi.Path, Module: bi.Main.Path, ModuleVersion: bi.Main.Version,
		GoVersion: bi.GoVersion, Settings: make(map[string]string, len(bi.Settings))}
	for _, s := range bi.Settings {
		info.Settings[s.Key] = s.Value
	}
	if goos, goarch := info.Settings["GOOS"], info.Settings["GOARCH"]; goos != "" && goarch != "" {
		info.Platform = goos + "/" + goarch
	}
	info.Revision = info.Settings["vcs.revision"]
	info.Modified = info.Settings["vcs.modified"] == "true"
	return info
}

// Inspect reads the executable r with Read and checks that it is a
// lesfarm binary: main module ModulePath, main package MainPackage, and a
// GOOS/GOARCH in its build settings. Every refusal wraps ErrRefused and
// is one line.
func Inspect(r io.ReaderAt) (*Info, error) {
	info, err := Read(r)
	if err != nil {
		return nil, err
	}
	switch {
	case info.Module != ModulePath:
		mod := info.Module
		if mod == "" {
			mod = "(none)"
		}
		return nil, refusef("a Go executable of module %s (package %s), not of %s", clip(mod), clip(info.MainPackage), ModulePath)
	case info.MainPackage != MainPackage:
		return nil, refusef("a %s executable built from package %s, not %s", ModulePath, clip(info.MainPackage), MainPackage)
	case info.Platform == "":
		return nil, refusef("a Go executable without GOOS/GOARCH in its build information")
	}
	return info, nil
}

// InspectFile is Inspect of the file at path.
func InspectFile(path string) (*Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Inspect(f)
}

// clip bounds a string from a file's build information in a message.
func clip(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

package adb

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/lesfarm/lesfarm/runtime/units"
)

// ErrNoSpace: the phone has less free space on /data than the file needs.
var ErrNoSpace = errors.New("adb: not enough free space on the phone")

// InstallSpec is a file to make present on a phone.
type InstallSpec struct {
	// Local is the file on the host; SHA256 its hex sha256 and Size its
	// size in bytes (the caller verified both).
	Local  string
	SHA256 string
	Size   int64
	// Dir is the phone directory it goes to (RemoteDir/bin, /models).
	Dir string
	// Name is the file's name there; empty means the sha256.
	Name string
	// Exec makes it executable (chmod 755).
	Exec bool
}

// Installed says what Install did.
type Installed struct {
	// Path is the file on the phone.
	Path string
	// Cached is true when a file with the right sha256 was there already
	// and nothing was pushed.
	Cached bool
}

// Install makes spec's file present on serial at Dir/Name, cached by
// sha256: when the phone's copy hashes to SHA256 nothing is pushed.
// Otherwise it checks the free space of /data first (ErrNoSpace when the
// file does not fit), pushes to a .part file, hashes that on the phone
// (a push broken half-way is caught here and removed), and renames it.
func Install(ctx context.Context, c *Client, serial string, spec InstallSpec) (*Installed, error) {
	name := spec.Name
	if name == "" {
		name = spec.SHA256
	}
	dst := path.Join(spec.Dir, name)
	if got, err := remoteSHA256(ctx, c, serial, dst); err == nil && got == spec.SHA256 {
		return &Installed{Path: dst, Cached: true}, nil
	}
	out, err := c.Shell(ctx, serial, "mkdir -p "+ShellQuote(spec.Dir)+" && df -k "+ShellQuote(spec.Dir))
	if err != nil {
		return nil, fmt.Errorf("phone %s: preparing %s: %w", serial, spec.Dir, err)
	}
	if free, err := ParseDFAvailable(string(out)); err == nil && free < spec.Size+(16<<20) {
		return nil, fmt.Errorf("%w: %s needs %s, %s has %s free", ErrNoSpace, path.Base(spec.Local), units.HumanSize(spec.Size), spec.Dir, units.HumanSize(free))
	}
	part := dst + ".part"
	if _, err := c.Run(ctx, serial, "push", spec.Local, part); err != nil {
		return nil, fmt.Errorf("phone %s: push %s: %w", serial, path.Base(spec.Local), err)
	}
	got, err := remoteSHA256(ctx, c, serial, part)
	if err != nil || got != spec.SHA256 {
		_, _ = c.Shell(ctx, serial, "rm -f "+ShellQuote(part))
		if err != nil {
			return nil, fmt.Errorf("phone %s: hashing the pushed %s: %w", serial, path.Base(spec.Local), err)
		}
		return nil, fmt.Errorf("phone %s: the pushed %s hashes to %s on the phone, want %s (a push broken half-way?)", serial, path.Base(spec.Local), got, spec.SHA256)
	}
	mode := "644"
	if spec.Exec {
		mode = "755"
	}
	if _, err := c.Shell(ctx, serial, "chmod "+mode+" "+ShellQuote(part)+" && mv -f "+ShellQuote(part)+" "+ShellQuote(dst)); err != nil {
		return nil, fmt.Errorf("phone %s: installing %s: %w", serial, dst, err)
	}
	return &Installed{Path: dst}, nil
}

// remoteSHA256 is the phone's sha256sum of p.
func remoteSHA256(ctx context.Context, c *Client, serial, p string) (string, error) {
	out, err := c.Shell(ctx, serial, "sha256sum "+ShellQuote(p))
	if err != nil {
		return "", err
	}
	f := strings.Fields(string(out))
	if len(f) == 0 || len(f[0]) != 64 {
		return "", fmt.Errorf("sha256sum printed %q", clip(string(out), 80))
	}
	return strings.ToLower(f[0]), nil
}

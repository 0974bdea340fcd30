package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/internal/embedded"
	"github.com/lesfarm/lesfarm/internal/pglocal"
)

// serveHealthFlags are serve's resource and supervision flags
// (docs/operations.md).
type serveHealthFlags struct {
	minFreeMB      int64
	healthInterval time.Duration
	pgMaxRestarts  int
}

func (f *serveHealthFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.Int64Var(&f.minFreeMB, "min-free-space", 64, "MiB the data dir must keep free: below it /readyz answers 503 and the embedded JetStream is restarted once space is back (negative: no disk check)")
	fl.DurationVar(&f.healthInterval, "health-interval", 5*time.Second, "period of the data dir free-space check and the JetStream probe publish")
	fl.IntVar(&f.pgMaxRestarts, "pg-max-restarts", 5, "consecutive failed restarts of the embedded PostgreSQL after which serve exits non-zero")
}

// config returns the coordinator's health config; with an embedded NATS
// server (deps.ns) it recovers that server's JetStream after a full disk.
func (f *serveHealthFlags) config(deps *farmDeps, dataDir string) (coordinator.HealthConfig, error) {
	if f.healthInterval < 100*time.Millisecond {
		return coordinator.HealthConfig{}, usagef("--health-interval %s: want at least 100ms", f.healthInterval)
	}
	hc := coordinator.HealthConfig{Interval: f.healthInterval, MinFreeBytes: f.minFreeMB << 20}
	if f.minFreeMB < 0 {
		hc.MinFreeBytes = -1
	} else if f.minFreeMB == 0 {
		hc.MinFreeBytes = 1 // zero means the default: keep at least a byte
	}
	if deps.ns != nil {
		ns, dir := deps.ns, filepath.Join(dataDir, "nats")
		hc.RecoverJetStream = func(context.Context) error { return embedded.RestartJetStream(ns, dir) }
	}
	return hc, nil
}

// supervise restarts the local PostgreSQL serve started (none: a channel
// that never fires) and returns where its final failure arrives.
func (f *serveHealthFlags) supervise(ctx context.Context, deps *farmDeps) <-chan error {
	if deps.pg == nil {
		return nil
	}
	return deps.pg.Supervise(ctx, pglocal.SuperviseConfig{MaxFailures: max(f.pgMaxRestarts, 1)})
}

// lockDataDir takes an exclusive lock (flock) on DATA_DIR/serve.lock, so
// two serve processes never share one embedded JetStream store or
// PostgreSQL cluster. The lock is held until release or the process
// exits (a killed serve's lock goes with it). A held lock is an error
// naming the holder's pid.
func lockDataDir(dir string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	path := filepath.Join(dir, "serve.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("data dir lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir %s is in use by another lesfarm serve (pid %s): two coordinators must not share one JetStream store or PostgreSQL cluster; stop it or pass another --data-dir",
				dir, strings.TrimSpace(string(b)))
		}
		return nil, fmt.Errorf("data dir lock %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(fmt.Sprintf("%d\n", os.Getpid())), 0)
	return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
}

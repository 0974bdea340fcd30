package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sys/unix"

	"github.com/lesfarm/lesfarm/protocol"
)

// HealthConfig tunes the resource checks behind /readyz (Config.Health).
// The zero value picks every default.
type HealthConfig struct {
	// Interval is the period of the checks (default 5s).
	Interval time.Duration
	// MinFreeBytes is the free space the data dir must keep (default 64
	// MiB); below it the coordinator is not ready. Negative disables the
	// disk check.
	MinFreeBytes int64
	// ProbeTimeout bounds one JetStream probe publish (default 2s).
	ProbeTimeout time.Duration
	// RecoverJetStream, when set, restarts a JetStream server this process
	// embeds (serve sets it; with an external NATS it stays nil). It is
	// called when the store may be wedged by a full disk — the data dir's
	// free space went below MinFreeBytes or a probe failed — and space has
	// come back; see docs/operations.md.
	RecoverJetStream func(ctx context.Context) error
}

// HealthStreamName is the stream the JetStream probe publishes into: one
// message per coordinator (MaxMsgsPerSubject 1), file storage next to
// TELEMETRY and RESULTS, so a probe write fails when theirs would.
const HealthStreamName = "LESFARM_HEALTH"

// healthSubject is where coordinator name publishes its probes.
func healthSubject(name string) string {
	var b strings.Builder
	for _, r := range name {
		if r == '.' || r == '*' || r == '>' || r <= ' ' {
			r = '_'
		}
		b.WriteRune(r)
	}
	return "lesfarm.health." + b.String()
}

// resources is the last result of the resource checks. It is safe for
// concurrent use.
type resources struct {
	mu        sync.Mutex
	checked   bool
	freeBytes int64
	diskErr   error // data dir below its free-space floor (or unreadable)
	jsErr     error // the probe failed
	wedged    bool  // JetStream may be wedged since the disk was full: recover once space is back
	lastBad   time.Time
	badCount  uint64
	recovered uint64
}

// snapshot returns the readiness error (nil: healthy) and whether the
// farm was unhealthy within window of now.
func (r *resources) snapshot(now time.Time, window time.Duration) (recent bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	err = errors.Join(r.diskErr, r.jsErr)
	return err != nil || (!r.lastBad.IsZero() && now.Sub(r.lastBad) < window), err
}

// freeSpace returns the bytes available to unprivileged writers in dir's
// file system.
func freeSpace(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil //nolint:unconvert // Bsize is int64 here but not on every platform
}

// healthLoop runs the resource checks every Interval until ctx ends.
func (c *Coordinator) healthLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.Health.Interval)
	defer t.Stop()
	for {
		c.checkResources(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkResources measures the data dir's free space and probes
// JetStream, records both (readiness, metrics), logs each change and
// recovers an embedded JetStream that a full disk may have wedged.
func (c *Coordinator) checkResources(ctx context.Context) {
	hc := c.cfg.Health
	var free int64 = -1
	var diskErr error
	if dir := c.cfg.DataDir; dir != "" && hc.MinFreeBytes >= 0 {
		var err error
		if free, err = freeSpace(dir); err != nil {
			diskErr = fmt.Errorf("data dir %s: %w", dir, err)
		} else if free < hc.MinFreeBytes {
			diskErr = fmt.Errorf("data dir %s: %s free, below the %s floor", dir, mib(free), mib(hc.MinFreeBytes))
		}
	}
	jsErr := c.probeJetStream(ctx)
	r := &c.res
	r.mu.Lock()
	prevDisk, prevJS := r.diskErr, r.jsErr
	r.checked, r.freeBytes, r.diskErr, r.jsErr = true, free, diskErr, jsErr
	if diskErr != nil || jsErr != nil {
		r.lastBad = time.Now()
		if prevDisk == nil && prevJS == nil {
			r.badCount++
		}
		r.wedged = r.wedged || diskErr != nil || jsErr != nil
	}
	heal := r.wedged && diskErr == nil && hc.RecoverJetStream != nil
	r.mu.Unlock()
	logChange(ctx, c, "disk", prevDisk, diskErr, "free_bytes", free)
	logChange(ctx, c, "jetstream", prevJS, jsErr)
	if !heal {
		if jsErr == nil && diskErr == nil {
			r.mu.Lock()
			r.wedged = false
			r.mu.Unlock()
		}
		return
	}
	// Space is back after a full disk or a failed probe: a JetStream
	// stream that hit ENOSPC stays wedged (publishes time out) until its
	// store is reopened, so restart the embedded JetStream and probe again.
	c.log.WarnContext(ctx, "coordinator: restarting embedded JetStream after a full disk or failed probe")
	if err := hc.RecoverJetStream(ctx); err != nil {
		c.log.ErrorContext(ctx, "coordinator: JetStream recovery failed", "err", err)
		return
	}
	jsErr = c.probeJetStream(ctx)
	r.mu.Lock()
	r.jsErr = jsErr
	if jsErr == nil {
		r.wedged = false
		r.recovered++
	}
	r.mu.Unlock()
	logChange(ctx, c, "jetstream", prevJS, jsErr)
	if jsErr == nil {
		c.log.InfoContext(ctx, "coordinator: JetStream recovered", "recoveries", r.recovered)
	}
}

// probeJetStream publishes one message into the health stream (creating
// it when missing) and checks that TELEMETRY and RESULTS exist.
func (c *Coordinator) probeJetStream(ctx context.Context) error {
	if c.js == nil {
		return errors.New("jetstream: not connected")
	}
	pctx, cancel := context.WithTimeout(ctx, c.cfg.Health.ProbeTimeout)
	defer cancel()
	subj := healthSubject(c.cfg.Name)
	_, err := c.js.Publish(pctx, subj, []byte(time.Now().UTC().Format(time.RFC3339Nano)))
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrStreamNotFound) {
		// The first probe (or JetStream lost its streams): create the
		// health stream and publish again.
		_, cerr := c.js.CreateOrUpdateStream(pctx, jetstream.StreamConfig{Name: HealthStreamName, Subjects: []string{"lesfarm.health.>"},
			Storage: jetstream.FileStorage, MaxMsgsPerSubject: 1, MaxMsgSize: 256, Discard: jetstream.DiscardOld})
		if cerr == nil {
			_, err = c.js.Publish(pctx, subj, []byte(time.Now().UTC().Format(time.RFC3339Nano)))
		}
	}
	if err != nil {
		return fmt.Errorf("jetstream: probe publish: %w", err)
	}
	for _, name := range []string{protocol.StreamTelemetry, protocol.StreamResults} {
		if _, err := c.js.Stream(pctx, name); err != nil {
			return fmt.Errorf("jetstream: stream %s: %w", name, err)
		}
	}
	return nil
}

// logChange logs a check going bad (warn) or coming back (info).
func logChange(ctx context.Context, c *Coordinator, what string, prev, cur error, kv ...any) {
	switch {
	case prev == nil && cur != nil:
		c.log.WarnContext(ctx, "coordinator: "+what+" unhealthy, not ready", append([]any{"err", cur}, kv...)...)
	case prev != nil && cur == nil:
		c.log.InfoContext(ctx, "coordinator: "+what+" healthy again", kv...)
	}
}

// mib formats bytes as MiB.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// startHealth applies the health defaults and starts the check loop.
func (c *Coordinator) startHealth() {
	hc := &c.cfg.Health
	hc.Interval = cmp.Or(hc.Interval, 5*time.Second)
	hc.ProbeTimeout = cmp.Or(hc.ProbeTimeout, 2*time.Second)
	hc.MinFreeBytes = cmp.Or(hc.MinFreeBytes, 64<<20)
	c.wg.Go(func() { c.healthLoop(c.ctx) })
}

// unhealthyWindow is how long after a failed resource check a run that
// times out is blamed on the farm, not on its build: its agent may still
// be re-sending what the farm could not take.
func (c *Coordinator) unhealthyWindow() time.Duration {
	return 2 * max(c.cfg.HeartbeatTTL, c.cfg.Health.Interval)
}

// FarmUnhealthy reports why the farm cannot take reports now or could not
// recently (nil: it could). A run that times out meanwhile is an
// infrastructure failure.
func (c *Coordinator) FarmUnhealthy() error {
	recent, err := c.res.snapshot(time.Now(), c.unhealthyWindow())
	if err == nil && recent {
		err = errors.New("the farm was unhealthy within " + c.unhealthyWindow().String())
	}
	return err
}

// Ready reports whether the coordinator can serve: NATS connected, the
// database answers, the data dir has its free space and JetStream takes a
// probe (as of the last check).
func (c *Coordinator) Ready(ctx context.Context) error {
	if c.store == nil || c.nc == nil {
		return errors.New("coordinator: starting")
	}
	if !c.nc.IsConnected() {
		return errors.New("coordinator: NATS disconnected")
	}
	if _, err := c.res.snapshot(time.Now(), 0); err != nil {
		return err
	}
	// A readiness probe answers fast: a database that does not answer a
	// ping within 2 s is not ready.
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return c.store.Ping(pctx)
}

package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/lesfarm/lesfarm/agent"
)

// demoPhone is one emulated phone of the demo: a host agent with a
// storage profile and its own device credential.
type demoPhone struct {
	name, profile string
	secret        string
	credID        int64
	cancel        context.CancelFunc
	done          chan struct{}
	idle          chan struct{} // receives when the agent is registered and idle
}

// startPhone registers a device credential for name and starts its agent.
func (d *demoFarm) startPhone(ctx context.Context, name, profile string) error {
	secret, cred, err := d.c.Store().CreateDeviceCredential(ctx, name)
	if err != nil {
		return fmt.Errorf("demo: device credential for %s: %w", name, err)
	}
	ph := &demoPhone{name: name, profile: profile, secret: secret, credID: cred.ID}
	d.phones = append(d.phones, ph)
	return d.launch(ctx, ph)
}

// launch starts ph's agent and waits until it is registered and idle.
func (d *demoFarm) launch(ctx context.Context, ph *demoPhone) error {
	ph.idle = make(chan struct{}, 1)
	a, err := agent.New(agent.Config{
		NATSURL: d.c.NATSURL(), Name: ph.name, User: ph.name, Password: ph.secret, Profile: ph.profile,
		CacheDir: filepath.Join(d.o.dataDir, "agents", ph.name),
		// The phones share this machine's CPUs: the coordinator runs them
		// one at a time (store.HostLabel).
		Labels: withHostLabel(d.labels(), ph.profile, machineHostID()),
		Logger: d.log,
		OnState: func(s string) {
			if s == agent.StateIdle {
				select {
				case ph.idle <- struct{}{}:
				default:
				}
			}
		},
	})
	if err != nil {
		return err
	}
	actx, cancel := context.WithCancel(context.Background())
	ph.cancel, ph.done = cancel, make(chan struct{})
	go func() { defer close(ph.done); _ = a.Run(actx) }()
	select {
	case <-ph.idle:
		return nil
	case <-ph.done:
		return fmt.Errorf("demo: agent %s stopped before registering", ph.name)
	case <-time.After(60 * time.Second):
		return fmt.Errorf("demo: agent %s did not register within 60s", ph.name)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopPhones stops every agent and revokes its credential.
func (d *demoFarm) stopPhones() {
	for _, ph := range d.phones {
		if ph.cancel != nil {
			ph.cancel()
			<-ph.done
		}
		_, _ = d.c.Store().RevokeDeviceCredential(context.Background(), ph.credID)
	}
}

// demoSessionLabel carries the demo session of a demo phone.
const demoSessionLabel = "lesfarm/demo-session"

// labels are the labels of this demo's phones, which its runs select.
func (d *demoFarm) labels() map[string]string {
	return map[string]string{"pool": "demo", demoSessionLabel: d.session}
}

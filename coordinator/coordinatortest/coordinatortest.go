// Package coordinatortest hands tests what a coordinator is given in
// production: a store on a real database and a NATS connection. It is a
// harness package: production code never imports it.
package coordinatortest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// Deps opens a store on dbURL (the pool size the CLI uses) and a NATS
// connection to natsURL with the coordinator's client options plus opts,
// named after the coordinator name. Both close when the test ends; a
// coordinator started after Deps was called stops first (cleanups run last
// in, first out). It fails the test when either cannot be opened.
func Deps(t testing.TB, name, dbURL, natsURL string, opts ...nats.Option) (*store.Store, *nats.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, dbURL, store.Config{MaxConns: 16})
	if err != nil {
		t.Fatalf("coordinatortest: %v", err)
	}
	t.Cleanup(st.Close)
	nc, err := nats.Connect(natsURL, append(coordinator.NATSOptions(name), opts...)...)
	if err != nil {
		t.Fatalf("coordinatortest: connect to NATS at %s: %v", natsURL, err)
	}
	t.Cleanup(nc.Close)
	return st, nc
}

// Config returns cfg with Store and NATS from Deps filled in.
func Config(t testing.TB, cfg coordinator.Config, dbURL, natsURL string, opts ...nats.Option) coordinator.Config {
	t.Helper()
	cfg.Store, cfg.NATS = Deps(t, cfg.Name, dbURL, natsURL, opts...)
	return cfg
}

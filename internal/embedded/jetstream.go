package embedded

import (
	"fmt"
	"log/slog"

	"github.com/nats-io/nats-server/v2/server"
)

// RestartJetStream shuts down and re-enables JetStream on an embedded
// server whose store lives in storeDir (the NATSConfig.StoreDir it was
// started with), reopening every stream and durable consumer from disk.
// A file store that hit ENOSPC keeps failing its writes (publishes time
// out) even after space comes back; reopening it clears that, without a
// process restart and without losing what the streams held. Messages
// whose writes failed were never acknowledged, so publishers resend
// them.
func RestartJetStream(ns *server.Server, storeDir string) error {
	if ns.JetStreamEnabled() {
		if err := ns.ShutdownJetStream(); err != nil {
			return fmt.Errorf("embedded NATS: shut down JetStream: %w", err)
		}
	}
	// Zero limits: the dynamic ones StartNATS started with; the store dir
	// gets its jetstream/ suffix as at start.
	if err := ns.EnableJetStream(&server.JetStreamConfig{StoreDir: storeDir}); err != nil {
		return fmt.Errorf("embedded NATS: re-enable JetStream in %s: %w", storeDir, err)
	}
	return nil
}

// natsLogger sends the embedded server's warnings and errors (an
// out-of-space JetStream store among them) to slog; notices go to debug.
type natsLogger struct{ log *slog.Logger }

func (l natsLogger) Noticef(format string, v ...any) {
	l.log.Debug("nats: " + fmt.Sprintf(format, v...))
}
func (l natsLogger) Warnf(format string, v ...any) { l.log.Warn("nats: " + fmt.Sprintf(format, v...)) }
func (l natsLogger) Fatalf(format string, v ...any) {
	l.log.Error("nats: fatal: " + fmt.Sprintf(format, v...))
}
func (l natsLogger) Errorf(format string, v ...any) {
	l.log.Error("nats: " + fmt.Sprintf(format, v...))
}
func (l natsLogger) Debugf(string, ...any) {}
func (l natsLogger) Tracef(string, ...any) {}

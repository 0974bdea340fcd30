package agent

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lesfarm/lesfarm/lib/backoff"
	"github.com/lesfarm/lesfarm/protocol"
)

// natsOptions builds the connection options: auth, TLS, and reconnects
// forever with exponential backoff and jitter.
func (a *Agent) natsOptions() ([]nats.Option, error) {
	c := a.cfg
	opts := []nats.Option{
		nats.Name("lesfarm-agent " + c.Name),
		// Replies under the device's own inbox prefix: a coordinator that
		// authenticates devices lets each read only its own replies.
		nats.CustomInboxPrefix(protocol.DeviceInboxPrefix(c.Name)),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.Timeout(c.ConnectTimeout),
		nats.CustomReconnectDelay(func(attempts int) time.Duration { return backoff.Delay(attempts, c.ReconnectMin, c.ReconnectMax) }),
		nats.ConnectHandler(func(*nats.Conn) { a.log.Info("agent: connected to NATS"); a.kickHello() }),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			a.log.Info("agent: reconnected to NATS", "url", nc.ConnectedUrlRedacted())
			a.kickHello()
			if a.outbox != nil {
				a.outbox.Reconnected()
			}
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			a.connDoneOnce.Do(func() { close(a.connDone) })
			a.connClosed(nc.LastError())
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				a.log.Warn("agent: disconnected from NATS", "err", err)
			}
		}),
	}
	if c.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	}
	if c.NKeySeedFile != "" {
		o, err := nats.NkeyOptionFromSeed(c.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("agent: nkey seed: %w", err)
		}
		opts = append(opts, o)
	}
	if c.User != "" {
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	if c.Token != "" {
		opts = append(opts, nats.Token(c.Token))
	}
	tc, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, nats.Secure(tc))
	}
	return opts, nil
}

// tlsConfig is the client TLS configuration of TLSCAFile (the only root
// trusted) and TLSCertFile/TLSKeyFile, for NATS and https:// artifact
// downloads; nil when none is set.
func (c *Config) tlsConfig() (*tls.Config, error) {
	if c.TLSCAFile == "" && c.TLSCertFile == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.TLSCAFile != "" {
		pem, err := os.ReadFile(c.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("agent: TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("agent: TLS CA %s holds no PEM certificate", c.TLSCAFile)
		}
		tc.RootCAs = pool
	}
	if c.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("agent: TLS client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func (a *Agent) kickHello() {
	select {
	case a.rehelo <- struct{}{}:
	default:
	}
}

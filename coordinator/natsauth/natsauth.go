// Package natsauth authenticates the clients of the coordinator's embedded
// NATS server and gives each one the permissions of what it is: the
// coordinator itself (an in-process user with full permissions and a secret
// generated at startup) or one device (a secret from `lesfarm token create
// --device ID`, stored hashed in Postgres, bound to that device id).
//
// A device may publish only its own hello and heartbeat requests, its own
// device-scoped telemetry and results (lesfarm.v1.telemetry.<id>.<run>,
// lesfarm.v1.result.<id>.<run>) and replies to the requests it receives; it
// may subscribe only to its own assign and cancel subjects and to its own
// inboxes _INBOX.<id>.> (the replies to its requests and JetStream publish
// acknowledgements; agents connect with protocol.DeviceInboxPrefix).
// Anything else is a permissions violation: the server drops the message and
// tells the client.
//
// The Authenticator plugs into server.Options.CustomClientAuthentication.
// It is safe for concurrent use; Check runs on the server's connection
// goroutines.
package natsauth

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// CoordinatorUser is the user name the coordinator connects as.
const CoordinatorUser = "lesfarm-coordinator"

// Verifier looks a device secret up; *store.Store implements it. It
// returns store.ErrBadDeviceCredential for an unknown or revoked secret.
type Verifier interface {
	VerifyDeviceCredential(ctx context.Context, secret string) (*store.DeviceCredential, error)
}

// Config configures an Authenticator. Zero fields take the documented
// defaults.
type Config struct {
	// Verifier checks device secrets. It may be nil at New and set later
	// with SetVerifier (the store opens after the server starts). Until
	// then a device's connection waits up to ReadyWait, so that it times
	// out and retries rather than being refused (nats.go stops
	// reconnecting after two authorization errors in a row), and only the
	// coordinator connects at once.
	Verifier Verifier
	// ReadyWait bounds how long a device connection waits for the
	// verifier (default 10s); after it the device is refused.
	ReadyWait time.Duration
	// RunOnlySubjects also lets devices publish on the run-only subjects
	// lesfarm.v1.telemetry.<run> and lesfarm.v1.result.<run>, which do not
	// name the device. Agents publish there until they switch to the
	// device-scoped subjects; while allowed, a device can still publish
	// data for a run it does not hold (the fencing token and the store's
	// device check are then the only guards).
	RunOnlySubjects bool
	// VerifyTimeout bounds one credential lookup (default 5s).
	VerifyTimeout time.Duration
	// UnavailableWait is how long a device connection is held, retrying
	// the lookup, when the database cannot answer (default 3s). The
	// server cannot tell a client "retry later": a refusal is an
	// authorization violation, and nats.go stops reconnecting after two
	// in a row, which would lock the device out until its agent
	// restarts. Held past the client's connect timeout (nats.go's
	// default, and the agent's, is 2s), the attempt fails as a timeout,
	// which clients retry; a lookup that succeeds within the wait lets
	// the device in. UnavailableWait must exceed that timeout.
	UnavailableWait time.Duration
	// Logger receives refusals (default slog.Default()).
	Logger *slog.Logger
}

// Authenticator is a server.Authentication for the embedded NATS server.
type Authenticator struct {
	cfg      Config
	log      *slog.Logger
	secret   string
	verifier atomic.Pointer[Verifier]
	ready    chan struct{} // closed by the first SetVerifier
	once     sync.Once

	mu      sync.Mutex
	devices map[uint64]deviceConn // client id -> device connection

	refused        atomic.Uint64
	unavailable    atomic.Uint64
	lastUnavailLog atomic.Int64
}

type deviceConn struct {
	deviceID, secret string
}

var _ server.Authentication = (*Authenticator)(nil)

// New returns an Authenticator with a fresh random coordinator secret.
func New(cfg Config) (*Authenticator, error) {
	cfg.VerifyTimeout = cmp.Or(cfg.VerifyTimeout, 5*time.Second)
	cfg.ReadyWait = cmp.Or(cfg.ReadyWait, 10*time.Second)
	cfg.UnavailableWait = cmp.Or(cfg.UnavailableWait, 3*time.Second)
	a := &Authenticator{cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()), devices: map[uint64]deviceConn{}, ready: make(chan struct{})}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("natsauth: coordinator secret: %w", err)
	}
	a.secret = hex.EncodeToString(b[:])
	if cfg.Verifier != nil {
		a.SetVerifier(cfg.Verifier)
	}
	return a, nil
}

// SetVerifier sets (or replaces) the device secret verifier.
func (a *Authenticator) SetVerifier(v Verifier) {
	a.verifier.Store(&v)
	a.once.Do(func() { close(a.ready) })
}

// CoordinatorOptions returns the nats.go options that authenticate as the
// coordinator: full permissions. They must stay in this process.
func (a *Authenticator) CoordinatorOptions() []nats.Option {
	return []nats.Option{nats.UserInfo(CoordinatorUser, a.secret)}
}

// Refused returns how many connections were refused so far.
func (a *Authenticator) Refused() uint64 { return a.refused.Load() }

// Check implements server.Authentication: it accepts the coordinator user
// with its in-process secret and a device presenting a live credential
// (as password, with the device id as user name, or as a token), and
// registers the permissions of each.
func (a *Authenticator) Check(c server.ClientAuthentication) bool {
	if c.Kind() != server.CLIENT {
		return a.refuse(c, "", "not a client connection")
	}
	o := c.GetOpts()
	if o.Username == CoordinatorUser {
		if subtle.ConstantTimeCompare([]byte(o.Password), []byte(a.secret)) != 1 {
			return a.refuse(c, o.Username, "bad coordinator secret")
		}
		c.RegisterUser(&server.User{Username: CoordinatorUser})
		return true
	}
	secret := cmp.Or(o.Password, o.Token)
	if secret == "" {
		return a.refuse(c, o.Username, "no credential (lesfarm token create --device ID)")
	}
	vp := a.verifier.Load()
	if vp == nil {
		t := time.NewTimer(a.cfg.ReadyWait)
		select {
		case <-a.ready:
			t.Stop()
			vp = a.verifier.Load()
		case <-t.C:
			return a.refuse(c, o.Username, "coordinator not ready")
		}
	}
	cred, err := a.verify(*vp, secret)
	switch {
	case errors.Is(err, store.ErrBadDeviceCredential):
		return a.refuse(c, o.Username, "invalid, revoked or expired device credential")
	case err != nil:
		// Not the credential's fault: the device must retry, not be
		// locked out (see Config.UnavailableWait).
		a.unavailable.Add(1)
		a.logUnavailable(o.Username, addr(c), err)
		return false
	}
	if o.Username != "" && o.Username != cred.DeviceID {
		return a.refuse(c, o.Username, "credential belongs to device "+cred.DeviceID)
	}
	c.RegisterUser(&server.User{Username: cred.DeviceID, Permissions: DevicePermissions(cred.DeviceID, a.cfg.RunOnlySubjects)})
	a.mu.Lock()
	a.devices[c.GetID()] = deviceConn{deviceID: cred.DeviceID, secret: secret}
	a.mu.Unlock()
	a.log.Debug("natsauth: device connected", "device_id", cred.DeviceID, "credential_id", cred.ID, "remote", addr(c))
	return true
}

// verify looks secret up. While the database cannot answer it retries
// until UnavailableWait has passed, so a short outage does not refuse
// anyone and a long one ends the connection by the server's auth timeout
// (a temporary failure) rather than an authorization violation. It returns
// store.ErrBadDeviceCredential only for a secret the database rejected.
func (a *Authenticator) verify(v Verifier, secret string) (*store.DeviceCredential, error) {
	deadline := time.Now().Add(a.cfg.UnavailableWait)
	wait := 50 * time.Millisecond
	for {
		left := time.Until(deadline)
		ctx, cancel := context.WithTimeout(context.Background(), max(min(a.cfg.VerifyTimeout, left), 10*time.Millisecond))
		cred, err := v.VerifyDeviceCredential(ctx, secret)
		cancel()
		if err == nil || errors.Is(err, store.ErrBadDeviceCredential) {
			return cred, err
		}
		if time.Until(deadline) <= wait {
			time.Sleep(max(time.Until(deadline), 0))
			return nil, err
		}
		time.Sleep(wait)
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// Unavailable returns how many device connections were held off because
// the credential could not be checked (database unavailable).
func (a *Authenticator) Unavailable() uint64 { return a.unavailable.Load() }

// logUnavailable logs a held-off connection, at most once per second
// (an outage makes every device retry).
func (a *Authenticator) logUnavailable(user, remote string, err error) {
	now := time.Now().UnixNano()
	last := a.lastUnavailLog.Load()
	if now-last < int64(time.Second) || !a.lastUnavailLog.CompareAndSwap(last, now) {
		return
	}
	a.log.Warn("natsauth: device credential not checkable, the device will retry", "user", user, "remote", remote,
		"held_off_total", a.unavailable.Load(), "err", err)
}

func (a *Authenticator) refuse(c server.ClientAuthentication, user, why string) bool {
	a.refused.Add(1)
	a.log.Warn("natsauth: connection refused", "user", user, "remote", addr(c), "reason", why)
	return false
}

func addr(c server.ClientAuthentication) string {
	if ra := c.RemoteAddress(); ra != nil {
		return ra.String()
	}
	return ""
}

// DevicePermissions returns what device id may do: publish its hello and
// heartbeat requests and its device-scoped telemetry and results (plus the
// run-only data subjects when runOnly is set), reply to requests it
// receives, and subscribe to its assign and cancel subjects and to its own
// inboxes (plus the shared _INBOX.> when runOnly is set, for older agents).
func DevicePermissions(id string, runOnly bool) *server.Permissions {
	pub := []string{
		protocol.HelloSubject(id),
		protocol.HeartbeatSubject(id),
		protocol.Prefix + ".telemetry." + id + ".*",
		protocol.Prefix + ".result." + id + ".*",
	}
	sub := []string{protocol.AssignSubject(id), protocol.CancelSubject(id), protocol.DeviceInboxPrefix(id) + ".>"}
	if runOnly {
		// Agents from before device-scoped subjects. One token: matches
		// lesfarm.v1.telemetry.<run> but never another device's
		// lesfarm.v1.telemetry.<device>.<run>. They also used the shared
		// inbox prefix.
		pub = append(pub, protocol.Prefix+".telemetry.*", protocol.Prefix+".result.*")
		sub = append(sub, "_INBOX.>")
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: sub},
		// Replies to assign and cancel requests: one per request, within
		// a minute.
		Response: &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute},
	}
}

// Revalidate checks the credential of every device connection still open
// on ns and disconnects those whose credential was revoked since they
// connected (revocation is done by another process, `lesfarm token revoke
// --device`). It returns how many it disconnected.
func (a *Authenticator) Revalidate(ctx context.Context, ns *server.Server) int {
	vp := a.verifier.Load()
	if vp == nil {
		return 0
	}
	a.mu.Lock()
	conns := make(map[uint64]deviceConn, len(a.devices))
	for id, d := range a.devices {
		if ns.GetClient(id) == nil {
			delete(a.devices, id) // closed
			continue
		}
		conns[id] = d
	}
	a.mu.Unlock()
	n := 0
	for id, d := range conns {
		vctx, cancel := context.WithTimeout(ctx, a.cfg.VerifyTimeout)
		_, err := (*vp).VerifyDeviceCredential(vctx, d.secret)
		cancel()
		if !errors.Is(err, store.ErrBadDeviceCredential) {
			continue // still valid, or the database is unreachable: keep it
		}
		a.mu.Lock()
		delete(a.devices, id)
		a.mu.Unlock()
		if ns.DisconnectClientByID(id) == nil {
			n++
			a.log.Warn("natsauth: device disconnected, its credential was revoked", "device_id", d.deviceID, "client_id", id)
		}
	}
	return n
}

// Watch runs Revalidate every interval (default 10s) until ctx is done.
func (a *Authenticator) Watch(ctx context.Context, ns *server.Server, interval time.Duration) {
	t := time.NewTicker(cmp.Or(interval, 10*time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.Revalidate(ctx, ns)
		}
	}
}

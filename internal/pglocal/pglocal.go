// Package pglocal starts a real PostgreSQL server from the machine's own
// binaries (initdb, postgres) in a data directory, for the coordinator's
// embedded default and for tests. It is not a mock: the server is the same
// PostgreSQL a deployment would use, just private to this process.
//
// The server listens only on a Unix socket in its socket directory, so it
// never clashes with other servers on TCP ports. An existing data directory
// is reused. When the process runs as root, initdb and postgres run as the
// unprivileged "postgres" user (created if missing), because PostgreSQL
// refuses to run as root.
package pglocal

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoBinaries is returned (wrapped, with an install hint) when no
// PostgreSQL server binaries can be found.
var ErrNoBinaries = errors.New("pglocal: PostgreSQL server binaries (initdb, postgres) not found")

// InstallHint says how to install the PostgreSQL server binaries.
const InstallHint = "install them: Debian/Ubuntu `apt-get install -y postgresql`, macOS `brew install postgresql@16`, or set a database URL instead"

// Config configures a local server. DataDir is required; the zero value of
// every other field picks a default.
type Config struct {
	// DataDir is the cluster directory. It is created and initialised when
	// it does not hold a cluster yet, and reused otherwise.
	DataDir string
	// BinDir holds initdb and postgres. Empty means search PATH, then
	// /usr/lib/postgresql/*/bin (newest version first).
	BinDir string
	// Port names the socket (.s.PGSQL.<port>); no TCP port is opened.
	// Default 5432.
	Port int
	// StartTimeout bounds how long Start waits for the server to accept
	// connections. Default 60s.
	StartTimeout time.Duration
	// Fast disables durability (fsync, synchronous_commit, full_page_writes)
	// for throwaway test clusters. Never set it for data you keep.
	Fast bool
	// Logger receives progress messages. Default slog.Default().
	Logger *slog.Logger
}

// Server is a running local PostgreSQL. It is safe for concurrent use.
type Server struct {
	cfg       Config
	binDir    string
	socketDir string
	cred      *credential
	logPath   string
	shared    bool // started by another process; Stop leaves it running

	mu       sync.Mutex
	p        *proc // the running (or last) postmaster; nil when shared
	stopping bool  // Stop was called: an exit is not a crash
	starts   int   // postmasters started (1 + restarts)
}

// proc is one postmaster process: done is closed once it has exited, with
// waitErr set.
type proc struct {
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

// current returns the running (or last) postmaster, nil if none.
func (s *Server) current() *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p
}

// answers reports whether a server accepts connections on our socket.
func (s *Server) answers(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, s.URL())
	if err != nil {
		return false
	}
	conn.Close(cctx)
	return true
}

// FindBinDir returns the directory holding initdb and postgres. It looks at
// PATH first and then at /usr/lib/postgresql/*/bin, preferring the newest
// major version. pathEnv is the PATH to search (os.Getenv("PATH") normally).
func FindBinDir(pathEnv string) (string, error) {
	var candidates []string
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			continue
		}
		if hasServerBinaries(dir) {
			candidates = append(candidates, dir)
		}
	}
	// Resolve symlinks on PATH (Debian links /usr/bin entries to wrappers;
	// some images link initdb into /usr/local/bin).
	for i, dir := range candidates {
		if p, err := filepath.EvalSymlinks(filepath.Join(dir, "postgres")); err == nil {
			candidates[i] = filepath.Dir(p)
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(matches, func(i, j int) bool { return versionOf(matches[i]) > versionOf(matches[j]) })
	for _, dir := range matches {
		if hasServerBinaries(dir) {
			candidates = append(candidates, dir)
		}
	}
	if len(candidates) == 0 {
		return "", fmt.Errorf("%w: %s", ErrNoBinaries, InstallHint)
	}
	// Prefer the newest version among everything found.
	best := candidates[0]
	for _, c := range candidates[1:] {
		if versionOf(c) > versionOf(best) {
			best = c
		}
	}
	return best, nil
}

func hasServerBinaries(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// versionOf extracts the major version from .../postgresql/<v>/bin, or 0.
func versionOf(dir string) int {
	parts := strings.Split(filepath.ToSlash(dir), "/")
	for i := len(parts) - 1; i > 0; i-- {
		if parts[i] == "bin" {
			if v, err := strconv.Atoi(parts[i-1]); err == nil {
				return v
			}
		}
	}
	return 0
}

// Start initialises the cluster if needed, starts postgres and waits until
// it accepts connections. The server runs until Stop is called (or, on
// Linux, until this process dies).
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("pglocal: Config.DataDir is required")
	}
	cfg.Port = cmp.Or(cfg.Port, 5432)
	cfg.StartTimeout = cmp.Or(cfg.StartTimeout, 60*time.Second)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("pglocal: %w", err)
	}
	cfg.DataDir = dataDir

	binDir := cfg.BinDir
	if binDir == "" {
		binDir, err = FindBinDir(os.Getenv("PATH"))
		if err != nil {
			return nil, err
		}
	} else if !hasServerBinaries(binDir) {
		return nil, fmt.Errorf("%w in %s: %s", ErrNoBinaries, binDir, InstallHint)
	}

	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	if err := prepareDir(dataDir, cred); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, binDir: binDir, cred: cred}
	s.socketDir = socketDirFor(dataDir, cfg.Port)
	if s.socketDir != dataDir {
		if err := prepareDir(s.socketDir, cred); err != nil {
			return nil, err
		}
	}

	// A server another process started on this data dir (e.g. a running
	// 'lesfarm serve' while 'lesfarm token create' runs) is shared, not
	// started twice; Stop then leaves it running.
	if _, err := os.Stat(filepath.Join(dataDir, "postmaster.pid")); err == nil && s.answers(ctx) {
		s.shared = true
		cfg.Logger.InfoContext(ctx, "pglocal: using the server already running on this data dir", "data_dir", dataDir)
		return s, nil
	}
	if _, err := os.Stat(filepath.Join(dataDir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := s.initdb(ctx, cred); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("pglocal: %w", err)
	}
	if err := s.start(ctx, cred); err != nil {
		return nil, err
	}
	return s, nil
}

// socketDirFor returns where the socket lives: the data dir itself, unless
// the socket path would exceed the Unix socket path limit.
func socketDirFor(dataDir string, port int) string {
	sock := filepath.Join(dataDir, fmt.Sprintf(".s.PGSQL.%d", port))
	if len(sock) < 100 {
		return dataDir
	}
	sum := sha256.Sum256([]byte(dataDir))
	return filepath.Join(os.TempDir(), "lesfarm-pgsock-"+hex.EncodeToString(sum[:6]))
}

func (s *Server) initdb(ctx context.Context, cred *credential) error {
	s.cfg.Logger.InfoContext(ctx, "pglocal: initialising cluster", "data_dir", s.cfg.DataDir, "bin_dir", s.binDir)
	cmd := exec.CommandContext(ctx, filepath.Join(s.binDir, "initdb"),
		"-D", s.cfg.DataDir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
	cmd.Dir = s.cfg.DataDir
	cmd.SysProcAttr = sysProcAttr(cred, false)
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(string(out), "locale") {
		// Some minimal systems lack C.UTF-8; plain C always exists.
		cmd = exec.CommandContext(ctx, filepath.Join(s.binDir, "initdb"),
			"-D", s.cfg.DataDir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
		cmd.Dir = s.cfg.DataDir
		cmd.SysProcAttr = sysProcAttr(cred, false)
		out, err = cmd.CombinedOutput()
	}
	if err != nil {
		return fmt.Errorf("pglocal: initdb in %s failed: %v: %s", s.cfg.DataDir, err, lastLines(string(out), 5))
	}
	return nil
}

func (s *Server) start(ctx context.Context, cred *credential) error {
	s.logPath = filepath.Join(s.cfg.DataDir, "server.log")
	mode := os.O_TRUNC // a restart appends: the crash's lines stay
	if s.current() != nil {
		mode = os.O_APPEND
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|mode, 0o644)
	if err != nil {
		return fmt.Errorf("pglocal: open server log: %w", err)
	}
	defer logf.Close()
	if cred != nil {
		_ = os.Chown(s.logPath, cred.uid, cred.gid)
	}
	args := []string{"-D", s.cfg.DataDir, "-k", s.socketDir, "-p", strconv.Itoa(s.cfg.Port),
		"-c", "listen_addresses=", "-c", "max_connections=200"}
	if s.cfg.Fast {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	// Not CommandContext: the server must outlive the start context.
	cmd := exec.Command(filepath.Join(s.binDir, "postgres"), args...)
	cmd.Dir = s.cfg.DataDir
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr(cred, true)
	// The parent-death signal fires when the creating OS thread exits, not
	// the process (go.dev/issue/27505), so start and wait on one goroutine
	// locked to its thread: the thread lives exactly as long as postgres.
	started := make(chan error, 1)
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return // the locked thread exits with the goroutine; nothing to signal
		}
		started <- nil
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("pglocal: start postgres: %w", err)
	}
	s.mu.Lock()
	s.p = p
	s.starts++
	s.mu.Unlock()

	deadline := time.Now().Add(s.cfg.StartTimeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, s.URL())
		cancel()
		if err == nil {
			conn.Close(ctx)
			s.cfg.Logger.InfoContext(ctx, "pglocal: server ready", "socket_dir", s.socketDir, "port", s.cfg.Port)
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("pglocal: postgres exited during startup (%v): %s", p.waitErr, s.logTail())
		case <-ctx.Done():
			_ = s.stopProc(p)
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = s.stopProc(p)
			return fmt.Errorf("pglocal: postgres did not accept connections within %s: %s", s.cfg.StartTimeout, s.logTail())
		}
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	return lastLines(string(b), 5)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// URL returns a connection URL for the "postgres" database as the
// "postgres" superuser over the Unix socket.
func (s *Server) URL() string { return s.DatabaseURL("postgres") }

// DatabaseURL returns a connection URL for database name.
func (s *Server) DatabaseURL(name string) string {
	q := url.Values{}
	q.Set("host", s.socketDir)
	q.Set("port", strconv.Itoa(s.cfg.Port))
	q.Set("sslmode", "disable")
	return (&url.URL{Scheme: "postgres", User: url.User("postgres"), Path: "/" + name, RawQuery: q.Encode()}).String()
}

// Stop shuts the server down (fast shutdown: SIGINT), waiting up to 30s
// before killing it. A server that another process started is left
// running. It is safe to call more than once.
func (s *Server) Stop() error {
	s.mu.Lock()
	s.stopping = true
	p := s.p
	s.mu.Unlock()
	if s.shared || p == nil {
		return nil
	}
	return s.stopProc(p)
}

// stopProc shuts one postmaster down (SIGINT, SIGKILL after 30s).
func (s *Server) stopProc(p *proc) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
		return nil
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.New("pglocal: postgres did not stop within 30s and was killed")
	}
}

// credential is the uid/gid the server processes run as (nil: ours).
type credential struct{ uid, gid int }

// serverCredential returns nil unless running as root, in which case it
// returns the "postgres" user, creating it when missing.
func serverCredential() (*credential, error) {
	if runtime.GOOS == "windows" || os.Geteuid() != 0 {
		return nil, nil
	}
	c, err := lookupUser("postgres")
	if err == nil {
		return c, nil
	}
	out, uerr := exec.Command("useradd", "--system", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", "postgres").CombinedOutput()
	if uerr != nil {
		return nil, fmt.Errorf("pglocal: running as root needs the unprivileged user \"postgres\", and creating it failed: %v: %s", uerr, strings.TrimSpace(string(out)))
	}
	return lookupUser("postgres")
}

// prepareDir creates dir (0700, as PostgreSQL demands for data dirs) and
// hands it to cred. As root it also checks that every ancestor is
// traversable by the postgres user.
func prepareDir(dir string, cred *credential) error {
	if cred != nil {
		// Parents we create must be traversable by the postgres user.
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return fmt.Errorf("pglocal: create %s: %w", filepath.Dir(dir), err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pglocal: create %s: %w", dir, err)
	}
	if cred == nil {
		return nil
	}
	if err := os.Chown(dir, cred.uid, cred.gid); err != nil {
		return fmt.Errorf("pglocal: chown %s to postgres: %w", dir, err)
	}
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("pglocal: %w", err)
		}
		if fi.Mode().Perm()&0o001 == 0 && !ownedBy(fi, cred) {
			return fmt.Errorf("pglocal: %s is not reachable by the postgres user (directory %s is not world-traversable); choose a data dir outside it, e.g. /var/lib/lesfarm", dir, p)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

package cli

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"
)

// pprofAddrEnv names the environment variable that makes serve expose
// net/http/pprof on a separate listener (e.g. 127.0.0.1:6060), for
// profiling a coordinator under load; loadtest's self-started coordinator
// inherits it. Unset, nothing listens.
const pprofAddrEnv = "LESFARM_PPROF_ADDR"

// startPprof serves /debug/pprof/ on the address in LESFARM_PPROF_ADDR, if
// set, and returns a stop function (a no-op when unset).
func startPprof(log *slog.Logger) (func(), error) {
	addr := os.Getenv(pprofAddrEnv)
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, errors.New("serve: " + pprofAddrEnv + ": " + err.Error())
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("serve: pprof listening", "addr", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}

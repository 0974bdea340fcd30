// Package cli implements the lesfarm command line. Each subcommand lives in
// its own file and registers itself with register, so the root command never
// needs to know the full list and subcommands can be added independently.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// Env is what every subcommand receives: its standard streams and the
// process context, which is cancelled on SIGINT or SIGTERM.
type Env struct {
	Ctx    context.Context
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// builders holds the registered subcommand constructors, keyed by name so
// registration order does not affect help output.
var builders = map[string]func(*Env) *cobra.Command{}

// register adds a subcommand constructor. It is called from init functions
// of the files that implement the subcommands.
func register(name string, build func(*Env) *cobra.Command) {
	if _, dup := builders[name]; dup {
		panic("cli: duplicate command " + name)
	}
	builders[name] = build
}

// UsageError marks an error caused by how the command was invoked (bad flag,
// missing argument, invalid value). Main exits with code 2 for it.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// ExitError makes Main exit with Code after printing Msg (when not empty)
// as its one-line error: for outcomes that are not failures of the
// command itself, such as regressions found (ExitRegression).
type ExitError struct {
	Code int
	Msg  string
}

func (e *ExitError) Error() string { return e.Msg }

// ExitRegression is the exit code of a command that ran fine and found a
// regression (regress detect, run --wait), so CI can fail the build.
const ExitRegression = 3

// usagef returns a UsageError with a formatted message.
func usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// NewRoot builds the root command with every registered subcommand.
func NewRoot(env *Env) *cobra.Command {
	root := &cobra.Command{
		Use:   "lesfarm",
		Short: "Benchmark the LES MoE runtime continuously across a fleet of phones",
		Long: `lesfarm is a device farm for the LES (Lookahead Expert Scheduling) runtime,
which runs large Mixture-of-Experts models on phones with expert weights
streamed from flash.

One binary holds every role:
  serve       the coordinator (REST API, Postgres, NATS, nightly suites, regressions)
  agent       a host agent, optionally emulating a phone's storage
  generate    run the LES runtime on a GGUF model
  bench       measure the runtime (tok/s, LES ladder)
  run         trigger a benchmark run through the REST API (for CI)

Run 'lesfarm COMMAND --help' for the details of each command.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       BuildVersion(),
	}
	root.SetVersionTemplate("lesfarm {{.Version}}\n")
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &UsageError{Err: err}
	})
	root.PersistentPreRun = func(cmd *cobra.Command, _ []string) { warnDeprecated(cmd, env.Stderr) }
	names := make([]string, 0, len(builders))
	for name := range builders {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		cmd := builders[name](env)
		cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
			return &UsageError{Err: err}
		})
		root.AddCommand(cmd)
	}
	return root
}

// Main runs the command line with args and returns the process exit code:
// 0 on success, 2 for usage errors, ExitRegression (3) when a command
// found a regression, and 1 for any other failure. Errors are
// printed as one line, never as a stack trace.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env := &Env{Ctx: ctx, Stdin: stdin, Stdout: stdout, Stderr: stderr}
	root := NewRoot(env)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var xe *ExitError
	if errors.As(err, &xe) {
		if xe.Msg != "" {
			fmt.Fprintf(stderr, "lesfarm: %s\n", xe.Msg)
		}
		return xe.Code
	}
	fmt.Fprintf(stderr, "lesfarm: %v\n", err)
	var ue *UsageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		return 2
	}
	return 1
}

// isCobraUsage reports whether err is one of cobra's own argument errors,
// which it returns as plain errors.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "requires at least", "requires at most", "invalid argument", "flag needs an argument", "required flag"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

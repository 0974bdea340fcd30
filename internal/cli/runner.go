package cli

import (
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/agent"
)

func init() { register("runner", newRunnerCmd) }

func newRunnerCmd(env *Env) *cobra.Command {
	var logLevel string
	cmd := &cobra.Command{
		Use:   "runner",
		Short: "Run one benchmark job for an agent (internal: started by the agent)",
		Long: `runner is the child side of the runner protocol (docs/protocol.md, "Runner
protocol"). It is not meant to be run by hand: an agent benchmarking this
build starts it as 'EXE runner' in its own process group.

It writes a hello line (protocol version, VCS revision, Go version) on
stdout, reads one job (JSON) from stdin, runs it with the same code the
agent's embedded runtime uses, and writes JSON lines on stdout: config and
position changes, one step line per forward step (the runtime's token and
layer events), one result per config, then done. Logs go to stderr.

Exit status: 0 after done; 1 when the job could not run or finish (an error
line says why when stdout still takes one); 2 on a usage error.`,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var lv slog.Level
			if err := lv.UnmarshalText([]byte(logLevel)); err != nil {
				return usagef("--log-level %q invalid: use debug, info, warn or error", logLevel)
			}
			log := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: lv}))
			return agent.ServeRunner(cmd.Context(), env.Stdin, env.Stdout, log)
		},
	}
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level on stderr: debug, info, warn or error")
	return cmd
}

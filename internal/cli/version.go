package cli

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func init() { register("version", newVersionCmd) }

// BuildVersion returns the module version and VCS revision of this binary,
// as recorded by the Go toolchain, e.g. "v0.0.0-... (rev 1a2b3c4, modified)".
func BuildVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := info.Main.Version
	var rev, modified, when string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		case "vcs.time":
			when = ", " + s.Value
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		return fmt.Sprintf("%s (rev %s%s%s, %s)", v, rev, modified, when, info.GoVersion)
	}
	return fmt.Sprintf("%s (%s)", v, info.GoVersion)
}

func newVersionCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the build of this binary (module version and VCS revision)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(env.Stdout, "lesfarm %s\n", BuildVersion())
			return nil
		},
	}
}

package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// deprecatedAnnotation marks a flag as an old spelling; its value is the
// advice printed when it is used ("use --device-token").
const deprecatedAnnotation = "lesfarm/deprecated"

// aliasFlag defines old as a deprecated spelling of the flag name of f:
// both set the same value, old is hidden from help, and using it prints
// a warning on standard error (warnDeprecated). Old spellings are kept
// for one release.
func aliasFlag(f *pflag.FlagSet, old, name string) {
	nf := f.Lookup(name)
	if nf == nil {
		panic("cli: alias of unknown flag --" + name)
	}
	f.Var(nf.Value, old, nf.Usage)
	of := f.Lookup(old)
	of.NoOptDefVal = nf.NoOptDefVal
	deprecateFlag(f, old, "use --"+name)
}

// deprecateFlag hides the flag old of f from help and makes using it
// print "--old is deprecated: ADVICE" on standard error.
func deprecateFlag(f *pflag.FlagSet, old, advice string) {
	of := f.Lookup(old)
	if of == nil {
		panic("cli: deprecating unknown flag --" + old)
	}
	of.Hidden = true
	if of.Annotations == nil {
		of.Annotations = map[string][]string{}
	}
	of.Annotations[deprecatedAnnotation] = []string{advice}
}

// warnDeprecated prints one line on w for each deprecated spelling given
// to cmd. It runs before every command (NewRoot's PersistentPreRun), on
// standard error so that a command's JSON on standard output stays clean.
func warnDeprecated(cmd *cobra.Command, w io.Writer) {
	cmd.Flags().Visit(func(fl *pflag.Flag) {
		if a, ok := fl.Annotations[deprecatedAnnotation]; ok {
			fmt.Fprintf(w, "lesfarm: warning: --%s is deprecated and goes in the next release: %s\n", fl.Name, a[0])
		}
	})
}

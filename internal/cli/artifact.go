package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/coordinator/api/client"
)

func init() { register("artifact", newArtifactCmd) }

// serverFlags are the flags of commands that talk to a coordinator's REST API.
type serverFlags struct {
	Server string
	Token  string
	CA     string // PEM CA file for an https:// server (lab CA)
}

func addServerFlags(cmd *cobra.Command, f *serverFlags) {
	def := os.Getenv("LESFARM_SERVER")
	if def == "" {
		def = "http://127.0.0.1:8080"
	}
	cmd.Flags().StringVar(&f.Server, "server", def, "coordinator base URL (env LESFARM_SERVER)")
	cmd.Flags().StringVar(&f.Token, "token", os.Getenv("LESFARM_TOKEN"), "API token from 'lesfarm token create' (env LESFARM_TOKEN)")
	cmd.Flags().StringVar(&f.CA, "ca", os.Getenv("LESFARM_CA"), "PEM CA certificate that signed an https:// server's certificate, e.g. the ca.pem of 'lesfarm tls init' (env LESFARM_CA)")
}

func (f *serverFlags) client() (*client.Client, error) {
	c, err := client.New(f.Server, f.Token, client.WithCAFile(f.CA))
	if err != nil {
		return nil, usagef("%v", err)
	}
	return c, nil
}

func newArtifactCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "artifact add|gc",
		Short: "Manage the coordinator's content-addressed artifact store (model files)",
		Long: `artifact talks to the coordinator's artifact store: files (usually GGUF
models) kept under their sha256, which job specs reference by digest and
agents download with resumable HTTP Range requests.`,
	}
	cmd.AddCommand(newArtifactAddCmd(env), newArtifactGCCmd(env))
	return cmd
}

func newArtifactGCCmd(env *Env) *cobra.Command {
	var sf serverFlags
	var grace time.Duration
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "gc [--grace 24h] [--dry-run]",
		Short: "Remove artifacts no suite, schedule or unfinished run references",
		Long: `gc asks the coordinator to delete artifacts that no suite, schedule
override or unfinished run references, that are not pinned, and that were
neither uploaded nor downloaded within --grace. It also removes stray files
and abandoned partial uploads. --dry-run only lists what would go.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if grace < 0 {
				return usagef("artifact gc: --grace must not be negative")
			}
			c, err := sf.client()
			if err != nil {
				return err
			}
			rep, err := c.GCArtifacts(env.Ctx, grace, dryRun)
			if err != nil {
				return fmt.Errorf("artifact gc: %w", err)
			}
			verb := "removed"
			if rep.DryRun {
				verb = "would remove"
			}
			for _, sha := range rep.Removed {
				fmt.Fprintf(env.Stdout, "%s %s\n", verb, sha)
			}
			for _, sha := range rep.StrayFiles {
				fmt.Fprintf(env.Stdout, "%s stray file %s\n", verb, sha)
			}
			fmt.Fprintf(env.Stderr, "%s %d artifact(s), %d stray file(s), %d partial upload(s); %d bytes\n",
				verb, len(rep.Removed), len(rep.StrayFiles), rep.PartialFiles, rep.FreedBytes)
			return nil
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", 24*time.Hour, "keep artifacts uploaded or downloaded within this long")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only report what would be removed")
	addServerFlags(cmd, &sf)
	return cmd
}

func newArtifactAddCmd(env *Env) *cobra.Command {
	var sf serverFlags
	var name string
	var quiet bool
	cmd := &cobra.Command{
		Use:   "add FILE",
		Short: "Upload a file to the artifact store and print its sha256",
		Long: `add hashes FILE, then streams it to POST /v1/artifacts with a progress bar
on stderr; the server checks the content against the hash. It prints the
sha256 (the artifact's id, to put in job specs as model.sha256) on stdout.
Uploading content that is already stored is cheap and not an error.`,
		Example: "  lesfarm artifact add models/qwen3-30b-a3b-q4_k_m.gguf --token $LESFARM_TOKEN",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := sf.client()
			if err != nil {
				return err
			}
			path := args[0]
			f, err := os.Open(path)
			if err != nil {
				return fmt.Errorf("artifact add: %w", err)
			}
			defer f.Close()
			fi, err := f.Stat()
			if err != nil {
				return fmt.Errorf("artifact add: %w", err)
			}
			if !fi.Mode().IsRegular() {
				return usagef("artifact add: %s is not a regular file", path)
			}
			if name == "" {
				name = filepath.Base(path)
			}
			bar := func(desc string) *progressbar.ProgressBar {
				if quiet {
					return progressbar.DefaultBytesSilent(fi.Size(), desc)
				}
				return newBytesBar(env, fi.Size(), desc, false, progressbar.OptionShowTotalBytes(true))
			}
			h := sha256.New()
			hb := bar("hashing  ")
			if _, err := io.Copy(io.MultiWriter(h, hb), f); err != nil {
				return fmt.Errorf("artifact add: %w", err)
			}
			hb.Finish()
			sum := hex.EncodeToString(h.Sum(nil))
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return fmt.Errorf("artifact add: %w", err)
			}
			ub := bar("uploading")
			r := progressbar.NewReader(f, ub)
			a, created, err := c.UploadArtifact(env.Ctx, &r, fi.Size(), name, sum)
			if err != nil {
				return fmt.Errorf("artifact add: %w", err)
			}
			ub.Finish()
			state := "stored"
			if !created {
				state = "already present"
			}
			fmt.Fprintf(env.Stderr, "%s: %s (%d bytes)\n", name, state, a.Size)
			fmt.Fprintln(env.Stdout, a.SHA256)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "name recorded with the artifact (default: the file's base name)")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bar")
	addServerFlags(cmd, &sf)
	return cmd
}

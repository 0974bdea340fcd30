package cli

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/agent"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/calibrate"
	"github.com/lesfarm/lesfarm/runtime/units"
)

func init() { register("profile", newProfileCmd) }

func newProfileCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "profile",
		Short: "Device profiles: measure this device into a profile YAML",
	}
	cmd.AddCommand(newProfileMeasureCmd(env), newProfileUploadCmd(env))
	return cmd
}

func newProfileMeasureCmd(env *Env) *cobra.Command {
	var (
		name, out, dir, fileSize, refModel string
		readFile, pageFile, experts        string
		sizes, blockSizes                  []string
		queueDepths                        []int
		copySize                           string
		pa                                 profileADB
		cellTime                           time.Duration
		threads                            int
		quiet, upload                      bool
		device                             string
		sf                                 serverFlags
	)
	cmd := &cobra.Command{
		Use:   "measure --name NAME -o FILE",
		Short: "Measure this device's flash, memory and compute into a storage profile",
		Long: `Measure runs on the device to profile (a host, or a phone through the agent's
host binary) and writes a profile YAML that --profile FILE reads back:

  flash    O_DIRECT reads of a test file in --dir (it must be on the
           storage to measure), or of --read-file as it is, from 4 KiB to
           4 MiB at random offsets, the --model's expert blob size (and
           --sizes) as the store reads experts (one layer's routed set of
           adjacent blobs at a time), and with --model the naive mode's page
           runs (half the read-ahead window and the window, one preadv of
           page buffers each; from --page-file if given), at queue
           depths 1 to 32; the YAML records each row's pattern:
           bandwidth is the best throughput, latency the QD 1 4 KiB read
           less its transfer, max_in_flight the smallest queue depth within
           90% of the best 4 KiB throughput
  memory   memory copy bandwidth (recorded in the file's comments)
  compute  decode of a reference model (--model, or a small synthetic
           qwen3moe): its weight bytes and FLOPs per second become the
           compute section that device time uses, divided by how much more
           CPU a token takes with its experts served by the store (from
           --experts if given), the path the ladder's modes compute on
  naive    the OS page size and the block device's read_ahead_kb

Every cell of the read grid is written as a comment. An interrupted
measurement writes nothing (the file is renamed into place when complete)
and removes its test files.

With --adb SERIAL the measurement runs on an Android phone instead: the
linux/arm64 lesfarm of --adb-exe is pushed to /data/local/tmp/lesfarm/ (cached
by sha256, as the agent's payload) with --model, --experts, --read-file and
--page-file, and 'profile measure' runs there over adb shell: the flash grid
reads a test file on the phone's /data/local/tmp with O_DIRECT (--dir is then
a phone directory), and the compute is the phone's. The profile is written
here (-o).

With --upload --device ID the profile is then stored on the coordinator
(--server, --token) as device ID's measured profile, so any host can run
an emulated twin of it: lesfarm agent --profile twin:ID.`,
		Example: `  lesfarm profile measure --name my-laptop -o my-laptop.yaml
  lesfarm bench --model m.gguf --experts m.packed.gguf --ladder --profile my-laptop.yaml --expert-budget 20%
  lesfarm profile measure --name pixel-8-a -o pixel-8-a.yaml --upload --device pixel-8-a --server http://farm:8080
  lesfarm profile measure --adb R5CT40ABCDE --adb-exe lesfarm-linux-arm64 --name galaxy-s23 -o s23.yaml --upload --server http://farm:8080`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" || out == "" {
				return usagef("profile measure needs --name NAME and -o FILE")
			}
			size, err := units.ParseSize(fileSize)
			if err != nil || size < 16<<20 {
				return usagef("--file-size %q must be a size of at least 16MiB (e.g. 512MiB)", fileSize)
			}
			if cellTime < time.Millisecond || cellTime > time.Minute {
				return usagef("--cell-time %v must be between 1ms and 1m", cellTime)
			}
			if pa.serial != "" && upload && device == "" {
				device = agent.PhoneDeviceID("", pa.serial) // lesfarm agent --adb's id with the default --name
			}
			if upload && !protocol.ValidDeviceID(device) {
				return usagef("--upload needs --device ID: the fleet id of this device (1-64 letters, digits, '_' or '-')")
			}
			if threads < 1 {
				return usagef("--threads must be at least 1")
			}
			if refModel != "" {
				if _, err := os.Stat(refModel); err != nil {
					return usagef("--model %s: %v", refModel, err)
				}
			}
			if readFile != "" {
				if st, err := os.Stat(readFile); err != nil || !st.Mode().IsRegular() {
					return usagef("--read-file %s: not a readable regular file", readFile)
				}
			}
			if pageFile != "" {
				if st, err := os.Stat(pageFile); err != nil || !st.Mode().IsRegular() {
					return usagef("--page-file %s: not a readable regular file", pageFile)
				}
			}
			cfg := calibrate.Config{Name: name, Dir: dir, FileBytes: size, CellTime: cellTime, Model: refModel, Threads: threads, ReadFile: readFile, PageFile: pageFile, Experts: experts}
			for _, z := range sizes {
				n, err := units.ParseSize(z)
				if err != nil || n < 4096 || n%4096 != 0 || n > 64<<20 {
					return usagef("--sizes %q: each size must be a multiple of 4KiB up to 64MiB (e.g. 864KiB)", z)
				}
				cfg.ExpertSizes = append(cfg.ExpertSizes, n)
			}
			for _, z := range blockSizes {
				n, err := units.ParseSize(z)
				if err != nil || n < 4096 || n%4096 != 0 || n > 64<<20 {
					return usagef("--block-sizes %q: each size must be a multiple of 4KiB up to 64MiB", z)
				}
				cfg.BlockSizes = append(cfg.BlockSizes, n)
			}
			for _, q := range queueDepths {
				if q < 1 || q > 1024 {
					return usagef("--queue-depths: %d is not between 1 and 1024", q)
				}
			}
			cfg.QueueDepths = queueDepths
			if cfg.CopyBytes, err = units.ParseSize(copySize); err != nil || cfg.CopyBytes < 1<<20 {
				return usagef("--copy-size %q must be a size of at least 1MiB", copySize)
			}
			if pa.serial != "" {
				return pa.measure(env, cmd, out, upload, device, &sf, quiet)
			}
			if !quiet {
				cfg.Progress = func(line string) { fmt.Fprintln(env.Stderr, "profile: "+line) }
			}
			res, err := calibrate.Measure(env.Ctx, cfg)
			if err != nil {
				if env.Ctx.Err() != nil || errors.Is(err, env.Ctx.Err()) {
					return fmt.Errorf("profile measure: interrupted; no profile written")
				}
				return fmt.Errorf("profile measure: %w", err)
			}
			if err := calibrate.WriteFile(out, res.YAML()); err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "wrote %s: bandwidth %.2f GB/s, latency %v, max_in_flight %d; compute %.2f GB/s of weights, %.2f GFLOP/s\n",
				out, res.Profile.Bandwidth/1e9, res.Profile.Latency, res.Profile.MaxInFlight, res.Profile.Compute.WeightBandwidth/1e9, res.Profile.Compute.Throughput/1e9)
			if upload {
				return uploadProfile(env, &sf, device, out)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "profile name (required)")
	f.StringVarP(&out, "output", "o", "", "profile YAML to write (required)")
	f.StringVar(&dir, "dir", "", "directory on the storage to measure (default: the temp dir)")
	f.StringVar(&fileSize, "file-size", "512MiB", "size of the flash test file")
	f.DurationVar(&cellTime, "cell-time", 150*time.Millisecond, "how long each (block size, queue depth) cell reads")
	f.StringVar(&refModel, "model", "", "reference model for the compute speed (default: a small synthetic qwen3moe); its packed expert read size joins the flash grid")
	f.StringVar(&readFile, "read-file", "", "measure the flash grid on this existing file, read-only (e.g. the model file the store reads), instead of a fresh test file")
	f.StringVar(&experts, "experts", "", "with --model: serve its experts from this file (its packed form) when measuring the streamed compute")
	f.StringVar(&pageFile, "page-file", "", "read the naive page-run rows from this file instead (e.g. the unpacked model naive reads, with --read-file the packed one)")
	f.StringSliceVar(&sizes, "sizes", nil, "extra read sizes for the flash grid (multiples of 4KiB), e.g. a model's expert blob")
	f.IntVar(&threads, "threads", 1, "decode threads for the compute measurement")
	f.StringSliceVar(&blockSizes, "block-sizes", nil, "the flash grid's read sizes (default 4KiB to 4MiB by x4)")
	f.IntSliceVar(&queueDepths, "queue-depths", nil, "the flash grid's queue depths (default 1,2,4,8,16,32)")
	f.StringVar(&copySize, "copy-size", "256MiB", "the memory copy benchmark's buffer")
	pa.register(f)
	f.BoolVar(&quiet, "quiet", false, "no progress lines")
	f.BoolVar(&upload, "upload", false, "store the profile on the coordinator as --device's measured profile (for agent --profile twin:ID)")
	f.StringVar(&device, "device", "", "with --upload: the fleet device id of this device")
	addServerFlags(cmd, &sf)
	return cmd
}

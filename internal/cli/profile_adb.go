package cli

import (
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lesfarm/lesfarm/agent"
	"github.com/lesfarm/lesfarm/agent/adb"
	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/runtime/calibrate"
)

// profileADB are profile measure's flags for measuring a phone over adb
// (--adb SERIAL); docs/phones.md.
type profileADB struct {
	serial, path, exe string
}

func (p *profileADB) register(f *pflag.FlagSet) {
	f.StringVar(&p.serial, "adb", "", "measure the Android phone with this adb serial: the measurement runs on the phone (its /data/local/tmp flash, its CPUs)")
	f.StringVar(&p.path, "adb-path", "adb", "with --adb: the adb executable")
	f.StringVar(&p.exe, "adb-exe", "", "with --adb: the lesfarm executable the phone runs, a static linux/arm64 build (CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go build ./cmd/lesfarm); default this lesfarm when it is one")
}

// measureForwarded are the flags of profile measure passed as they are to
// the measurement on the phone.
var measureForwarded = []string{"name", "dir", "file-size", "cell-time", "sizes", "block-sizes", "queue-depths", "copy-size", "threads"}

// measureFiles are the flags naming host files the measurement on the
// phone reads: each is pushed and the flag given its phone path.
var measureFiles = []string{"model", "experts", "read-file", "page-file"}

// measure runs profile measure on the phone, writes the profile to out and
// uploads it when asked.
func (p *profileADB) measure(env *Env, cmd *cobra.Command, out string, upload bool, device string, sf *serverFlags, quiet bool) error {
	exe := p.exe
	if exe == "" {
		if runtime.GOOS != "linux" || runtime.GOARCH != "arm64" {
			return usagef("--adb needs --adb-exe PATH: a static linux/arm64 lesfarm for the phone (CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go build ./cmd/lesfarm); this one is %s/%s", runtime.GOOS, runtime.GOARCH)
		}
		self, err := os.Executable()
		if err != nil {
			return err
		}
		exe = self
	} else if st, err := os.Stat(exe); err != nil || !st.Mode().IsRegular() {
		return usagef("--adb-exe %s: not a readable file", exe)
	}
	m := agent.PhoneMeasure{ADB: &adb.Client{Path: p.path}, Serial: p.serial, Exe: exe, Files: map[string]string{}}
	f := cmd.Flags()
	for _, name := range measureFiles {
		if fl := f.Lookup(name); fl.Changed {
			m.Files["--"+name] = fl.Value.String()
		}
	}
	for _, name := range measureForwarded {
		fl := f.Lookup(name)
		if !fl.Changed {
			continue
		}
		v := fl.Value.String()
		if sv, ok := fl.Value.(pflag.SliceValue); ok {
			v = strings.Join(sv.GetSlice(), ",")
		}
		m.Args = append(m.Args, "--"+name+"="+v)
	}
	if quiet {
		m.Args = append(m.Args, "--quiet")
	} else {
		m.Progress = func(line string) { fmt.Fprintf(env.Stderr, "phone %s: %s\n", p.serial, line) }
	}
	data, err := agent.MeasurePhone(env.Ctx, m)
	if err != nil {
		return fmt.Errorf("profile measure: %w", err)
	}
	prof, err := profile.Parse(data)
	if err != nil {
		return fmt.Errorf("profile measure: %w", err)
	}
	if err := calibrate.WriteFile(out, data); err != nil {
		return err
	}
	line := fmt.Sprintf("wrote %s: phone %s: bandwidth %.2f GB/s, latency %v, max_in_flight %d", out, p.serial, prof.Bandwidth/1e9, prof.Latency, prof.MaxInFlight)
	if c := prof.Compute; c != nil {
		line += fmt.Sprintf("; compute %.2f GB/s of weights, %.2f GFLOP/s", c.WeightBandwidth/1e9, c.Throughput/1e9)
	}
	fmt.Fprintln(env.Stdout, line)
	if upload {
		return uploadProfile(env, sf, device, out)
	}
	return nil
}

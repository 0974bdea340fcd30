package agent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/agent/adb"
	"github.com/lesfarm/lesfarm/profile"
)

// Where a phone measurement runs on the phone.
const (
	phoneProfileDir = adb.RemoteDir + "/profile"
	phoneProfileOut = phoneProfileDir + "/profile.yaml"
	phoneMeasurePID = adb.RemoteDir + "/run/measure.pid"
)

// PhoneMeasure is a device profile measured on a phone (MeasurePhone).
type PhoneMeasure struct {
	// ADB runs the adb client and Serial names the phone (both required).
	ADB    *adb.Client
	Serial string
	// Exe is a lesfarm executable for the phone on the host (a static
	// linux/arm64 build): it is pushed to the phone's cache by sha256 and
	// `EXE profile measure` runs on the phone (required).
	Exe string
	// Files are host files the measurement reads, by the flag that names
	// them (--model, --experts, --read-file, --page-file): each is pushed
	// to the phone's model cache by sha256 and the flag given its phone
	// path.
	Files map[string]string
	// Args are the rest of profile measure's arguments (--name, --file-size,
	// ...); MeasurePhone adds -o and, unless Args has one, --dir
	// (RemoteDir/profile, on /data like the store's files).
	Args []string
	// Progress, if set, receives each line the measurement prints on the
	// phone's stderr.
	Progress func(line string)
}

// MeasurePhone measures a phone's flash, memory and compute with the same
// code as `lesfarm profile measure` on a host, run on the phone over adb
// shell: O_DIRECT reads of a test file under /data/local/tmp (the storage
// the phone's expert store reads) and the reference decode on the phone's
// CPUs. It returns the profile YAML, headed by a comment naming the phone,
// after checking it parses as a profile. Errors are one line: a phone not
// attached or not usable, a /data/local/tmp mounted noexec, the
// measurement's own last line. Cancelling ctx stops the measurement on
// the phone (SIGTERM: it removes its test files).
func MeasurePhone(ctx context.Context, m PhoneMeasure) ([]byte, error) {
	c, serial := m.ADB, m.Serial
	fp, id, err := adb.Fingerprint(ctx, c, serial)
	if err != nil {
		return nil, fmt.Errorf("phone %s: %w", serial, err)
	}
	exe, err := pushHashed(ctx, c, serial, m.Exe, phoneBinDir, "", true)
	if err != nil {
		return nil, err
	}
	args := []string{exe, "profile", "measure"}
	for _, flag := range slices.Sorted(func(yield func(string) bool) {
		for k := range m.Files {
			if !yield(k) {
				return
			}
		}
	}) {
		ext := ""
		if strings.HasSuffix(m.Files[flag], ".gguf") {
			ext = ".gguf"
		}
		p, err := pushHashed(ctx, c, serial, m.Files[flag], phoneModelDir, ext, false)
		if err != nil {
			return nil, err
		}
		args = append(args, flag, p)
	}
	args = append(args, m.Args...)
	if !slices.ContainsFunc(m.Args, func(a string) bool { return a == "--dir" || strings.HasPrefix(a, "--dir=") }) {
		args = append(args, "--dir", phoneProfileDir)
	}
	args = append(args, "-o", phoneProfileOut)
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = shellWord(a)
	}
	// exec keeps the shell's pid, so the pid file names the measurement.
	script := "mkdir -p " + phoneProfileDir + " " + adb.RemoteDir + "/run && rm -f " + phoneProfileOut +
		" && echo $$ > " + phoneMeasurePID + " && exec " + strings.Join(quoted, " ")
	if err := runMeasure(ctx, c, serial, script, exe, m.Progress); err != nil {
		return nil, err
	}
	out, err := c.Run(ctx, serial, "exec-out", "cat "+phoneProfileOut)
	if err != nil {
		return nil, fmt.Errorf("phone %s: reading the measured profile: %w", serial, err)
	}
	_, _ = c.Shell(ctx, serial, "rm -f "+phoneProfileOut+" "+phoneMeasurePID)
	if _, err := profile.Parse(out); err != nil {
		return nil, fmt.Errorf("phone %s: the measured profile does not parse: %w", serial, err)
	}
	hdr := fmt.Sprintf("# phone %s: %s %s (%s), %s, build %s; measured on the phone over adb.\n",
		serial, fp.Manufacturer, fp.DeviceModel, fp.SoC, fp.OSVersion, id.BuildFingerprint)
	return append([]byte(strings.ToValidUTF8(hdr, "?")), out...), nil
}

// runMeasure runs the measurement's script on the phone, streaming its
// stderr lines to progress; on ctx's end it stops the measurement there.
func runMeasure(ctx context.Context, c *adb.Client, serial, script, exe string, progress func(string)) error {
	cmd := c.Command(serial, "shell", "-T", script)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%w: %v", adb.ErrNoADB, err)
	}
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, _ = c.Shell(kctx, serial, `p=$(cat `+phoneMeasurePID+` 2>/dev/null); [ -n "$p" ] && kill -TERM $p; true`)
			cancel()
			select { // the measurement removes its files, then exits
			case <-stopped:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
			}
		case <-stopped:
		}
	}()
	var tail []string
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.ToValidUTF8(sc.Text(), "?")
		if progress != nil {
			progress(line)
		}
		if tail = append(tail, line); len(tail) > 8 {
			tail = tail[1:]
		}
	}
	_, _ = io.Copy(io.Discard, stderr)
	err = cmd.Wait()
	close(stopped)
	if ctx.Err() != nil {
		return fmt.Errorf("phone %s: measurement interrupted: %w", serial, context.Cause(ctx))
	}
	if err == nil {
		return nil
	}
	said := strings.Join(tail, "; ")
	code := -1
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	}
	switch {
	case code == 126 || strings.Contains(said, "Permission denied") && strings.Contains(said, exe):
		return fmt.Errorf("phone %s cannot execute %s (is %s mounted noexec?): %s", serial, exe, adb.RemoteDir, said)
	case adb.Classify(said) != nil:
		return fmt.Errorf("phone %s: %w: %s", serial, adb.Classify(said), said)
	}
	if i := len(tail) - 1; i >= 0 {
		said = tail[i]
	}
	return fmt.Errorf("phone %s: profile measure exited with status %d: %s", serial, code, said)
}

// shellWord is a as one word of the phone's sh: as it is when it holds
// only characters sh takes literally, else quoted.
func shellWord(a string) string {
	if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:=%,+-@") == "" {
		return a
	}
	return adb.ShellQuote(a)
}

// pushHashed hashes the host file local and installs it on the phone in
// dir as SHA256+ext (cached there by sha256), returning its phone path.
func pushHashed(ctx context.Context, c *adb.Client, serial, local, dir, ext string, exec bool) (string, error) {
	f, err := os.Open(local)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	f.Close()
	if err != nil {
		return "", fmt.Errorf("hashing %s: %w", local, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	inst, err := adb.Install(ctx, c, serial, adb.InstallSpec{Local: local, SHA256: sum, Size: n, Dir: dir, Name: sum + ext, Exec: exec})
	if err != nil {
		return "", fmt.Errorf("pushing %s: %w", filepath.Base(local), err)
	}
	return inst.Path, nil
}

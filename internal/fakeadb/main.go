// Command fakeadb is a fake of Android's adb client for tests without a
// phone: each fake phone is a directory, and the linux/arm64 executables
// pushed to it run under qemu-aarch64 on the host.
//
// The farm is the directory $FAKEADB_DIR; phone SERIAL lives in
// $FAKEADB_DIR/SERIAL/ and holds, all optional:
//
//	state          the adb state `adb devices` prints: device (default),
//	               unauthorized, offline, recovery
//	unplugged      present: the phone is not attached (it vanishes from
//	               `adb devices`; every -s SERIAL command fails, and a
//	               running shell session ends with exit status 255)
//	getprop        the output of `getprop` ("[key]: [value]" lines)
//	dumpsys/NAME   the output of `dumpsys NAME` (battery, thermalservice)
//	rooted         present: `su` runs its command; absent: su: not found
//	push_truncate  present: a push copies only the first half of the file
//	               and still reports success (a push broken half-way)
//	noexec         present: /data/local/tmp is mounted noexec: running an
//	               executable under root/data fails as Android's sh does
//	               ("can't execute: Permission denied", exit status 126)
//	taskset        written by the fake: one line per `taskset MASK CMD`
//	               the phone ran ("MASK CMD")
//	root/          the phone's filesystem: root/proc/meminfo,
//	               root/sys/devices/system/cpu/..., root/data/local/tmp/
//	log            fakeadb appends one line per invocation (its arguments)
//
// Supported commands: devices [-l], get-state, [-s SERIAL] shell [-T] CMD...,
// exec-out CMD..., push LOCAL REMOTE, pull REMOTE LOCAL; ANDROID_SERIAL is
// honoured like -s. A shell command is run by the host's /bin/sh in the
// phone's root/ directory, after every absolute path under /data, /sys,
// /proc/meminfo, /proc/cpuinfo and /proc/sys/vm is rewritten into root/
// (so a rooted fake phone's echo 3 > /proc/sys/vm/drop_caches writes its
// own file and drops nothing of the host's); an aarch64 ELF
// executable in command position (at the start, after exec, ;, && or ||)
// is run as `qemu-aarch64 FILE` ($FAKEADB_QEMU overrides the path).
// Stdin is forwarded to the command, and its end closes the command's
// stdin, as adb's shell protocol does; phone paths in it are rewritten
// like the command's (a runner's job names the model and its work dir by
// phone paths), line by line. The
// phone's commands getprop, dumpsys and cmd (cmd power
// set-fixed-performance-mode-enabled, recorded in the file
// fixed_performance), su and taskset are fakeadb itself, called by those
// names from a bin directory first in PATH. taskset (toybox's form:
// taskset HEXMASK CMD ARGS...) records the mask in the file taskset and
// runs the command, an aarch64 executable under qemu; it does not set the
// CPU affinity (the host has other CPUs than the phone), so pinning
// changes nothing in how fast a fake phone computes.
//
// Not modelled: the adb server and its port (every call is self-contained,
// there is no start-server, kill-server, forward, reverse, install, logcat,
// wait-for-device, tcpip or connect); USB transport speed (a push is a local
// copy); PTYs (shell never allocates one, as with -T); the shell protocol's
// exact exit codes for transport errors (255 here); Android's toybox
// userland (commands are the host's: GNU coreutils' df, sha256sum, cat,
// setsid, kill); SELinux and the noexec mounts of real /data/local/tmp
// (a fake phone can be made non-executable only by chmod of root/data);
// per-phone CPU speed, frequency scaling and throttling (every phone computes
// at the host's speed, under qemu's slow-down); processes on an unplugged
// phone keep running, as on a real one, but nothing kills them when the
// host reboots.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	name := filepath.Base(os.Args[0])
	var code int
	switch name {
	case "getprop", "dumpsys", "cmd", "su", "taskset", "noexec":
		code = phoneTool(name, os.Args[1:])
	default:
		code = adb(os.Args[1:])
	}
	os.Exit(code)
}

func fail(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, format+"\n", a...)
	return 1
}

func farmDir() string { return os.Getenv("FAKEADB_DIR") }

// phone is one fake phone directory.
type phone struct{ serial, dir string }

func (p phone) attached() bool { return !exists(filepath.Join(p.dir, "unplugged")) }

func (p phone) state() string {
	b, err := os.ReadFile(filepath.Join(p.dir, "state"))
	if err != nil {
		return "device"
	}
	return strings.TrimSpace(string(b))
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func phones() []phone {
	ents, _ := os.ReadDir(farmDir())
	var out []phone
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, phone{e.Name(), filepath.Join(farmDir(), e.Name())})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].serial < out[j].serial })
	return out
}

func adb(args []string) int {
	if farmDir() == "" {
		return fail("fakeadb: FAKEADB_DIR is not set")
	}
	logCall(args)
	serial := os.Getenv("ANDROID_SERIAL")
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-s":
			if len(args) < 2 {
				return fail("adb: -s requires an argument")
			}
			serial, args = args[1], args[2:]
		case "-P", "-H", "-L":
			args = args[min(2, len(args)):]
		default:
			args = args[1:] // -d, -e, -a: ignored
		}
	}
	if len(args) == 0 {
		return fail("adb: no command")
	}
	if args[0] == "devices" {
		fmt.Println("List of devices attached")
		for _, p := range phones() {
			if p.attached() {
				fmt.Printf("%s\t%s\n", p.serial, p.state())
			}
		}
		fmt.Println()
		return 0
	}
	p, code := pick(serial)
	if code != 0 {
		return code
	}
	if args[0] == "get-state" {
		fmt.Println(p.state())
		return 0
	}
	switch st := p.state(); st {
	case "device":
	case "unauthorized":
		return fail("adb: device unauthorized.\nThis adb server's $ADB_VENDOR_KEYS is not set\nTry 'adb kill-server' if that seems wrong.\nOtherwise check for a confirmation dialog on your device.")
	case "recovery":
		if args[0] != "shell" {
			return fail("adb: device is in recovery")
		}
	default:
		return fail("adb: device %s", st)
	}
	switch args[0] {
	case "shell", "exec-out":
		rest := args[1:]
		for len(rest) > 0 && (rest[0] == "-T" || rest[0] == "-t" || rest[0] == "-x" || rest[0] == "-n") {
			rest = rest[1:]
		}
		return shell(p, strings.Join(rest, " "), args[0] == "exec-out")
	case "push":
		if len(args) != 3 {
			return fail("adb: usage: push LOCAL REMOTE")
		}
		return push(p, args[1], args[2])
	case "pull":
		if len(args) != 3 {
			return fail("adb: usage: pull REMOTE LOCAL")
		}
		return copyFile(p.path(args[1]), args[2], false)
	}
	return fail("adb: unknown command %s (fakeadb models only devices, get-state, shell, exec-out, push, pull)", args[0])
}

func logCall(args []string) {
	f, err := os.OpenFile(filepath.Join(farmDir(), "log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		fmt.Fprintf(f, "%s %q\n", time.Now().Format("15:04:05.000"), args)
		f.Close()
	}
}

// pick finds the phone a command addresses, as adb does.
func pick(serial string) (phone, int) {
	var attached []phone
	for _, p := range phones() {
		if !p.attached() {
			continue
		}
		if serial != "" && p.serial == serial {
			return p, 0
		}
		attached = append(attached, p)
	}
	switch {
	case serial != "":
		return phone{}, fail("adb: device '%s' not found", serial)
	case len(attached) == 0:
		return phone{}, fail("adb: no devices/emulators found")
	case len(attached) > 1:
		return phone{}, fail("adb: more than one device/emulator")
	}
	return attached[0], 0
}

// path maps a phone path into the phone's root directory.
func (p phone) path(phonePath string) string {
	return filepath.Join(p.dir, "root", filepath.Clean("/"+phonePath))
}

var phonePaths = regexp.MustCompile(`(^|[\s'"=;(>&|<])((?:/data|/sys|/proc/meminfo|/proc/cpuinfo|/proc/sys/vm)(?:/[^\s'";|&)<>]*)?)`)

// translate rewrites the phone paths of cmd into the phone's directory and
// runs aarch64 executables in command position under qemu.
func (p phone) translate(cmd string) string {
	qemu := qemuPath()
	noexec := exists(filepath.Join(p.dir, "noexec"))
	var b strings.Builder
	last := 0
	for _, m := range phonePaths.FindAllStringSubmatchIndex(cmd, -1) {
		start, end := m[4], m[5]
		b.WriteString(cmd[last:start])
		mapped := p.path(cmd[start:end])
		before := strings.TrimRight(cmd[:start], " \t'\"")
		if before == "" || strings.HasSuffix(before, "exec") || strings.HasSuffix(before, ";") ||
			strings.HasSuffix(before, "&&") || strings.HasSuffix(before, "||") || strings.HasSuffix(before, "-c") {
			switch {
			case noexec && isFile(mapped):
				b.WriteString("noexec ") // the phone tool that fails as a noexec mount does
			case isARM64(mapped):
				b.WriteString(qemu + " ")
			}
		}
		b.WriteString(mapped)
		last = end
	}
	b.WriteString(cmd[last:])
	return b.String()
}

func qemuPath() string {
	if q := os.Getenv("FAKEADB_QEMU"); q != "" {
		return q
	}
	return "qemu-aarch64"
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// isARM64 reports whether path is an ELF executable for aarch64.
func isARM64(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var h [20]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return false
	}
	return bytes.Equal(h[:4], []byte("\x7fELF")) && h[18] == 0xb7 && h[19] == 0 // EM_AARCH64, little-endian
}

// shell runs cmd on the phone; it ends with status 255 when the phone is
// unplugged meanwhile (what is running there keeps running).
func shell(p phone, cmd string, merged bool) int {
	bin := filepath.Join(p.dir, ".bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return fail("fakeadb: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fail("fakeadb: %v", err)
	}
	for _, t := range []string{"getprop", "dumpsys", "cmd", "su", "taskset", "noexec"} {
		if _, err := os.Lstat(filepath.Join(bin, t)); err != nil {
			_ = os.Symlink(self, filepath.Join(bin, t))
		}
	}
	root := filepath.Join(p.dir, "root")
	_ = os.MkdirAll(filepath.Join(root, "data", "local", "tmp"), 0o755)
	c := exec.Command("/bin/sh", "-c", p.translate(cmd))
	c.Dir = root
	c.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "FAKEADB_PHONE="+p.dir)
	// adb shell forwards stdin to the phone (and its end, with the shell
	// protocol). The fake does too, rewriting the phone paths it carries:
	// a runner's job names its model and work dir by phone paths.
	in, err := c.StdinPipe()
	if err != nil {
		return fail("fakeadb: %v", err)
	}
	// The phone's output reaches the host through the fake, as through
	// adb: when the session ends (unplugged) the host's pipes close, even
	// though the phone's processes keep running. Handing them the fake's
	// own stdout instead kept the host reading until the phone's runner
	// ended.
	c.Stdout, c.Stderr = hostPipe{os.Stdout}, hostPipe{os.Stderr}
	if merged {
		c.Stderr = c.Stdout
	}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		return fail("fakeadb: %v", err)
	}
	go p.forwardStdin(in)
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if ee.ExitCode() < 0 {
					return 128 + 9
				}
				return ee.ExitCode()
			}
			if err != nil {
				return fail("fakeadb: %v", err)
			}
			return 0
		case <-tick.C:
			if !p.attached() {
				// The USB link is gone: the session ends; what runs on the
				// phone in its own session keeps running.
				_ = syscall.Kill(-c.Process.Pid, syscall.SIGHUP)
				fmt.Fprintln(os.Stderr, "adb: error: closed")
				return 255
			}
		}
	}
}

// hostPipe is an output of the fake that exec.Cmd cannot hand to the
// child as a file: the child gets a pipe that the fake copies from.
type hostPipe struct{ io.Writer }

// forwardStdin copies the fake's stdin to the phone command line by line,
// with phone paths rewritten into the phone's directory, and closes it at
// the end of input.
func (p phone) forwardStdin(in io.WriteCloser) {
	defer in.Close()
	r := bufio.NewReaderSize(os.Stdin, 64<<10)
	for {
		line, err := r.ReadString('\n')
		if line != "" {
			if _, werr := io.WriteString(in, p.rewrite(line)); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// rewrite maps every phone path of s into the phone's directory.
func (p phone) rewrite(s string) string {
	return phonePaths.ReplaceAllStringFunc(s, func(m string) string {
		i := strings.IndexByte(m, '/')
		return m[:i] + p.path(m[i:])
	})
}

func push(p phone, local, remote string) int {
	dst := p.path(remote)
	if strings.HasSuffix(remote, "/") {
		dst = filepath.Join(dst, filepath.Base(local))
	}
	if code := copyFile(local, dst, exists(filepath.Join(p.dir, "push_truncate"))); code != 0 {
		return code
	}
	fmt.Printf("%s: 1 file pushed.\n", local)
	return 0
}

func copyFile(src, dst string, half bool) int {
	data, err := os.ReadFile(src)
	if err != nil {
		return fail("adb: error: cannot stat '%s': No such file or directory", src)
	}
	if half {
		data = data[:len(data)/2]
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		return fail("adb: error: failed to copy '%s' to '%s': %v", src, dst, err)
	}
	return 0
}

// phoneTool is one of the phone's own commands.
func phoneTool(name string, args []string) int {
	dir := os.Getenv("FAKEADB_PHONE")
	switch name {
	case "getprop":
		data, _ := os.ReadFile(filepath.Join(dir, "getprop"))
		if len(args) == 0 {
			os.Stdout.Write(data)
			return 0
		}
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, "]: ["); ok && strings.TrimPrefix(k, "[") == args[0] {
				fmt.Println(strings.TrimSuffix(strings.TrimSpace(v), "]"))
				return 0
			}
		}
		fmt.Println()
		return 0
	case "dumpsys":
		if len(args) == 0 {
			return fail("dumpsys: a service name is required")
		}
		data, err := os.ReadFile(filepath.Join(dir, "dumpsys", args[0]))
		if err != nil {
			return fail("Can't find service: %s", args[0])
		}
		os.Stdout.Write(data)
		return 0
	case "cmd":
		if len(args) == 3 && args[0] == "power" && args[1] == "set-fixed-performance-mode-enabled" {
			if err := os.WriteFile(filepath.Join(dir, "fixed_performance"), []byte(args[2]+"\n"), 0o644); err != nil {
				return fail("cmd: %v", err)
			}
			return 0
		}
		return fail("cmd: unknown command %q", args)
	case "noexec":
		// Android's sh on a noexec mount: the command cannot be executed.
		fmt.Fprintf(os.Stderr, "/system/bin/sh: %s: can't execute: Permission denied\n", strings.Join(args[:min(1, len(args))], ""))
		return 126
	case "taskset":
		return taskset(dir, args)
	case "su":
		if !exists(filepath.Join(dir, "rooted")) {
			return fail("/system/bin/sh: su: not found")
		}
		if len(args) >= 2 && args[0] == "-c" {
			args = args[1:]
		} else if len(args) >= 1 && args[0] == "0" {
			args = args[1:]
		}
		c := exec.Command("/bin/sh", "-c", strings.Join(args, " "))
		c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
		if err := c.Run(); err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return ee.ExitCode()
			}
			return 1
		}
		return 0
	}
	return 1
}

// taskset runs `taskset HEXMASK CMD ARGS...` as toybox does, but only
// records the mask (file taskset) instead of setting the affinity.
func taskset(dir string, args []string) int {
	if len(args) < 2 || strings.HasPrefix(args[0], "-") {
		return fail("usage: taskset MASK COMMAND... (fakeadb models only this form)")
	}
	mask := strings.TrimPrefix(strings.ToLower(args[0]), "0x")
	if mask == "" || strings.Trim(mask, "0123456789abcdef") != "" || strings.Trim(mask, "0") == "" {
		return fail("taskset: bad mask '%s'", args[0])
	}
	f, err := os.OpenFile(filepath.Join(dir, "taskset"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fail("taskset: %v", err)
	}
	fmt.Fprintf(f, "%s %s\n", mask, filepath.Base(args[1]))
	f.Close()
	argv := args[1:]
	if exists(filepath.Join(dir, "noexec")) && strings.Contains(argv[0], "/root/data/") {
		return phoneTool("noexec", argv)
	}
	if isARM64(argv[0]) {
		argv = append([]string{qemuPath()}, argv...)
	}
	bin, err := exec.LookPath(argv[0])
	if err != nil {
		return fail("taskset: %s: %v", argv[0], err)
	}
	// Replace this process, so the command keeps its pid and process group
	// (the agent kills the runner's group by pid).
	if err := syscall.Exec(bin, argv, os.Environ()); err != nil {
		return fail("taskset: exec %s: %v", argv[0], err)
	}
	return 0
}

package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progressLineEvery is how often a progress bar writing to something other
// than a terminal (a CI log, a file) prints a line.
const progressLineEvery = 10 * time.Second

// newBytesBar is the progress bar of the long byte-counting commands
// (pack, synth, quantize, artifact uploads). On a terminal it redraws in
// place; elsewhere it prints its state as a plain line at most every
// progressLineEvery and once at the end, so CI logs get a few readable
// lines instead of thousands of carriage-return frames. It shows no rate
// before a second has passed (an early rate is measured over
// microseconds and reads "2.2 TB/s").
func newBytesBar(env *Env, total int64, desc string, quiet bool, opts ...progressbar.Option) *progressbar.ProgressBar {
	w := env.Stderr
	onTerm := isTerminal(w)
	if !onTerm {
		w = newLineFrames(w, progressLineEvery, time.Now)
	}
	base := []progressbar.Option{
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowBytes(true),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(time.Second),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetVisibility(!quiet),
		progressbar.OptionUseANSICodes(onTerm),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	}
	return progressbar.NewOptions64(total, append(base, opts...)...)
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// lineFrames turns a progress bar's carriage-return frames into plain
// lines: it keeps the latest frame and writes it, with a newline, when
// every has passed since the last line, and on the bar's final newline.
type lineFrames struct {
	mu    sync.Mutex
	w     io.Writer
	every time.Duration
	now   func() time.Time
	last  time.Time
	frame []byte
}

func newLineFrames(w io.Writer, every time.Duration, now func() time.Time) *lineFrames {
	return &lineFrames{w: w, every: every, now: now, last: now()}
}

// ansi matches the escape sequences a bar may draw with.
var ansi = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

func (l *lineFrames) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range p {
		switch c {
		case '\r': // a new frame starts: the one before it is whole
			if l.now().Sub(l.last) >= l.every {
				if err := l.flush(); err != nil {
					return 0, err
				}
			}
			l.frame = l.frame[:0]
		case '\n':
			if err := l.flush(); err != nil {
				return 0, err
			}
		default:
			l.frame = append(l.frame, c)
		}
	}
	return len(p), nil
}

// flush writes the current frame as a line, if it has any text.
func (l *lineFrames) flush() error {
	line := bytes.TrimSpace(ansi.ReplaceAll(l.frame, nil))
	l.frame = l.frame[:0]
	if len(line) == 0 {
		return nil
	}
	l.last = l.now()
	_, err := l.w.Write(append(line, '\n'))
	return err
}
